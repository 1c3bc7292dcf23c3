-- Key pairs (os-keypairs): unique by user and name, the record as JSON.
CREATE TABLE key_pairs (
    id      bigserial PRIMARY KEY,
    user_id text COLLATE "C" NOT NULL,
    name    text COLLATE "C" NOT NULL,
    data    jsonb NOT NULL,
    UNIQUE (user_id, name)
);
