-- Instance actions (os-instance-actions): one row per user request on an
-- instance, kept after the instance is deleted. id orders them.
CREATE TABLE instance_actions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_uuid TEXT NOT NULL,
    request_id    TEXT NOT NULL,
    data          TEXT NOT NULL,
    UNIQUE (instance_uuid, request_id)
);
