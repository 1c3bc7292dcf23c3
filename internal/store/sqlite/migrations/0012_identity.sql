-- The identity directory (users, projects, role assignments, token
-- revocations) as one JSON document with a version, so every replica
-- reads the same and a write based on a stale read is refused.
CREATE TABLE identity_directory (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    doc     TEXT    NOT NULL
);

-- One record per enrolled (or revoked) host's bus identity.
CREATE TABLE agent_credentials (
    host TEXT PRIMARY KEY,
    data TEXT NOT NULL
);
