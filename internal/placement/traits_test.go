package placement

import (
	"errors"
	"slices"
	"testing"
)

func TestStandardTraitsAndCustomNames(t *testing.T) {
	for _, n := range []string{"COMPUTE_STATUS_DISABLED", "HW_CPU_X86_AVX2", "COMPUTE_VOLUME_MULTI_ATTACH", "STORAGE_DISK_SSD"} {
		if !IsStandardTrait(n) {
			t.Errorf("%s is not standard", n)
		}
	}
	if IsStandardTrait("CUSTOM_GOLD") || !slices.IsSorted(StandardTraits()) || len(StandardTraits()) < 300 {
		t.Errorf("standard trait list: %d names, sorted=%v", len(StandardTraits()), slices.IsSorted(StandardTraits()))
	}
	for name, ok := range map[string]bool{"CUSTOM_GOLD": true, "CUSTOM_A_1": true, "CUSTOM_": false, "CUSTOM_a": false, "GOLD": false, "CUSTOM_A-B": false} {
		if err := ValidateCustomTrait(name); (err == nil) != ok {
			t.Errorf("ValidateCustomTrait(%q) = %v", name, err)
		}
	}
	if got := NormalizeNames([]string{"b", "a", "b"}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("NormalizeNames = %v", got)
	}
	if got := NormalizeNames(nil); got == nil || len(got) != 0 {
		t.Errorf("NormalizeNames(nil) = %#v, want empty and not nil", got)
	}
}

func TestTraitAndAggregateQueries(t *testing.T) {
	have := []string{"A", "B", "C"}
	cases := []struct {
		name string
		q    TraitQuery
		want bool
	}{
		{"empty", TraitQuery{}, true},
		{"all present", TraitQuery{Required: [][]string{{"A"}, {"C"}}}, true},
		{"one missing", TraitQuery{Required: [][]string{{"A"}, {"D"}}}, false},
		{"any of", TraitQuery{Required: [][]string{{"D", "B"}}}, true},
		{"none of the any", TraitQuery{Required: [][]string{{"D", "E"}}}, false},
		{"forbidden absent", TraitQuery{Forbidden: []string{"D"}}, true},
		{"forbidden present", TraitQuery{Required: [][]string{{"A"}}, Forbidden: []string{"B"}}, false},
	}
	for _, c := range cases {
		if got := c.q.Match(have); got != c.want {
			t.Errorf("traits %s: %v, want %v", c.name, got, c.want)
		}
		aq := AggregateQuery{AnyOf: c.q.Required, Forbidden: c.q.Forbidden}
		if got := aq.Match(have); got != c.want {
			t.Errorf("aggregates %s: %v, want %v", c.name, got, c.want)
		}
	}
	if (TraitQuery{}).Empty() != true || (AggregateQuery{Forbidden: []string{"x"}}).Empty() {
		t.Error("Empty")
	}
}

func TestCheckParent(t *testing.T) {
	// r ← a ← b; c alone.
	parents := map[string]string{"r": "", "a": "r", "b": "a", "c": ""}
	parentOf := func(u string) (string, bool, error) { p, ok := parents[u]; return p, ok, nil }
	p := func(u string) Provider { return Provider{UUID: u, ParentUUID: parents[u]} }
	cases := []struct {
		name, uuid, parent string
		reparent, ok       bool
	}{
		{"unchanged", "b", "a", false, true},
		{"root gets a parent", "c", "b", false, true},
		{"re-parent before 1.37", "b", "c", false, false},
		{"un-parent before 1.37", "b", "", false, false},
		{"re-parent at 1.37", "b", "c", true, true},
		{"un-parent at 1.37", "b", "", true, true},
		{"own parent", "c", "c", true, false},
		{"a descendant", "r", "b", true, false},
		{"no such parent", "c", "zz", true, false},
	}
	for _, tc := range cases {
		err := CheckParent(p(tc.uuid), tc.parent, tc.reparent, parentOf)
		if (err == nil) != tc.ok || (err != nil && !IsInvalid(err)) {
			t.Errorf("%s: %v, want ok=%v (and an InvalidError otherwise)", tc.name, err, tc.ok)
		}
	}
	boom := errors.New("boom")
	if err := CheckParent(p("c"), "r", false, func(string) (string, bool, error) { return "", false, boom }); !errors.Is(err, boom) {
		t.Errorf("a failing lookup: %v", err)
	}
	if err := UnknownTraits([]string{"HW_CPU_X86_AVX2", "CUSTOM_A", "CUSTOM_B"}, func(n string) (bool, error) { return n == "CUSTOM_A", nil }); !IsInvalid(err) {
		t.Errorf("UnknownTraits: %v", err)
	}
	if err := CheckGeneration(Provider{UUID: "p", Generation: 3}, 2); !IsConflict(err) {
		t.Errorf("CheckGeneration: %v", err)
	}
}

// TestFitsFastPathAgrees checks that Fits's unsorted first pass answers as
// the sorted one for every combination of a few classes and amounts.
func TestFitsFastPathAgrees(t *testing.T) {
	invs := Inventories{VCPU: {Total: 8, MinUnit: 1, MaxUnit: 4, StepSize: 2, AllocationRatio: 2}, MemoryMB: NewInventory(1024)}
	for _, v := range []int64{0, 1, 2, 4, 6} {
		for _, m := range []int64{0, 512, 1024, 2048} {
			for _, used := range []int64{0, 12, 14} {
				req := Resources{}
				if v > 0 {
					req[VCPU] = v
				}
				if m > 0 {
					req[MemoryMB] = m
				}
				err := Fits("p", invs, Resources{VCPU: used}, req)
				want := true
				for rc, n := range req {
					inv := invs[rc]
					if inv.CheckAmount(rc, n) != nil || (Resources{VCPU: used})[rc]+n > inv.Capacity() {
						want = false
					}
				}
				if (err == nil) != want {
					t.Errorf("VCPU %d, MEMORY_MB %d, used %d: %v, want fits=%v", v, m, used, err, want)
				}
			}
		}
	}
}
