-- Compute host aggregates and server groups, kept as JSON next to the
-- columns they are looked up by.
CREATE TABLE aggregates (
    id   INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT    NOT NULL UNIQUE,
    data TEXT    NOT NULL
);

CREATE TABLE server_groups (
    uuid TEXT PRIMARY KEY,
    data TEXT NOT NULL
) WITHOUT ROWID;
