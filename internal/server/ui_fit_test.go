package server

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store/memory"
)

// TestLargestFreeSlotOnTrees checks the imbalance header's largest free
// slot against placement's model: memory only in a host's NUMA children,
// disk only in a pool it shares through an aggregate, one class never
// split over two providers, a flavor's required trait, a disabled host.
// The flat check (a host's own inventories) would find no slot at all
// on these hosts, and a slot for the trait flavor.
func TestLargestFreeSlotOnTrees(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	inv := func(kv ...any) placement.Inventories {
		out := placement.Inventories{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(placement.ResourceClass)] = placement.NewInventory(int64(kv[i+1].(int)))
		}
		return out
	}
	const agg = "5c6f0b1e-0000-4000-8000-00000000000a"
	for _, p := range []placement.Provider{
		// h1: vCPUs and disk of its own, memory in two NUMA children.
		{UUID: "00000000-0000-4000-8000-000000000001", Name: "h1", Inventories: inv(placement.VCPU, 16, placement.DiskGB, 100)},
		{UUID: "00000000-0000-4000-8000-000000000011", Name: "h1-numa0", ParentUUID: "00000000-0000-4000-8000-000000000001",
			Inventories: inv(placement.MemoryMB, 16384)},
		{UUID: "00000000-0000-4000-8000-000000000012", Name: "h1-numa1", ParentUUID: "00000000-0000-4000-8000-000000000001",
			Inventories: inv(placement.MemoryMB, 16384)},
		// h2: vCPUs and memory, its disk from a pool in its aggregate.
		{UUID: "00000000-0000-4000-8000-000000000002", Name: "h2", Inventories: inv(placement.VCPU, 16, placement.MemoryMB, 32768),
			Aggregates: []string{agg}},
		{UUID: "00000000-0000-4000-8000-000000000003", Name: "pool", Inventories: inv(placement.DiskGB, 1000),
			Traits: []string{placement.SharesViaAggregate}, Aggregates: []string{agg}},
	} {
		if _, err := st.CreateProvider(ctx, p); err != nil {
			t.Fatalf("provider %s: %v", p.Name, err)
		}
	}
	for _, h := range []string{"h1", "h2"} {
		if err := st.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", Zone: "nova", LastSeenUp: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	flavors := []records.Flavor{
		// The largest by memory, but it needs a trait no host has.
		{ID: "1", Name: "f.trait", VCPUs: 1, RAMMB: 30000, ExtraSpecs: map[string]string{"trait:CUSTOM_NOPE": "required"}},
		// 20000 MiB fits in no NUMA child of h1 (16384 each; one class
		// comes from one provider), in h2's own memory.
		{ID: "2", Name: "f.huge", VCPUs: 2, RAMMB: 20000, DiskGB: 10},
		{ID: "3", Name: "f.big", VCPUs: 2, RAMMB: 8192, DiskGB: 10},
	}
	for _, f := range flavors {
		if _, err := st.CreateFlavor(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	u := newUIHub(st, newHostView(st), time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := u.build(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ := u.current()
	var names []string
	for _, h := range s.Hosts {
		names = append(names, h.Name)
	}
	if !slices.Equal(names, []string{"h1", "h2"}) {
		t.Errorf("hosts %v, want h1 and h2 (children and pools are not hosts)", names)
	}
	if im := s.Imbalance; im.LargestFlavor != "f.huge" || im.FitsOn != 1 {
		t.Errorf("largest free slot %q on %d hosts, want f.huge on 1 (h2)", im.LargestFlavor, im.FitsOn)
	}
	all := func(string) bool { return true }
	pf := u.view.providers()
	for _, c := range []struct {
		flavor records.Flavor
		want   []string
	}{{flavors[0], nil}, {flavors[1], []string{"h2"}}, {flavors[2], []string{"h1", "h2"}}} {
		if got := pf.fitsOn(c.flavor, all); !slices.Equal(got, c.want) {
			t.Errorf("%s fits on %v, want %v", c.flavor.Name, got, c.want)
		}
	}

	// h2 disabled: f.huge fits on no enabled host, f.big on h1 (its
	// memory from a NUMA child).
	if _, err := st.UpdateService(ctx, "h2", func(s *records.Service) error { s.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := u.build(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ = u.current()
	if im := s.Imbalance; im.LargestFlavor != "f.big" || im.FitsOn != 1 {
		t.Errorf("with h2 disabled: largest free slot %q on %d hosts, want f.big on 1 (h1)", im.LargestFlavor, im.FitsOn)
	}
	// A claim on h1's NUMA children that leaves 4096 MiB in each: f.big
	// fits nowhere.
	for i, child := range []string{"00000000-0000-4000-8000-000000000011", "00000000-0000-4000-8000-000000000012"} {
		if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: []string{"a0000000-0000-4000-8000-000000000001",
			"a0000000-0000-4000-8000-000000000002"}[i], ProjectID: "p", UserID: "u",
			Allocations: map[string]placement.Resources{child: {placement.MemoryMB: 12288}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.build(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ = u.current()
	if im := s.Imbalance; im.LargestFlavor != "" || im.FitsOn != 0 {
		t.Errorf("with h1's children full: largest free slot %q on %d hosts, want none", im.LargestFlavor, im.FitsOn)
	}
	// h1's cell is coloured by its tree: the memory claimed in its NUMA
	// children is the host's (24576 of 32768 MiB), above its own vCPUs
	// and disk (nothing claimed).
	for _, h := range s.Hosts {
		if h.Name != "h1" {
			continue
		}
		mem := h.Resources[placement.MemoryMB]
		if h.FillClass != placement.MemoryMB || h.Fill != 0.75 || mem.Capacity != 32768 || mem.Used != 24576 {
			t.Errorf("h1's cell: fill %v of %s, memory %d of %d; want 0.75 of MEMORY_MB, 24576 of 32768 (its NUMA children's)",
				h.Fill, h.FillClass, mem.Used, mem.Capacity)
		}
		if d := h.Resources[placement.DiskGB]; d.Capacity != 100 || d.Total != 100 {
			t.Errorf("h1's own disk: %+v, want its own inventory (100 GB)", d)
		}
	}
}

// TestUIPause checks the hub's pacing: a cheap build waits a tick, a dear
// one (10,000 hosts) long enough to keep the hub within its share of a
// core.
func TestUIPause(t *testing.T) {
	for _, c := range []struct{ cost, want time.Duration }{
		{0, uiTick},
		{5 * time.Millisecond, uiTick},
		{20 * time.Millisecond, uiTick},
		{110 * time.Millisecond, 1100 * time.Millisecond},
		{400 * time.Millisecond, 4 * time.Second},
	} {
		if got := uiPause(c.cost); got != c.want {
			t.Errorf("after a build of %v the hub waits %v, want %v", c.cost, got, c.want)
		}
	}
}
