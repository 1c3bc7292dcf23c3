-- The capacity guard of 0002 computed floor((total - reserved) *
-- allocation_ratio) straight into a bigint: with a huge allocation ratio
-- (Placement takes up to 3.4e38) the product is past bigint's range and
-- every allocation on the provider failed with "bigint out of range". As
-- placement.Inventory.Capacity does, a capacity past the range is taken as
-- the largest bigint.
CREATE OR REPLACE FUNCTION inventories_within_capacity() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    capf double precision := greatest(floor((NEW.total - NEW.reserved)::double precision * NEW.allocation_ratio), 0);
    cap bigint;
BEGIN
    -- 9223372036854775807 as a double is 2^63, one past the range.
    IF capf >= 9223372036854775807::double precision THEN
        cap := 9223372036854775807;
    ELSE
        cap := capf::bigint;
    END IF;
    IF NEW.used > cap THEN
        RAISE EXCEPTION 'provider % would be over capacity: % % used of capacity %',
            NEW.provider_uuid, NEW.used, NEW.resource_class, cap
            USING ERRCODE = 'check_violation', CONSTRAINT = 'inventories_within_capacity',
                  DETAIL = format('%s %s %s %s', NEW.provider_uuid, NEW.resource_class, NEW.used, cap);
    END IF;
    RETURN NEW;
END
$$;
