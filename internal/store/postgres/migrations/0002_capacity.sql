-- The store's own guard against overcommit: whatever writes the
-- allocations (the store, an operator's hand-written INSERT), no
-- transaction may raise a class's usage above its capacity,
-- floor((total - reserved) * allocation_ratio) as placement.Inventory
-- computes it (the same double-precision product). placement.PlanWrites
-- refuses such writes first; this trigger is what holds if any path
-- bypassed it.
--
-- Only an increase is refused: lowering an inventory below its usage stays
-- allowed (as in Placement; the provider then takes nothing new), and an
-- over-capacity provider may still give allocations back. The store writes
-- a plan's removals before its additions, so a move within one provider
-- never looks like an increase on the way.
CREATE FUNCTION inventories_within_capacity() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cap bigint := greatest(floor((NEW.total - NEW.reserved)::double precision * NEW.allocation_ratio), 0);
BEGIN
    IF NEW.used > cap THEN
        RAISE EXCEPTION 'provider % would be over capacity: % % used of capacity %',
            NEW.provider_uuid, NEW.used, NEW.resource_class, cap
            USING ERRCODE = 'check_violation', CONSTRAINT = 'inventories_within_capacity',
                  DETAIL = format('%s %s %s %s', NEW.provider_uuid, NEW.resource_class, NEW.used, cap);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER inventories_within_capacity BEFORE UPDATE OF used ON inventories
    FOR EACH ROW WHEN (NEW.used > OLD.used)
    EXECUTE FUNCTION inventories_within_capacity();
