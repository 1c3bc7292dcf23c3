-- Compute host aggregates and server groups, kept as JSON next to the
-- columns they are looked up by.
CREATE TABLE aggregates (
    id   bigserial PRIMARY KEY,
    name text COLLATE "C" NOT NULL UNIQUE,
    data jsonb NOT NULL
);

CREATE TABLE server_groups (
    uuid text COLLATE "C" PRIMARY KEY,
    data jsonb NOT NULL
);
