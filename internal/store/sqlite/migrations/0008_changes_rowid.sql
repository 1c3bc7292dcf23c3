-- The change stream without AUTOINCREMENT: every write transaction appends
-- a change row, and AUTOINCREMENT made each append also update
-- sqlite_sequence (one more b-tree write and one more WAL page per commit).
-- The sequence numbers stay the same: an INTEGER PRIMARY KEY takes one more
-- than the largest seq in the table, and the newest row is never deleted
-- (trimming keeps the most recent Options.KeepChanges rows, at least one),
-- so a seq is never handed out twice and always grows.
CREATE TABLE changes_new (
    seq  INTEGER PRIMARY KEY,
    kind TEXT    NOT NULL,
    key  TEXT    NOT NULL
);
INSERT INTO changes_new (seq, kind, key) SELECT seq, kind, key FROM changes ORDER BY seq;
DROP TABLE changes;
ALTER TABLE changes_new RENAME TO changes;
