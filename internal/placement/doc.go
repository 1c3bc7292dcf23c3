// Package placement is keel's resource model, with OpenStack Placement's
// names and semantics: resource classes, inventories, allocations held by
// consumers on resource providers, and the generations that make every write
// optimistic.
//
// It is pure: no I/O, no clock. The store packages persist these types and
// call PlanWrites, inside their transaction, to decide every allocation
// write (generations, capacity through Fits, atomic moves); the scheduler
// checks hosts with Inventory.Capacity and Admits, the one fit rule Fits
// applies too, so that "fits" means one thing everywhere.
//
// Capacity of one inventory is (total − reserved) × allocation_ratio, rounded
// down. An allocation of n units of a class fits a provider when the class is
// in its inventory, min_unit ≤ n ≤ max_unit, n is a multiple of step_size, and
// usage + n ≤ capacity.
package placement
