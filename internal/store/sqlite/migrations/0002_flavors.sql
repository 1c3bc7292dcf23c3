-- Flavors: instance sizes, kept as JSON next to their ID and unique name.
CREATE TABLE flavors (
    id   TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    data TEXT NOT NULL
) WITHOUT ROWID;
