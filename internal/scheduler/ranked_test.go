package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
)

// TestWalkPassesOverAlikeHostsByClass: on a fleet of one shape, equally
// loaded, every host ties the k-th best; the ranked walk passes over them
// by their class, reading no host's row, and still picks in host order.
// Before classes it read every alike host's row at each decision (3,000
// rows a decision here; 30,000 at the simulator's 100,000 hosts, most of
// its decisions' time).
func TestWalkPassesOverAlikeHostsByClass(t *testing.T) {
	const n = 3000
	c := newCloud(t, 0)
	for i := 0; i < n; i++ {
		c.addHost(t, fmt.Sprintf("h%05d", i))
	}
	cfg := DefaultConfig()
	cfg.HostSubsetSize = 3
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	ctx := context.Background()
	const decisions = 20
	used := map[string]bool{}
	for i := 0; i < decisions; i++ {
		got, err := s.Select(ctx, &Request{Resources: small()}, storeClaim(c.st, fmt.Sprint("c", i), small()))
		if err != nil {
			t.Fatal(err)
		}
		// Each claim drops its host below the others: the best three are
		// the first three untouched hosts in host order.
		var first []string
		for j := 0; len(first) < 3; j++ {
			if h := fmt.Sprintf("h%05d", j); !used[h] {
				first = append(first, h)
			}
		}
		if !slices.Contains(first, got.Host) {
			t.Errorf("decision %d chose %s, want one of %v", i, got.Host, first)
		}
		used[got.Host] = true
	}
	if s.walks != decisions {
		t.Fatalf("the ranked walk answered %d of %d decisions", s.walks, decisions)
	}
	if r := s.view.dense.rank.rowTies; r > decisions*8 {
		t.Errorf("the walks read %d rows to pass over ties (%d decisions over %d alike hosts), want a few a decision", r, decisions, n)
	}
}

// TestWalkPassesOverADominatedClass: when the walk's bound is loose (here
// a disabled host with a huge disk widens the disk order's range, so its
// coefficient is far from the decision's scale), a run of alike hosts just
// below the k-th best cannot be cut off by the bound; once one of them is
// weighed and found not better, the rest of its class are passed over.
// Before, each was weighed until the walk gave up (a quarter of the hosts)
// and the decision weighed every host: the walk answered none of them.
func TestWalkPassesOverADominatedClass(t *testing.T) {
	const n, better, decisions = 3000, 12, 4
	c := newCloud(t, 0)
	ctx := context.Background()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("h%05d", i)
		c.addHost(t, name)
		if i >= better {
			c.use(t, name, "u-"+name, small())
		}
	}
	if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: "rp-wide", Name: "wide", Inventories: placement.Inventories{
		placement.VCPU: placement.NewInventory(32), placement.MemoryMB: placement.NewInventory(131072), placement.DiskGB: placement.NewInventory(200000),
	}}); err != nil {
		t.Fatal(err)
	}
	if err := c.st.PutService(ctx, records.Service{Host: "wide", Disabled: true, LastSeenUp: c.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.HostSubsetSize = 3
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	for i := 0; i < decisions; i++ {
		got, err := s.Select(ctx, &Request{Resources: small()}, storeClaim(c.st, fmt.Sprint("c", i), small()))
		if err != nil {
			t.Fatal(err)
		}
		if got.Host >= fmt.Sprintf("h%05d", better) {
			t.Errorf("decision %d chose %s, want one of the %d untouched hosts", i, got.Host, better)
		}
	}
	if s.walks != decisions {
		t.Errorf("the ranked walk answered %d of %d decisions, want all", s.walks, decisions)
	}
}

// TestCompositeOrderStaysFindable: through claims, deletes and re-keyings
// the composite order stays sorted, and each host's item is found from
// its kept key (find's binary search, no scan) with its current key and
// class.
func TestCompositeOrderStaysFindable(t *testing.T) {
	const n = 2000
	c := newCloud(t, 0)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("h%05d", i)
		c.addHost(t, name)
		if i%3 != 0 { // a third alike and empty, the rest random
			c.use(t, name, "init-"+name, placement.Resources{placement.VCPU: int64(r.IntN(30)) + 1, placement.MemoryMB: int64(r.IntN(60000)) + 1, placement.DiskGB: int64(r.IntN(900)) + 1})
		}
	}
	cfg := DefaultConfig()
	cfg.HostSubsetSize = 3
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	ctx := context.Background()
	for i := 0; i < 3000; i++ {
		consumer := fmt.Sprint("c", i)
		if _, err := s.Select(ctx, &Request{Resources: small()}, storeClaim(c.st, consumer, small())); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 { // free an earlier claim: its host moves up
			if _, err := c.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: fmt.Sprint("c", r.IntN(i)), AnyConsumerGeneration: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.View().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	ri, rows := &s.view.dense.rank, s.view.dense.rows
	for p := 1; p < len(ri.comp); p++ {
		if !compLess(ri.comp[p-1], ri.comp[p]) {
			t.Fatalf("composite order unsorted at %d: %+v then %+v", p, ri.comp[p-1], ri.comp[p])
		}
	}
	for i := range rows {
		p := lowerBound(ri.comp, rankItem{v: ri.keyOf[i], idx: int32(i)})
		if p == len(ri.comp) || ri.comp[p].idx != int32(i) {
			t.Fatalf("host %d not found at its key %v", i, ri.keyOf[i])
		}
		if it := ri.comp[p]; it.v != ri.key(&rows[i].raw) || it.cls != ri.clsOf[i] {
			t.Fatalf("host %d: item %+v, want key %v class %d", i, it, ri.key(&rows[i].raw), ri.clsOf[i])
		}
	}
}
