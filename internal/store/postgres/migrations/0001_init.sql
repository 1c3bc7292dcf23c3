-- Placement: providers, their inventories (with the usage the allocations
-- add up to), consumers and their allocations.
--
-- Key columns use the "C" collation: they sort byte by byte, as Go's
-- sort.Strings and SQLite do, whatever the database's locale (ORDER BY on
-- them also sets the order writers lock rows in).
CREATE TABLE providers (
    uuid       text COLLATE "C" PRIMARY KEY,
    name       text COLLATE "C" NOT NULL UNIQUE,
    generation bigint NOT NULL CHECK (generation >= 0)
);

-- The CHECKs repeat placement.Inventory.Validate, so a row that placement
-- would refuse cannot be stored by any path. used <= capacity is not one
-- of them: lowering an inventory below its usage is allowed (the provider
-- then takes no new allocations of that class), and capacity is a
-- floating-point product besides.
CREATE TABLE inventories (
    provider_uuid    text COLLATE "C" NOT NULL REFERENCES providers (uuid) ON DELETE CASCADE,
    resource_class   text COLLATE "C" NOT NULL,
    total            bigint           NOT NULL CHECK (total >= 1),
    reserved         bigint           NOT NULL CHECK (reserved >= 0 AND reserved <= total),
    min_unit         bigint           NOT NULL CHECK (min_unit >= 1),
    max_unit         bigint           NOT NULL CHECK (max_unit >= min_unit),
    step_size        bigint           NOT NULL CHECK (step_size >= 1),
    -- > 0 and finite ('NaN' sorts above 'Infinity' in PostgreSQL).
    allocation_ratio double precision NOT NULL CHECK (allocation_ratio > 0 AND allocation_ratio < 'Infinity'),
    -- Sum of allocations.used for this provider and class, kept in step by
    -- the allocations_used trigger below in the same transaction.
    used             bigint           NOT NULL DEFAULT 0 CHECK (used >= 0),
    PRIMARY KEY (provider_uuid, resource_class)
);

CREATE TABLE consumers (
    uuid       text COLLATE "C" PRIMARY KEY,
    project_id text   NOT NULL,
    user_id    text   NOT NULL,
    type       text   NOT NULL,
    generation bigint NOT NULL CHECK (generation >= 1)
);

CREATE TABLE allocations (
    consumer_uuid  text COLLATE "C" NOT NULL REFERENCES consumers (uuid) ON DELETE CASCADE,
    provider_uuid  text COLLATE "C" NOT NULL,
    resource_class text COLLATE "C" NOT NULL,
    used           bigint NOT NULL CHECK (used > 0),
    PRIMARY KEY (consumer_uuid, provider_uuid, resource_class),
    -- An allocation needs its inventory: removing an inventory (or its
    -- provider) that still has allocations fails.
    FOREIGN KEY (provider_uuid, resource_class) REFERENCES inventories (provider_uuid, resource_class)
);

CREATE INDEX allocations_by_provider ON allocations (provider_uuid, resource_class, consumer_uuid);

-- inventories.used follows every change to allocations, whoever makes it
-- (the store, a cascade from a deleted consumer, an operator's hand-written
-- DELETE), so usage always equals the sum of the allocations.
CREATE FUNCTION allocations_used() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE inventories SET used = used - OLD.used
            WHERE provider_uuid = OLD.provider_uuid AND resource_class = OLD.resource_class;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'allocation of % % without an inventory', OLD.provider_uuid, OLD.resource_class;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE inventories SET used = used + NEW.used
            WHERE provider_uuid = NEW.provider_uuid AND resource_class = NEW.resource_class;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'allocation of % % without an inventory', NEW.provider_uuid, NEW.resource_class;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER allocations_used AFTER INSERT OR UPDATE OR DELETE ON allocations
    FOR EACH ROW EXECUTE FUNCTION allocations_used();

-- The change stream the scheduler's host view follows. seq is not a
-- sequence: it comes from the single row of change_counter, which every
-- transaction appending changes updates last, just before it commits. The
-- row lock orders those commits, so seq values become visible in order and
-- without gaps (see the package documentation).
CREATE TABLE change_counter (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    seq bigint  NOT NULL CHECK (seq >= 0)
);
INSERT INTO change_counter (one, seq) VALUES (true, 0);

CREATE TABLE changes (
    seq  bigint PRIMARY KEY,
    kind text   NOT NULL,
    key  text   NOT NULL
);

-- Compute records, kept as JSONB next to the columns they are looked up by.
CREATE TABLE host_records (
    host text COLLATE "C" PRIMARY KEY,
    data jsonb NOT NULL
);

CREATE TABLE services (
    host text COLLATE "C" PRIMARY KEY,
    data jsonb NOT NULL
);

CREATE TABLE instances (
    uuid    text COLLATE "C" PRIMARY KEY,
    host    text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    data    jsonb  NOT NULL
);

CREATE INDEX instances_by_host ON instances (host);

CREATE TABLE migrations (
    id            bigint  GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    uuid          text    NOT NULL,
    instance_uuid text    NOT NULL,
    source_host   text    NOT NULL,
    dest_host     text    NOT NULL,
    status        text    NOT NULL,
    active        boolean NOT NULL, -- false once the status is terminal
    version       bigint  NOT NULL,
    data          jsonb   NOT NULL
);

CREATE INDEX migrations_by_uuid ON migrations (uuid);
CREATE INDEX migrations_by_instance ON migrations (instance_uuid);
CREATE INDEX migrations_by_source ON migrations (source_host);
CREATE INDEX migrations_by_dest ON migrations (dest_host);
CREATE INDEX migrations_by_status ON migrations (status);
CREATE INDEX migrations_active ON migrations (id) WHERE active;

-- Flavors: instance sizes, kept as JSONB next to their ID and unique name.
CREATE TABLE flavors (
    id   text COLLATE "C" PRIMARY KEY,
    name text COLLATE "C" NOT NULL UNIQUE,
    data jsonb NOT NULL
);
