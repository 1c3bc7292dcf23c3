-- Move plans (drain, rebalance, evacuate-all): the record as JSON, with
-- its state, whether it is still active, and its version for optimistic
-- updates.
CREATE TABLE plans (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    state   TEXT    NOT NULL,
    active  INTEGER NOT NULL, -- 1 unless the state is final
    version INTEGER NOT NULL,
    data    TEXT    NOT NULL
);

CREATE INDEX plans_active ON plans (id) WHERE active = 1;
