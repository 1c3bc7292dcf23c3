package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"keel/internal/placement"
	"keel/internal/store"
)

// treeClaim claims what the scheduler offers (the candidate's allocation
// across the tree) for consumer, as the conductor does.
func treeClaim(st store.Store, consumer string) ClaimFunc {
	return func(ctx context.Context, c Candidate) (int64, error) {
		plan, err := st.WriteAllocations(ctx, placement.AllocationWrite{
			ConsumerUUID: consumer, Allocations: c.Allocations, ProviderGenerations: c.Generations,
		})
		return plan.Providers[c.ProviderUUID], err
	}
}

// addTree adds host h02 as a provider tree: a root with no inventory of
// its own, two NUMA cells holding VCPU and MEMORY_MB, and a physical GPU
// holding VGPU with trait CUSTOM_GPU_A; and a shared DISK_GB pool in an
// aggregate with the root.
func addTree(t *testing.T, c *cloud) {
	t.Helper()
	ctx := context.Background()
	mk := func(p placement.Provider) {
		t.Helper()
		if _, err := c.st.CreateProvider(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, tr := range []string{"CUSTOM_GPU_A", "CUSTOM_GPU_B"} {
		if _, err := c.st.CreateTrait(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	mk(placement.Provider{UUID: "rp-h02", Name: "h02"})
	for _, cell := range []string{"numa0", "numa1"} {
		mk(placement.Provider{UUID: "rp-h02-" + cell, Name: "h02_" + cell, ParentUUID: "rp-h02", Inventories: placement.Inventories{
			placement.VCPU: placement.NewInventory(16), placement.MemoryMB: placement.NewInventory(65536)}})
	}
	mk(placement.Provider{UUID: "rp-h02-gpu", Name: "h02_pgpu0", ParentUUID: "rp-h02", Traits: []string{"CUSTOM_GPU_A"},
		Inventories: placement.Inventories{"VGPU": placement.NewInventory(4)}})
	mk(placement.Provider{UUID: "rp-pool", Name: "pool", Traits: []string{placement.SharesViaAggregate},
		Inventories: placement.Inventories{placement.DiskGB: placement.NewInventory(10000)}})
	for _, u := range []string{"rp-h02", "rp-pool"} {
		if _, err := c.st.SetProviderAggregates(ctx, u, nil, []string{"agg-1"}); err != nil {
			t.Fatal(err)
		}
	}
	c.addService(t, "h02")
}

func usage(t *testing.T, st store.Store, uuid string) placement.Resources {
	t.Helper()
	s, err := st.ProviderSummaries(context.Background(), []string{uuid})
	if err != nil || len(s) != 1 {
		t.Fatalf("summary of %s: %v %v", uuid, s, err)
	}
	return s[0].Usage
}

// TestTreesSelectAndClaimAcrossTheTree: with a provider tree and a
// sharing provider in the view, every request goes through placement's
// candidate search; the claim allocates on the NUMA cell, the GPU and the
// pool, usage is exact on each, and the host's totals (what the weighers
// read) are the tree's sums.
func TestTreesSelectAndClaimAcrossTheTree(t *testing.T) {
	c := newCloud(t, 1) // h01: a flat host
	addTree(t, c)
	ctx := context.Background()
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	passing := func(specs map[string]string) (string, *Explanation) {
		t.Helper()
		exp, err := s.Explain(ctx, &Request{Resources: small(), ExtraSpecs: specs})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range exp.Hosts {
			if h.RejectedBy == "" {
				out = append(out, h.Host)
			}
		}
		return strings.Join(out, ","), &exp
	}
	if got, _ := passing(nil); got != "h01,h02" {
		t.Fatalf("plain flavor: hosts %q, want h01,h02 (the children and the pool are no hosts)", got)
	}
	gpu := map[string]string{"resources1:VGPU": "1", "trait1:CUSTOM_GPU_A": "required"}
	if got, _ := passing(gpu); got != "h02" {
		t.Fatalf("VGPU group: hosts %q, want h02", got)
	}
	got, exp := passing(map[string]string{"resources1:VGPU": "1", "trait1:CUSTOM_GPU_B": "required"})
	if got != "" {
		t.Fatalf("VGPU with a trait no GPU has: hosts %q, want none", got)
	}
	for _, h := range exp.Hosts {
		if h.RejectedBy != "ResourceFilter" || !strings.Contains(h.Reason, "required1=CUSTOM_GPU_B") {
			t.Errorf("%s: rejected by %q for %q, want ResourceFilter naming the group", h.Host, h.RejectedBy, h.Reason)
		}
	}

	sel, err := s.Select(ctx, &Request{Resources: small(), ExtraSpecs: gpu}, treeClaim(c.st, "vm1"))
	if err != nil || sel.Host != "h02" {
		t.Fatalf("Select with the VGPU group: %+v %v, want h02", sel, err)
	}
	cons, err := c.st.GetConsumer(ctx, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]placement.Resources{
		"rp-h02-numa0": {placement.VCPU: 1, placement.MemoryMB: 2048},
		"rp-h02-gpu":   {"VGPU": 1},
		"rp-pool":      {placement.DiskGB: 20},
	}
	if len(cons.Allocations) != len(want) {
		t.Fatalf("allocations %v, want %v", cons.Allocations, want)
	}
	for p, r := range want {
		if !cons.Allocations[p].Equal(r) || !usage(t, c.st, p).Equal(r) {
			t.Errorf("%s: allocation %v, usage %v, want %v", p, cons.Allocations[p], usage(t, c.st, p), r)
		}
	}
	h, _ := s.View().Host("h02")
	if h.VCPUsUsed != 1 || h.VCPUsTotal != 32 || h.FreeRAMMB != 2*65536-2048 {
		t.Errorf("h02's totals: %d of %d VCPU used, %d MB free; want the tree's sums (1 of 32, %d)", h.VCPUsUsed, h.VCPUsTotal, h.FreeRAMMB, 2*65536-2048)
	}

	// The GPU holds 4: three more fit, the fifth finds no host.
	for i := 2; i <= 4; i++ {
		if _, err := s.Select(ctx, &Request{Resources: small(), ExtraSpecs: gpu}, treeClaim(c.st, "vm"+string(rune('0'+i)))); err != nil {
			t.Fatalf("GPU claim %d: %v", i, err)
		}
	}
	if _, err := s.Select(ctx, &Request{Resources: small(), ExtraSpecs: gpu}, treeClaim(c.st, "vm5")); !IsNoValidHost(err) {
		t.Fatalf("fifth GPU claim: %v, want No valid host", err)
	}
	if u := usage(t, c.st, "rp-h02-gpu"); u["VGPU"] != 4 {
		t.Errorf("GPU usage %v, want 4", u)
	}
	// A delete gives back every provider's part.
	for i := 1; i <= 4; i++ {
		if _, err := c.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "vm" + string(rune('0'+i)), AnyConsumerGeneration: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"rp-h02-numa0", "rp-h02-numa1", "rp-h02-gpu", "rp-pool"} {
		if u := usage(t, c.st, p); len(u) != 0 {
			t.Errorf("%s after the deletes: usage %v, want none", p, u)
		}
	}
	if err := s.View().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.View().Host("h02"); h.VCPUsUsed != 0 {
		t.Errorf("h02 after the deletes: %d VCPU used in the view", h.VCPUsUsed)
	}
}

// TestTreesGroupPolicy: two granular groups need group_policy (No valid
// host without it, as Placement refuses the request); with isolate they
// take two providers, which only h02's two NUMA cells offer.
func TestTreesGroupPolicy(t *testing.T) {
	c := newCloud(t, 1)
	addTree(t, c)
	ctx := context.Background()
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	two := map[string]string{"resources1:VCPU": "10", "resources2:VCPU": "10", "resources:VCPU": "0"}
	_, err := s.Select(ctx, &Request{Resources: small(), ExtraSpecs: two}, treeClaim(c.st, "vm1"))
	if !IsNoValidHost(err) || !strings.Contains(err.Error(), "group_policy") {
		t.Fatalf("two groups without group_policy: %v, want No valid host naming group_policy", err)
	}
	two["group_policy"] = "isolate"
	sel, err := s.Select(ctx, &Request{Resources: small(), ExtraSpecs: two}, treeClaim(c.st, "vm1"))
	if err != nil || sel.Host != "h02" {
		t.Fatalf("isolate: %+v %v, want h02", sel, err)
	}
	for _, cell := range []string{"rp-h02-numa0", "rp-h02-numa1"} {
		if u := usage(t, c.st, cell); u[placement.VCPU] != 10 {
			t.Errorf("%s: usage %v, want 10 VCPU", cell, u)
		}
	}
	two["group_policy"] = "none"
	sel, err = s.Select(ctx, &Request{Resources: small(), ExtraSpecs: two}, treeClaim(c.st, "vm2"))
	if err != nil || sel.Host != "h01" {
		// h02's cells have 6 VCPU left each: only h01 takes 20 now.
		t.Fatalf("none: %+v %v, want h01", sel, err)
	}
	if u := usage(t, c.st, "rp-h01"); u[placement.VCPU] != 20 {
		t.Errorf("h01: usage %v, want both groups' 20 VCPU on its one provider", u)
	}
}

// TestFlatOverrides: on a flat cloud resources:CLASS=N overrides the
// flavor's amount in the claim, without the candidate search.
func TestFlatOverrides(t *testing.T) {
	c := newCloud(t, 2)
	ctx := context.Background()
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	sel, err := s.Select(ctx, &Request{Resources: small(), ExtraSpecs: map[string]string{"resources:VCPU": "3", "resources:DISK_GB": "0"}}, treeClaim(c.st, "vm1"))
	if err != nil {
		t.Fatal(err)
	}
	want := placement.Resources{placement.VCPU: 3, placement.MemoryMB: 2048}
	if u := usage(t, c.st, "rp-"+sel.Host); !u.Equal(want) {
		t.Errorf("usage %v, want %v", u, want)
	}
	if h, _ := s.View().Host(sel.Host); h.VCPUsUsed != 3 {
		t.Errorf("the view assumes %d VCPU, want 3", h.VCPUsUsed)
	}
}

// TestTreeAnswersCachedAsFresh: the view's cached candidates (asked again
// only for the trees that changed) are, after every claim and every
// delete seen through the change stream, what a fresh search over every
// provider finds, for each of several requests.
func TestTreeAnswersCachedAsFresh(t *testing.T) {
	c := newCloud(t, 0)
	ctx := context.Background()
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("t%02d", i)
		root := "rp-" + name
		if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: root, Name: name,
			Inventories: placement.Inventories{placement.DiskGB: placement.NewInventory(40)}}); err != nil {
			t.Fatal(err)
		}
		for _, cell := range []string{"numa0", "numa1"} {
			if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: root + "-" + cell, Name: name + "_" + cell, ParentUUID: root, Inventories: placement.Inventories{
				placement.VCPU: placement.NewInventory(8), placement.MemoryMB: placement.NewInventory(16384)}}); err != nil {
				t.Fatal(err)
			}
		}
		agg := fmt.Sprintf("agg-%d", i/4)
		if i%4 == 0 {
			pool := fmt.Sprintf("rp-pool-%d", i/4)
			if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: pool, Name: pool, Traits: []string{placement.SharesViaAggregate},
				Inventories: placement.Inventories{placement.DiskGB: placement.NewInventory(100)}}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.st.SetProviderAggregates(ctx, pool, nil, []string{agg}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.st.SetProviderAggregates(ctx, root, nil, []string{agg}); err != nil {
			t.Fatal(err)
		}
		c.addService(t, name)
	}
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	v := s.View()
	specs := []map[string]string{
		nil,
		{"resources1:VCPU": "2", "resources1:MEMORY_MB": "4096", "resources:VCPU": "0", "resources:MEMORY_MB": "0"},
		{"resources1:VCPU": "3", "resources2:VCPU": "3", "resources:VCPU": "0", "group_policy": "isolate"},
	}
	render := func(m map[*HostState]map[string]placement.Resources) string {
		var out []string
		for h, a := range m {
			out = append(out, fmt.Sprintf("%s=%v", h.Name, a))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	r := rand.New(rand.NewPCG(3, 4))
	var live []string
	for step := 0; step < 150; step++ {
		if len(live) > 0 && r.IntN(3) == 0 {
			k := r.IntN(len(live))
			if _, err := c.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: live[k], AnyConsumerGeneration: true}); err != nil {
				t.Fatal(err)
			}
			live = append(live[:k], live[k+1:]...)
		} else {
			id := fmt.Sprint("vm", step)
			_, err := s.Select(ctx, &Request{Resources: small(), ExtraSpecs: specs[r.IntN(len(specs))]}, treeClaim(c.st, id))
			if err == nil {
				live = append(live, id)
			} else if !IsNoValidHost(err) {
				t.Fatal(err)
			}
		}
		if err := v.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		for _, sp := range specs {
			req := &Request{Resources: small(), ExtraSpecs: sp}
			req.prepare(c.clk.Now())
			v.mu.Lock()
			cached := render(v.treeAllocations(req.query))
			fresh := map[*HostState]map[string]placement.Resources{}
			q := req.query
			q.FirstPerTree = true
			v.merge(fresh, v.forestLocked(), q)
			v.mu.Unlock()
			if got := render(fresh); cached != got {
				t.Fatalf("step %d, %v: cached\n%s\nfresh\n%s", step, sp, cached, got)
			}
		}
	}
	for _, pool := range []string{"rp-pool-0", "rp-pool-1", "rp-pool-2"} {
		if u := usage(t, c.st, pool); u[placement.DiskGB] == 0 {
			t.Errorf("%s holds nothing at the end: the walk never took from a pool", pool)
		}
	}
	if len(live) < 20 {
		t.Errorf("only %d servers live at the end: the walk claimed too little to test anything", len(live))
	}
}

// TestTreeAnswersAfterAPoolFrees: two trees whose only disk is one pool
// with room for one server; once it is taken neither tree has a
// candidate, and when the server goes (seen through the change stream)
// both have one again, though neither tree itself changed.
func TestTreeAnswersAfterAPoolFrees(t *testing.T) {
	c := newCloud(t, 0)
	ctx := context.Background()
	mk := func(p placement.Provider) {
		t.Helper()
		if _, err := c.st.CreateProvider(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	mk(placement.Provider{UUID: "rp-pool", Name: "pool", Traits: []string{placement.SharesViaAggregate},
		Inventories: placement.Inventories{placement.DiskGB: placement.NewInventory(20)}})
	for _, name := range []string{"a", "b"} {
		mk(placement.Provider{UUID: "rp-" + name, Name: name, Inventories: placement.Inventories{
			placement.VCPU: placement.NewInventory(8), placement.MemoryMB: placement.NewInventory(16384)}})
		c.addService(t, name)
	}
	for _, u := range []string{"rp-pool", "rp-a", "rp-b"} {
		if _, err := c.st.SetProviderAggregates(ctx, u, nil, []string{"agg"}); err != nil {
			t.Fatal(err)
		}
	}
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	hosts := func() string {
		t.Helper()
		exp, err := s.Explain(ctx, &Request{Resources: small()})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range exp.Hosts {
			if h.RejectedBy == "" {
				out = append(out, h.Host)
			}
		}
		return strings.Join(out, ",")
	}
	if got := hosts(); got != "a,b" {
		t.Fatalf("before: %q", got)
	}
	if _, err := s.Select(ctx, &Request{Resources: small()}, treeClaim(c.st, "vm1")); err != nil {
		t.Fatal(err)
	}
	if got := hosts(); got != "" {
		t.Fatalf("with the pool full: %q, want no host", got)
	}
	if _, err := c.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "vm1", AnyConsumerGeneration: true}); err != nil {
		t.Fatal(err)
	}
	if got := hosts(); got != "a,b" {
		t.Fatalf("after the delete: %q, want a,b", got)
	}
}
