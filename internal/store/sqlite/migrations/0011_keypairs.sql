-- Key pairs (os-keypairs): unique by user and name, the record as JSON.
CREATE TABLE key_pairs (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id TEXT    NOT NULL,
    name    TEXT    NOT NULL,
    data    TEXT    NOT NULL,
    UNIQUE (user_id, name)
);
