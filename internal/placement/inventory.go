package placement

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// Inventory is one resource class's record on a provider, with Placement's
// fields.
type Inventory struct {
	Total           int64   `json:"total"`
	Reserved        int64   `json:"reserved"`
	MinUnit         int64   `json:"min_unit"`
	MaxUnit         int64   `json:"max_unit"`
	StepSize        int64   `json:"step_size"`
	AllocationRatio float64 `json:"allocation_ratio"`
}

// NewInventory returns an inventory of total units with Placement's defaults:
// reserved 0, min_unit 1, max_unit total, step_size 1, allocation_ratio 1.0.
func NewInventory(total int64) Inventory {
	return Inventory{Total: total, MinUnit: 1, MaxUnit: total, StepSize: 1, AllocationRatio: 1.0}
}

// WithDefaults fills the zero-valued optional fields with Placement's
// defaults (min_unit 1, max_unit total, step_size 1, allocation_ratio 1.0).
func (inv Inventory) WithDefaults() Inventory {
	if inv.MinUnit == 0 {
		inv.MinUnit = 1
	}
	if inv.MaxUnit == 0 {
		inv.MaxUnit = inv.Total
	}
	if inv.StepSize == 0 {
		inv.StepSize = 1
	}
	if inv.AllocationRatio == 0 {
		inv.AllocationRatio = 1.0
	}
	return inv
}

// Capacity is (total − reserved) × allocation_ratio, rounded down, never
// negative, and at most math.MaxInt64: a product past int64's range (a
// huge allocation ratio) is taken as unbounded rather than wrapped.
func (inv Inventory) Capacity() int64 {
	c := math.Floor(float64(inv.Total-inv.Reserved) * inv.AllocationRatio)
	switch {
	case !(c > 0): // also NaN
		return 0
	case c >= math.MaxInt64: // float64(MaxInt64) is 2^63
		return math.MaxInt64
	}
	return int64(c)
}

// FitsIn reports whether n more units fit in capacity with used already
// taken, without computing used + n (which could wrap): n ≤ capacity −
// used, for non-negative used and capacity.
func FitsIn(used, n, capacity int64) bool {
	if used < 0 {
		used = 0
	}
	return n <= capacity-used
}

// AddAmounts is a + b for non-negative amounts, saturating at
// math.MaxInt64 instead of wrapping to a negative sum.
func AddAmounts(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Validate checks the inventory's fields as Placement does.
func (inv Inventory) Validate(rc ResourceClass) error {
	switch {
	case inv.Total < 1:
		return invalidf("inventory %s: total %d must be at least 1", rc, inv.Total)
	case inv.Reserved < 0:
		return invalidf("inventory %s: reserved %d must not be negative", rc, inv.Reserved)
	case inv.Reserved > inv.Total:
		return invalidf("inventory %s: reserved %d exceeds total %d", rc, inv.Reserved, inv.Total)
	case inv.MinUnit < 1:
		return invalidf("inventory %s: min_unit %d must be at least 1", rc, inv.MinUnit)
	case inv.MaxUnit < 1:
		return invalidf("inventory %s: max_unit %d must be at least 1", rc, inv.MaxUnit)
	case inv.MinUnit > inv.MaxUnit:
		return invalidf("inventory %s: min_unit %d exceeds max_unit %d", rc, inv.MinUnit, inv.MaxUnit)
	case inv.StepSize < 1:
		return invalidf("inventory %s: step_size %d must be at least 1", rc, inv.StepSize)
	case !(inv.AllocationRatio > 0) || math.IsInf(inv.AllocationRatio, 0):
		return invalidf("inventory %s: allocation_ratio %v must be a positive number", rc, inv.AllocationRatio)
	}
	return rc.Validate()
}

// Inventories is a provider's inventory per resource class.
type Inventories map[ResourceClass]Inventory

// Clone returns a copy of invs.
func (invs Inventories) Clone() Inventories {
	out := make(Inventories, len(invs))
	for k, v := range invs {
		out[k] = v
	}
	return out
}

// WithDefaults returns a copy with Placement's defaults filled into every
// inventory's unset optional fields.
func (invs Inventories) WithDefaults() Inventories {
	out := make(Inventories, len(invs))
	for rc, inv := range invs {
		out[rc] = inv.WithDefaults()
	}
	return out
}

// Validate validates every inventory.
func (invs Inventories) Validate() error {
	for rc, inv := range invs {
		if err := inv.Validate(rc); err != nil {
			return err
		}
	}
	return nil
}

// amountOK reports whether CheckAmount would accept n, without making
// the error.
func (inv Inventory) amountOK(n int64) bool {
	return n >= inv.MinUnit && n <= inv.MaxUnit && n%inv.StepSize == 0
}

// CheckAmount checks one requested amount against the inventory's unit
// constraints (not capacity).
func (inv Inventory) CheckAmount(rc ResourceClass, n int64) error {
	switch {
	case n < inv.MinUnit:
		return invalidf("%d %s is below min_unit %d", n, rc, inv.MinUnit)
	case n > inv.MaxUnit:
		return invalidf("%d %s exceeds max_unit %d", n, rc, inv.MaxUnit)
	case n%inv.StepSize != 0:
		return invalidf("%d %s is not a multiple of step_size %d", n, rc, inv.StepSize)
	}
	return nil
}

// Admits is Placement's fit rule for one resource class — the one rule
// every fit check in keel applies (Fits, PlanWrites through it, and the
// scheduler's host checks on its own packed copy of the amounts): n units
// respect the inventory's unit constraints (min_unit ≤ n ≤ max_unit, n a
// multiple of step_size) and fit in what is free, capacity − used.
func Admits(n, free, minUnit, maxUnit, stepSize int64) bool {
	return n >= minUnit && n <= maxUnit && (stepSize <= 1 || n%stepSize == 0) && n <= free
}

// Fits reports whether request fits invs given current usage: every class
// exists, unit constraints hold, and usage + amount ≤ capacity. It returns a
// *CapacityError or *InvalidError naming the first class that does not fit
// (classes are checked in sorted order so the answer is deterministic).
func Fits(provider string, invs Inventories, usage, request Resources) error {
	// The common answer, "fits", needs no order: check without sorting
	// first, and sort only to name the first failing class.
	fits := true
	for rc, n := range request {
		inv, ok := invs[rc]
		if !ok || !Admits(n, inv.Capacity()-usage[rc], inv.MinUnit, inv.MaxUnit, inv.StepSize) {
			fits = false
			break
		}
	}
	if fits {
		return nil
	}
	for _, rc := range slices.Sorted(maps.Keys(request)) {
		n := request[rc]
		inv, ok := invs[rc]
		if !ok {
			return &CapacityError{Provider: provider, Class: rc, Requested: n, Reason: "no inventory of this class"}
		}
		if err := inv.CheckAmount(rc, n); err != nil {
			// A bad request (HTTP 400 in Placement), not a full host.
			return &InvalidError{Msg: fmt.Sprintf("provider %s: %v", provider, err), Provider: provider, Class: rc}
		}
		if !FitsIn(usage[rc], n, inv.Capacity()) {
			return &CapacityError{Provider: provider, Class: rc, Requested: n, Capacity: inv.Capacity(), Used: usage[rc], Reason: "exceeds capacity"}
		}
	}
	return nil
}
