-- Placement: providers, their inventories (with the usage maintained by
-- WriteAllocations), consumers and their allocations.
CREATE TABLE providers (
    uuid       TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    generation INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE inventories (
    provider_uuid    TEXT    NOT NULL REFERENCES providers (uuid) ON DELETE CASCADE,
    resource_class   TEXT    NOT NULL,
    total            INTEGER NOT NULL,
    reserved         INTEGER NOT NULL,
    min_unit         INTEGER NOT NULL,
    max_unit         INTEGER NOT NULL,
    step_size        INTEGER NOT NULL,
    allocation_ratio REAL    NOT NULL,
    -- Sum of allocations.used for this provider and class, kept in step by
    -- every allocation write in the same transaction.
    used             INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0),
    PRIMARY KEY (provider_uuid, resource_class)
) WITHOUT ROWID;

CREATE TABLE consumers (
    uuid       TEXT    PRIMARY KEY,
    project_id TEXT    NOT NULL,
    user_id    TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    generation INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE allocations (
    consumer_uuid  TEXT    NOT NULL REFERENCES consumers (uuid) ON DELETE CASCADE,
    provider_uuid  TEXT    NOT NULL,
    resource_class TEXT    NOT NULL,
    used           INTEGER NOT NULL CHECK (used > 0),
    PRIMARY KEY (consumer_uuid, provider_uuid, resource_class),
    -- An allocation needs its inventory: removing an inventory (or its
    -- provider) that still has allocations fails.
    FOREIGN KEY (provider_uuid, resource_class) REFERENCES inventories (provider_uuid, resource_class)
) WITHOUT ROWID;

CREATE INDEX allocations_by_provider ON allocations (provider_uuid, resource_class, consumer_uuid);

-- The change stream the scheduler's host view follows.
CREATE TABLE changes (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT    NOT NULL,
    key  TEXT    NOT NULL
);

-- Compute records, kept as JSON next to the columns they are looked up by.
CREATE TABLE host_records (
    host TEXT PRIMARY KEY,
    data TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE services (
    host TEXT PRIMARY KEY,
    data TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE instances (
    uuid    TEXT    PRIMARY KEY,
    host    TEXT    NOT NULL,
    version INTEGER NOT NULL,
    data    TEXT    NOT NULL
) WITHOUT ROWID;

CREATE INDEX instances_by_host ON instances (host);

CREATE TABLE migrations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid          TEXT    NOT NULL,
    instance_uuid TEXT    NOT NULL,
    source_host   TEXT    NOT NULL,
    dest_host     TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    active        INTEGER NOT NULL, -- 1 unless the status is terminal
    version       INTEGER NOT NULL,
    data          TEXT    NOT NULL
);

CREATE INDEX migrations_by_instance ON migrations (instance_uuid);
CREATE INDEX migrations_by_source ON migrations (source_host);
CREATE INDEX migrations_by_dest ON migrations (dest_host);
CREATE INDEX migrations_by_status ON migrations (status);
CREATE INDEX migrations_active ON migrations (id) WHERE active = 1;
