package placement_test

import (
	"math"
	"testing"

	"keel/internal/placement"
)

// TestArithmeticNeverWraps: capacities past int64 clamp to math.MaxInt64,
// the fit check never forms usage + n, and sums of amounts saturate.
func TestArithmeticNeverWraps(t *testing.T) {
	inv := placement.NewInventory(1<<31 - 1)
	for _, c := range []struct {
		ratio float64
		want  int64
	}{{3.4e38, math.MaxInt64}, {math.MaxFloat64, math.MaxInt64}, {1 << 40, math.MaxInt64}, {2, 2 * (1<<31 - 1)}, {1e-12, 0}} {
		inv.AllocationRatio = c.ratio
		if got := inv.Capacity(); got != c.want {
			t.Errorf("capacity at ratio %g = %d, want %d", c.ratio, got, c.want)
		}
	}
	if !placement.FitsIn(1<<62, 1<<62-1, math.MaxInt64) || placement.FitsIn(1<<62, 1<<62, math.MaxInt64) {
		t.Error("FitsIn near the top of int64")
	}
	if placement.FitsIn(math.MaxInt64, 1, math.MaxInt64) {
		t.Error("one more unit fits in a full int64 capacity")
	}
	if got := placement.AddAmounts(math.MaxInt64-1, 5); got != math.MaxInt64 {
		t.Errorf("AddAmounts saturates: %d", got)
	}
	r := placement.Resources{placement.VCPU: math.MaxInt64 - 1}.Add(placement.Resources{placement.VCPU: 1 << 62})
	if r[placement.VCPU] != math.MaxInt64 {
		t.Errorf("Resources.Add wrapped: %d", r[placement.VCPU])
	}
	// Fits with a usage near the top: usage + n would wrap negative and
	// look like a fit.
	huge := placement.Inventory{Total: math.MaxInt64, MinUnit: 1, MaxUnit: math.MaxInt64, StepSize: 1, AllocationRatio: 1}
	err := placement.Fits("p", placement.Inventories{placement.VCPU: huge},
		placement.Resources{placement.VCPU: math.MaxInt64 - 10}, placement.Resources{placement.VCPU: 1 << 62})
	if !placement.IsCapacity(err) {
		t.Errorf("Fits near the top of int64: %v, want a capacity error", err)
	}
}
