-- Migrations are looked up by their UUID (the migration consumer's) when
-- an agent's audit meets an allocation held by a migration consumer.
CREATE INDEX migrations_by_uuid ON migrations (uuid);
