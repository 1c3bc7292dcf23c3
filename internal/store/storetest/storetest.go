// Package storetest is the conformance suite every store.Store
// implementation runs: providers and inventories, allocation writes decided
// by placement.PlanWrites (generations, capacity, unit constraints, atomic
// moves), the compute records, the change stream, and concurrent claims that
// must never overcommit a provider.
//
// An implementation's test calls Run with a function opening a fresh, empty
// store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
//	}
//
// The suite closes every store it opens when the subtest ends, so open need
// not register a cleanup for Close (it may, if Close is idempotent).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"

	"keel/internal/placement"
	"keel/internal/store"
)

// Run runs the whole suite against stores made by open. Each subtest gets its
// own store; subtests do not run in parallel, so timings stay readable on
// small machines.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	groups := []struct {
		name  string
		tests []subtest
	}{
		{"Providers", providerTests},
		{"ProviderDetails", treeTests},
		{"Allocations", allocationTests},
		{"Reshape", reshapeTests},
		{"Records", recordTests},
		{"Changes", changeTests},
		{"Groups", groupTests},
		{"Concurrency", concurrencyTests},
		{"Quotas", quotaTests},
		{"Plans", planTests},
		{"KeyPairs", keyPairTests},
		{"Identity", identityTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) {
					s := open(t)
					if s == nil {
						t.Fatal("open returned a nil store")
					}
					t.Cleanup(func() {
						if err := s.Close(); err != nil {
							t.Errorf("Close: %v", err)
						}
					})
					st.fn(t, s)
				})
			}
		})
	}
}

// subtest is one named test of the suite.
type subtest struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// uuidFor returns a well-formed UUID string unique per (kind, n), so stores
// that keep UUIDs in a native column type accept them.
func uuidFor(kind uint32, n int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", kind, n)
}

// UUID kinds used by the suite.
const (
	kindProvider  = 0x0000a001
	kindConsumer  = 0x0000c001
	kindInstance  = 0x0000d001
	kindMigration = 0x0000e001
)

func providerUUID(n int) string { return uuidFor(kindProvider, n) }
func consumerUUID(n int) string { return uuidFor(kindConsumer, n) }

func gen(g int64) *int64 { return &g }

// stdInventories is a small compute host: 8 VCPU at ratio 2 (capacity 16),
// 16384 MB of RAM with 512 reserved (capacity 15872), 100 GB of disk.
func stdInventories() placement.Inventories {
	vcpu := placement.NewInventory(8)
	vcpu.AllocationRatio = 2
	vcpu.MaxUnit = 8
	mem := placement.NewInventory(16384)
	mem.Reserved = 512
	return placement.Inventories{
		placement.VCPU:     vcpu,
		placement.MemoryMB: mem,
		placement.DiskGB:   placement.NewInventory(100),
	}
}

func mustCreateProvider(t *testing.T, s store.Store, n int, invs placement.Inventories) placement.Provider {
	t.Helper()
	p, err := s.CreateProvider(context.Background(), placement.Provider{
		UUID: providerUUID(n), Name: fmt.Sprintf("host-%d", n), Inventories: invs,
	})
	if err != nil {
		t.Fatalf("CreateProvider %d: %v", n, err)
	}
	return p
}

func mustGetProvider(t *testing.T, s store.Store, uuid string) placement.Provider {
	t.Helper()
	p, err := s.GetProvider(context.Background(), uuid)
	if err != nil {
		t.Fatalf("GetProvider %s: %v", uuid, err)
	}
	return p
}

// usageOf returns a provider's usage as ProviderSummaries reports it.
func usageOf(t *testing.T, s store.Store, uuid string) placement.Resources {
	t.Helper()
	sums, err := s.ProviderSummaries(context.Background(), []string{uuid})
	if err != nil {
		t.Fatalf("ProviderSummaries(%s): %v", uuid, err)
	}
	if len(sums) != 1 {
		t.Fatalf("ProviderSummaries(%s): got %d summaries, want 1", uuid, len(sums))
	}
	return sums[0].Usage
}

func wantUsage(t *testing.T, s store.Store, uuid string, want placement.Resources) {
	t.Helper()
	if got := usageOf(t, s, uuid); !got.Equal(want) {
		t.Errorf("usage of %s = %v, want %v", uuid, got, want)
	}
}

// claim writes a new consumer's allocations (consumer generation nil).
func claim(s store.Store, consumer string, allocs map[string]placement.Resources) (placement.WritePlan, error) {
	return s.WriteAllocations(context.Background(), placement.AllocationWrite{
		ConsumerUUID: consumer, ProjectID: "proj", UserID: "user", Allocations: allocs,
	})
}

func mustClaim(t *testing.T, s store.Store, consumer string, allocs map[string]placement.Resources) placement.WritePlan {
	t.Helper()
	plan, err := claim(s, consumer, allocs)
	if err != nil {
		t.Fatalf("claiming %v for %s: %v", allocs, consumer, err)
	}
	return plan
}

func mustGetConsumer(t *testing.T, s store.Store, uuid string) placement.Consumer {
	t.Helper()
	c, err := s.GetConsumer(context.Background(), uuid)
	if err != nil {
		t.Fatalf("GetConsumer %s: %v", uuid, err)
	}
	return c
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: err = %v, want one wrapping store.ErrNotFound", what, err)
	}
}

// wantConflict checks that err is a *placement.ConflictError of kind (any
// kind if kind is empty) about uuid, and returns it.
func wantConflict(t *testing.T, what string, err error, kind placement.ConflictKind, uuid string) *placement.ConflictError {
	t.Helper()
	var ce *placement.ConflictError
	if !errors.As(err, &ce) {
		t.Errorf("%s: err = %v, want a *placement.ConflictError", what, err)
		return nil
	}
	if kind != "" && ce.Kind != kind {
		t.Errorf("%s: conflict kind = %q, want %q", what, ce.Kind, kind)
	}
	if uuid != "" && ce.UUID != uuid {
		t.Errorf("%s: conflict about %q, want %q", what, ce.UUID, uuid)
	}
	return ce
}

func wantCapacity(t *testing.T, what string, err error, provider string, rc placement.ResourceClass) {
	t.Helper()
	var ce *placement.CapacityError
	if !errors.As(err, &ce) {
		t.Errorf("%s: err = %v, want a *placement.CapacityError", what, err)
		return
	}
	if ce.Provider != provider || ce.Class != rc {
		t.Errorf("%s: capacity error about %s/%s, want %s/%s", what, ce.Provider, ce.Class, provider, rc)
	}
}

// snapshot is everything observable about a set of providers and consumers,
// to check that a refused write changed nothing.
type snapshot struct {
	providers map[string]store.ProviderSummary
	consumers map[string]*placement.Consumer // nil: does not exist
	last      int64
}

func takeSnapshot(t *testing.T, s store.Store, consumers ...string) snapshot {
	t.Helper()
	ctx := context.Background()
	sums, err := s.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatalf("ProviderSummaries: %v", err)
	}
	snap := snapshot{providers: map[string]store.ProviderSummary{}, consumers: map[string]*placement.Consumer{}}
	for _, ps := range sums {
		snap.providers[ps.UUID] = ps
	}
	for _, c := range consumers {
		got, err := s.GetConsumer(ctx, c)
		switch {
		case errors.Is(err, store.ErrNotFound):
			snap.consumers[c] = nil
		case err != nil:
			t.Fatalf("GetConsumer %s: %v", c, err)
		default:
			snap.consumers[c] = &got
		}
	}
	if snap.last, err = s.LastChange(ctx); err != nil {
		t.Fatalf("LastChange: %v", err)
	}
	return snap
}

func (a snapshot) diff(b snapshot) []string {
	var out []string
	for u, pa := range a.providers {
		pb, ok := b.providers[u]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("provider %s disappeared", u))
		case pa.Generation != pb.Generation:
			out = append(out, fmt.Sprintf("provider %s generation %d → %d", u, pa.Generation, pb.Generation))
		case !pa.Usage.Equal(pb.Usage):
			out = append(out, fmt.Sprintf("provider %s usage %v → %v", u, pa.Usage, pb.Usage))
		}
	}
	if len(a.providers) != len(b.providers) {
		out = append(out, fmt.Sprintf("%d providers → %d", len(a.providers), len(b.providers)))
	}
	for u, ca := range a.consumers {
		cb := b.consumers[u]
		switch {
		case (ca == nil) != (cb == nil):
			out = append(out, fmt.Sprintf("consumer %s existence changed", u))
		case ca != nil && !sameConsumer(*ca, *cb):
			out = append(out, fmt.Sprintf("consumer %s changed: %+v → %+v", u, *ca, *cb))
		}
	}
	if a.last != b.last {
		out = append(out, fmt.Sprintf("change stream moved from %d to %d", a.last, b.last))
	}
	return out
}

func wantUnchanged(t *testing.T, what string, before, after snapshot) {
	t.Helper()
	for _, d := range before.diff(after) {
		t.Errorf("%s: refused write changed state: %s", what, d)
	}
}

func sameConsumer(a, b placement.Consumer) bool {
	if a.UUID != b.UUID || a.ProjectID != b.ProjectID || a.UserID != b.UserID ||
		a.Type != b.Type || a.Generation != b.Generation || len(a.Allocations) != len(b.Allocations) {
		return false
	}
	for p, r := range a.Allocations {
		if !r.Equal(b.Allocations[p]) {
			return false
		}
	}
	return true
}

// checkUsageMatchesAllocations verifies, for every provider, that the usage
// ProviderSummaries reports is the sum of the allocations of the consumers
// ConsumersOn lists.
func checkUsageMatchesAllocations(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	sums, err := s.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatalf("ProviderSummaries: %v", err)
	}
	for _, ps := range sums {
		cs, err := s.ConsumersOn(ctx, ps.UUID)
		if err != nil {
			t.Fatalf("ConsumersOn %s: %v", ps.UUID, err)
		}
		sum := placement.Resources{}
		for _, c := range cs {
			r, ok := c.Allocations[ps.UUID]
			if !ok {
				t.Errorf("ConsumersOn(%s) lists %s, which holds nothing there (%v)", ps.UUID, c.UUID, c.Allocations)
			}
			sum.Add(r)
		}
		if !sum.Equal(ps.Usage) {
			t.Errorf("provider %s: usage %v, but its consumers' allocations sum to %v", ps.UUID, ps.Usage, sum)
		}
	}
}

func sortedStrings(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
