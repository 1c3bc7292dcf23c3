-- Placement's provider trees, traits and aggregates. A provider's traits and
-- aggregates are JSON arrays of names, sorted: they are read with the
-- provider and written whole, as the API sets them.
ALTER TABLE providers ADD COLUMN parent_uuid TEXT REFERENCES providers (uuid);
ALTER TABLE providers ADD COLUMN traits TEXT NOT NULL DEFAULT '[]';
ALTER TABLE providers ADD COLUMN aggregates TEXT NOT NULL DEFAULT '[]';
CREATE INDEX providers_by_parent ON providers (parent_uuid) WHERE parent_uuid IS NOT NULL;

-- The traits and resource classes created through the API (CUSTOM_*); the
-- standard ones are built into keel.
CREATE TABLE custom_traits (
    name TEXT PRIMARY KEY
) WITHOUT ROWID;

CREATE TABLE custom_resource_classes (
    name TEXT PRIMARY KEY
) WITHOUT ROWID;
