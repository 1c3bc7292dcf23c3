-- The store's own guard against overcommit: no write may raise a class's
-- usage above its capacity, (total - reserved) * allocation_ratio rounded
-- down as placement.Inventory computes it (REAL is the same double
-- precision; CAST to INTEGER truncates, which is the floor of a
-- non-negative number). placement.PlanWrites refuses such writes first;
-- this trigger is what holds if any path bypassed it. Only an increase is
-- refused: lowering an inventory below its usage stays allowed (as in
-- Placement), and an over-capacity provider may still give allocations
-- back. The store applies each plan's net change per class, so a move
-- within one provider is never an increase.
CREATE TRIGGER inventories_within_capacity BEFORE UPDATE OF used ON inventories
    FOR EACH ROW WHEN NEW.used > OLD.used
        AND NEW.used > max(CAST((NEW.total - NEW.reserved) * NEW.allocation_ratio AS INTEGER), 0)
BEGIN
    SELECT RAISE(ABORT, 'inventories_within_capacity: usage over capacity');
END;
