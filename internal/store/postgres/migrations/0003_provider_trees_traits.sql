-- Placement's provider trees, traits and aggregates. A provider's traits
-- and aggregates are arrays of names, sorted: they are read with the
-- provider and written whole, as the API sets them.
ALTER TABLE providers ADD COLUMN parent_uuid text COLLATE "C" REFERENCES providers (uuid);
ALTER TABLE providers ADD COLUMN traits text[] COLLATE "C" NOT NULL DEFAULT '{}';
ALTER TABLE providers ADD COLUMN aggregates text[] COLLATE "C" NOT NULL DEFAULT '{}';
CREATE INDEX providers_by_parent ON providers (parent_uuid) WHERE parent_uuid IS NOT NULL;
CREATE INDEX providers_by_trait ON providers USING gin (traits);

-- The traits and resource classes created through the API (CUSTOM_*); the
-- standard ones are built into keel.
CREATE TABLE custom_traits (
    name text COLLATE "C" PRIMARY KEY
);

CREATE TABLE custom_resource_classes (
    name text COLLATE "C" PRIMARY KEY
);
