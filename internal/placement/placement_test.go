package placement

import (
	"errors"
	"testing"
)

func TestInventoryDefaultsAndCapacity(t *testing.T) {
	inv := NewInventory(32)
	if inv.MinUnit != 1 || inv.MaxUnit != 32 || inv.StepSize != 1 || inv.AllocationRatio != 1 || inv.Reserved != 0 {
		t.Fatalf("defaults = %+v", inv)
	}
	if got := (Inventory{Total: 10}).WithDefaults(); got != NewInventory(10) {
		t.Fatalf("WithDefaults = %+v, want %+v", got, NewInventory(10))
	}
	cases := []struct {
		name string
		inv  Inventory
		want int64
	}{
		{"plain", NewInventory(100), 100},
		{"reserved", Inventory{Total: 131072, Reserved: 512, AllocationRatio: 1}, 130560},
		{"overcommit", Inventory{Total: 32, AllocationRatio: 4}, 128},
		{"fractional ratio rounds down", Inventory{Total: 10, Reserved: 1, AllocationRatio: 1.5}, 13},
		{"all reserved", Inventory{Total: 8, Reserved: 8, AllocationRatio: 16}, 0},
	}
	for _, tc := range cases {
		if got := tc.inv.Capacity(); got != tc.want {
			t.Errorf("%s: capacity %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestInventoryValidation(t *testing.T) {
	ok := NewInventory(10)
	bad := map[string]Inventory{
		"zero total":          {Total: 0, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1},
		"negative reserved":   {Total: 10, Reserved: -1, MinUnit: 1, MaxUnit: 10, StepSize: 1, AllocationRatio: 1},
		"reserved over total": {Total: 10, Reserved: 11, MinUnit: 1, MaxUnit: 10, StepSize: 1, AllocationRatio: 1},
		"min over max":        {Total: 10, MinUnit: 5, MaxUnit: 4, StepSize: 1, AllocationRatio: 1},
		"zero step":           {Total: 10, MinUnit: 1, MaxUnit: 10, AllocationRatio: 1},
		"zero ratio":          {Total: 10, MinUnit: 1, MaxUnit: 10, StepSize: 1},
	}
	if err := ok.Validate(VCPU); err != nil {
		t.Fatalf("valid inventory refused: %v", err)
	}
	for name, inv := range bad {
		if err := inv.Validate(VCPU); !IsInvalid(err) {
			t.Errorf("%s: got %v, want an InvalidError", name, err)
		}
	}
	if err := ok.Validate("CUSTOM_gpu"); !IsInvalid(err) {
		t.Errorf("lower-case custom class accepted")
	}
	if err := ok.Validate("CUSTOM_GPU_A100"); err != nil {
		t.Errorf("custom class refused: %v", err)
	}
	if err := ok.Validate("BOGUS"); !IsInvalid(err) {
		t.Errorf("unknown standard class accepted")
	}
}

func TestParseResources(t *testing.T) {
	r, err := ParseResources("VCPU:2,MEMORY_MB:4096,DISK_GB:20")
	if err != nil || r[VCPU] != 2 || r[MemoryMB] != 4096 || r[DiskGB] != 20 || r.String() != "DISK_GB:20,MEMORY_MB:4096,VCPU:2" {
		t.Fatalf("ParseResources = %v, %v", r, err)
	}
	for _, s := range []string{"", "VCPU", "VCPU:0", "VCPU:-1", "VCPU:1.5", "VCPU:1,VCPU:2", "vcpu:1", "VCPU:01"} {
		if _, err := ParseResources(s); err == nil {
			t.Errorf("ParseResources(%q) accepted", s)
		}
	}
}

func TestFitsChecksUnitsAndCapacity(t *testing.T) {
	invs := Inventories{VCPU: {Total: 8, MinUnit: 1, MaxUnit: 4, StepSize: 2, AllocationRatio: 2}}
	cases := []struct {
		name  string
		used  int64
		req   int64
		class ResourceClass
		ok    bool
	}{
		{"fits", 0, 4, VCPU, true},
		{"over max_unit", 0, 6, VCPU, false},
		{"not a step multiple", 0, 3, VCPU, false},
		{"capacity exactly", 12, 4, VCPU, true},
		{"over capacity", 14, 4, VCPU, false},
		{"no such class", 0, 1, MemoryMB, false},
	}
	for _, tc := range cases {
		err := Fits("rp", invs, Resources{VCPU: tc.used}, Resources{tc.class: tc.req})
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
		// Unit constraints are bad requests; the rest are full hosts.
		if unit := tc.name == "over max_unit" || tc.name == "not a step multiple"; err != nil && unit != IsInvalid(err) {
			t.Errorf("%s: %v: invalid=%v, want %v", tc.name, err, IsInvalid(err), unit)
		}
		if err != nil && !IsInvalid(err) && !IsCapacity(err) {
			t.Errorf("%s: %v is neither a CapacityError nor an InvalidError", tc.name, err)
		}
	}
}

func provider(uuid string, gen int64, total, used int64) ProviderState {
	return ProviderState{UUID: uuid, Generation: gen, Inventories: Inventories{VCPU: NewInventory(total)}, Usage: Resources{VCPU: used}}
}

func TestPlanWritesMoveIsAtomicAndBumpsGenerations(t *testing.T) {
	gen := int64(3)
	st := WriteState{
		Providers: map[string]ProviderState{"src": provider("src", 5, 8, 4), "dst": provider("dst", 9, 8, 6)},
		Consumers: map[string]Consumer{"inst": {UUID: "inst", Generation: 3, Allocations: map[string]Resources{"src": {VCPU: 4}}}},
	}
	move := []AllocationWrite{
		{ConsumerUUID: "mig", Type: ConsumerMigration, Allocations: map[string]Resources{"src": {VCPU: 4}}},
		{ConsumerUUID: "inst", ConsumerGeneration: &gen, Allocations: map[string]Resources{"dst": {VCPU: 2}}, ProviderGenerations: map[string]int64{"dst": 9}},
	}
	plan, err := PlanWrites(st, move)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Providers["src"] != 6 || plan.Providers["dst"] != 10 {
		t.Fatalf("generations %v, want src 6 and dst 10", plan.Providers)
	}
	if c := plan.Consumers[1].New; c == nil || c.Generation != 4 || c.Allocations["dst"][VCPU] != 2 {
		t.Fatalf("instance consumer after move = %+v", plan.Consumers[1].New)
	}
	if c := plan.Consumers[0].New; c == nil || c.Generation != 1 || c.Type != ConsumerMigration {
		t.Fatalf("migration consumer after move = %+v", plan.Consumers[0].New)
	}

	// The same move onto a destination that cannot take it fails whole.
	move[1].Allocations = map[string]Resources{"dst": {VCPU: 3}}
	if _, err := PlanWrites(st, move); !IsCapacity(err) {
		t.Fatalf("over-capacity move: %v, want CapacityError", err)
	}
	// A stale provider generation named by the scheduler is a conflict.
	move[1].Allocations = map[string]Resources{"dst": {VCPU: 2}}
	move[1].ProviderGenerations = map[string]int64{"dst": 8}
	var ce *ConflictError
	if _, err := PlanWrites(st, move); !errors.As(err, &ce) || ce.Kind != ProviderGeneration {
		t.Fatalf("stale provider generation: %v", err)
	}
	// A stale consumer generation too.
	stale := int64(2)
	move[1].ProviderGenerations, move[1].ConsumerGeneration = nil, &stale
	if _, err := PlanWrites(st, move); !errors.As(err, &ce) || ce.Kind != ConsumerGeneration {
		t.Fatalf("stale consumer generation: %v", err)
	}
}

func TestPlanWritesReplacesOwnAllocation(t *testing.T) {
	// A consumer holding 6 of 8 may grow to 8: its old allocation is not
	// counted against its new one.
	gen := int64(1)
	st := WriteState{
		Providers: map[string]ProviderState{"p": provider("p", 1, 8, 6)},
		Consumers: map[string]Consumer{"c": {UUID: "c", Generation: 1, Allocations: map[string]Resources{"p": {VCPU: 6}}}},
	}
	if _, err := PlanWrites(st, []AllocationWrite{{ConsumerUUID: "c", ConsumerGeneration: &gen, Allocations: map[string]Resources{"p": {VCPU: 8}}}}); err != nil {
		t.Fatalf("resize within capacity refused: %v", err)
	}
	plan, err := PlanWrites(st, []AllocationWrite{{ConsumerUUID: "c", ConsumerGeneration: &gen}})
	if err != nil || plan.Consumers[0].New != nil || plan.Providers["p"] != 2 {
		t.Fatalf("delete: plan %+v err %v", plan, err)
	}
	if _, err := PlanWrites(st, []AllocationWrite{{ConsumerUUID: "c", AnyConsumerGeneration: true}, {ConsumerUUID: "c", AnyConsumerGeneration: true}}); !IsInvalid(err) {
		t.Fatalf("same consumer twice: %v", err)
	}
	if _, err := PlanWrites(st, []AllocationWrite{{ConsumerUUID: "c", ConsumerGeneration: &gen, Allocations: map[string]Resources{"p": {}}}}); !IsInvalid(err) {
		t.Fatalf("empty resources for a provider accepted: %v", err)
	}
}
