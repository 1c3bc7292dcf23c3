package placement

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// treeProviders is host h (VCPU 4, DISK 10, in agg A) with a child gpu
// (VGPU 1), host o (VCPU 4) and a pool (DISK 100) sharing with agg A.
func treeProviders() []TreeProvider {
	return []TreeProvider{
		{UUID: "pool", Inventories: Inventories{"DISK": NewInventory(100)}, Traits: []string{SharesViaAggregate}, Aggregates: []string{"A"}},
		{UUID: "h", Inventories: Inventories{"VCPU": NewInventory(4), "DISK": NewInventory(10)}, Aggregates: []string{"A"}},
		{UUID: "gpu", ParentUUID: "h", Inventories: Inventories{"VGPU": NewInventory(1)}},
		{UUID: "o", Inventories: Inventories{"VCPU": NewInventory(4)}},
	}
}

func showAlloc(a map[string]Resources) string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(a)) {
		out = append(out, p+"="+a[p].String())
	}
	return strings.Join(out, " ")
}

func TestFirstInTreeAndReclaim(t *testing.T) {
	ps := treeProviders()
	f := TreeForest(ps)
	q, err := FlavorQuery(Resources{"VCPU": 1, "DISK": 5}, map[string]string{"resources1:VGPU": "1"})
	if err != nil {
		t.Fatal(err)
	}
	// The host's own disk before the pool's; the child's VGPU.
	if a, ok := f.FirstInTree(q, "gpu"); !ok || showAlloc(a) != "gpu=VGPU:1 h=DISK:5,VCPU:1" {
		t.Errorf("first on h's tree (asked by a child): %s %v", showAlloc(a), ok)
	}
	if f.FitsTree(q, "o") || f.FitsTree(q, "nowhere") {
		t.Error("fits on o (no VGPU) or on an unknown provider")
	}
	big, _ := FlavorQuery(Resources{"VCPU": 1, "DISK": 50}, map[string]string{"resources1:VGPU": "1"})
	if a, ok := f.FirstInTree(big, "h"); !ok || showAlloc(a) != "gpu=VGPU:1 h=VCPU:1 pool=DISK:50" {
		t.Errorf("disk past the host's own: %s %v, want it from the pool", showAlloc(a), ok)
	}
	for _, c := range []struct {
		alloc map[string]Resources
		in    bool
	}{
		{map[string]Resources{"h": {"VCPU": 1}, "gpu": {"VGPU": 1}, "pool": {"DISK": 5}}, true},
		{map[string]Resources{"h": {"VCPU": 1}, "o": {"VCPU": 1}}, false},
		{map[string]Resources{"gone": {"VCPU": 1}}, false},
		{nil, false},
	} {
		if got := f.HeldInTree(c.alloc, "h"); got != c.in {
			t.Errorf("HeldInTree(%s) = %v", showAlloc(c.alloc), got)
		}
	}
	if f.HeldInTree(map[string]Resources{"o": {"VCPU": 1}, "pool": {"DISK": 1}}, "o") {
		t.Error("the pool does not share with o's tree")
	}

	// Reclaim keeps a right allocation, replaces a wrong one, and counts
	// what the consumer holds as free: the VGPU it holds is its own.
	right := map[string]Resources{"h": {"VCPU": 1}, "gpu": {"VGPU": 1}, "pool": {"DISK": 5}}
	for i := range ps {
		if a := right[ps[i].UUID]; a != nil {
			ps[i].Usage = a.Clone()
		}
	}
	if a, ok := Reclaim(ps, q, "h", right); !ok || showAlloc(a) != showAlloc(right) {
		t.Errorf("reclaim of a right allocation: %s %v", showAlloc(a), ok)
	}
	flat := map[string]Resources{"h": {"VCPU": 1, "DISK": 5}}
	ps[1].Usage, ps[2].Usage, ps[0].Usage = Resources{"VCPU": 1, "DISK": 5}, nil, nil
	if a, ok := Reclaim(ps, q, "h", flat); !ok || showAlloc(a) != "gpu=VGPU:1 h=DISK:5,VCPU:1" {
		t.Errorf("reclaim of the flat allocation: %s %v", showAlloc(a), ok)
	}
	ps[2].Usage = Resources{"VGPU": 1} // another consumer's
	if a, ok := Reclaim(ps, q, "h", flat); ok {
		t.Errorf("reclaim with the GPU taken: %s, want no fit", showAlloc(a))
	}
	other := map[string]Resources{"gpu": {"VGPU": 1}}
	if a, ok := Reclaim(ps, q, "h", flat, other); !ok || showAlloc(a) != "gpu=VGPU:1 h=DISK:5,VCPU:1" {
		t.Errorf("reclaim with the GPU's holder released in the same write: %s %v", showAlloc(a), ok)
	}
}
