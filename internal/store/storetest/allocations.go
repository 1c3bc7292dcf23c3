package storetest

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"testing"

	"keel/internal/placement"
	"keel/internal/store"
)

var allocationTests = []subtest{
	{"NewConsumer", testNewConsumer},
	{"ConsumerGenerations", testConsumerGenerations},
	{"ProviderGenerations", testProviderGenerations},
	{"Capacity", testCapacity},
	{"HugeCapacityNoOverflow", testHugeCapacity},
	{"UnitConstraints", testUnitConstraints},
	{"InvalidWrites", testInvalidWrites},
	{"GenerationBumps", testGenerationBumps},
	{"DeleteConsumer", testDeleteConsumer},
	{"AtomicMove", testAtomicMove},
	{"AtomicMoveDestinationFull", testAtomicMoveDestinationFull},
	{"ConsumersOn", testConsumersOn},
	{"UsageIsSumOfAllocations", testUsageIsSumOfAllocations},
}

func testNewConsumer(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, stdInventories())
	_, err := s.GetConsumer(ctx, consumerUUID(1))
	wantNotFound(t, "GetConsumer before any write", err)

	alloc := placement.Resources{placement.VCPU: 2, placement.MemoryMB: 4096, placement.DiskGB: 20}
	plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: consumerUUID(1), ProjectID: "proj-a", UserID: "user-a",
		Allocations: map[string]placement.Resources{p.UUID: alloc},
	})
	if err != nil {
		t.Fatalf("WriteAllocations for a new consumer: %v", err)
	}
	if len(plan.Consumers) != 1 || plan.Consumers[0].New == nil || plan.Consumers[0].New.Generation != 1 {
		t.Errorf("plan.Consumers = %+v, want one new consumer at generation 1", plan.Consumers)
	}
	if len(plan.Providers) != 1 || plan.Providers[p.UUID] != 2 {
		t.Errorf("plan.Providers = %v, want %s → 2", plan.Providers, p.UUID)
	}
	c := mustGetConsumer(t, s, consumerUUID(1))
	want := placement.Consumer{
		UUID: consumerUUID(1), ProjectID: "proj-a", UserID: "user-a", Type: placement.ConsumerInstance,
		Generation: 1, Allocations: map[string]placement.Resources{p.UUID: alloc},
	}
	if !sameConsumer(c, want) {
		t.Errorf("GetConsumer = %+v, want %+v", c, want)
	}
	wantUsage(t, s, p.UUID, alloc)
	if got := mustGetProvider(t, s, p.UUID); got.Generation != 2 {
		t.Errorf("provider generation = %d, want 2", got.Generation)
	}

	// The consumer type is kept.
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: consumerUUID(2), Type: placement.ConsumerMigration,
		Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 1}},
	}); err != nil {
		t.Fatalf("WriteAllocations for a migration consumer: %v", err)
	}
	if c := mustGetConsumer(t, s, consumerUUID(2)); c.Type != placement.ConsumerMigration {
		t.Errorf("consumer type = %q, want %q", c.Type, placement.ConsumerMigration)
	}
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 3, placement.MemoryMB: 4096, placement.DiskGB: 20})
}

func testConsumerGenerations(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, stdInventories())
	c := consumerUUID(1)
	mustClaim(t, s, c, map[string]placement.Resources{p.UUID: {placement.VCPU: 2}})

	// Update with the right generation: replaces the allocations.
	plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: c, ConsumerGeneration: gen(1),
		Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 3, placement.MemoryMB: 1024}},
	})
	if err != nil {
		t.Fatalf("update at generation 1: %v", err)
	}
	if plan.Consumers[0].New == nil || plan.Consumers[0].New.Generation != 2 {
		t.Errorf("plan after update = %+v, want consumer generation 2", plan.Consumers)
	}
	got := mustGetConsumer(t, s, c)
	if got.Generation != 2 || got.ProjectID != "proj" || got.UserID != "user" {
		t.Errorf("after update: %+v, want generation 2 and the project/user of the first write", got)
	}
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 3, placement.MemoryMB: 1024})

	write := func(g *int64) error {
		_, err := s.WriteAllocations(ctx, placement.AllocationWrite{
			ConsumerUUID: c, ConsumerGeneration: g,
			Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 1}},
		})
		return err
	}
	before := takeSnapshot(t, s, c)
	ce := wantConflict(t, "stale consumer generation", write(gen(1)), placement.ConsumerGeneration, c)
	if ce != nil && (ce.Expected == nil || *ce.Expected != 1 || ce.Actual == nil || *ce.Actual != 2) {
		t.Errorf("conflict = %v, want expected 1, actual 2", ce)
	}
	wantConflict(t, "nil generation for an existing consumer", write(nil), placement.ConsumerGeneration, c)
	wantConflict(t, "future consumer generation", write(gen(3)), placement.ConsumerGeneration, c)
	wantUnchanged(t, "consumer generation conflicts", before, takeSnapshot(t, s, c))

	// A generation for a consumer that does not exist is a conflict too.
	_, err = s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: consumerUUID(2), ConsumerGeneration: gen(1),
		Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 1}},
	})
	wantConflict(t, "generation for a missing consumer", err, placement.ConsumerGeneration, consumerUUID(2))
	_, err = s.GetConsumer(ctx, consumerUUID(2))
	wantNotFound(t, "consumer refused for its generation", err)

	// AnyConsumerGeneration skips the check.
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: c, AnyConsumerGeneration: true,
		Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 1}},
	}); err != nil {
		t.Fatalf("AnyConsumerGeneration write: %v", err)
	}
	if got := mustGetConsumer(t, s, c); got.Generation != 3 {
		t.Errorf("generation after AnyConsumerGeneration write = %d, want 3", got.Generation)
	}
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 1})
}

func testProviderGenerations(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustCreateProvider(t, s, 1, stdInventories())
	b := mustCreateProvider(t, s, 2, stdInventories())
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{a.UUID: {placement.VCPU: 1}}) // a → 2

	before := takeSnapshot(t, s, consumerUUID(2))
	_, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID:        consumerUUID(2),
		Allocations:         map[string]placement.Resources{a.UUID: {placement.VCPU: 1}},
		ProviderGenerations: map[string]int64{a.UUID: 1},
	})
	ce := wantConflict(t, "stale provider generation", err, placement.ProviderGeneration, a.UUID)
	if ce != nil && (ce.Expected == nil || *ce.Expected != 1 || ce.Actual == nil || *ce.Actual != 2) {
		t.Errorf("conflict = %v, want expected 1, actual 2", ce)
	}
	wantUnchanged(t, "stale provider generation", before, takeSnapshot(t, s, consumerUUID(2)))

	// A named provider the write does not allocate on is checked as well.
	_, err = s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID:        consumerUUID(2),
		Allocations:         map[string]placement.Resources{b.UUID: {placement.VCPU: 1}},
		ProviderGenerations: map[string]int64{b.UUID: 1, a.UUID: 1},
	})
	wantConflict(t, "stale generation of a provider named but not written", err, placement.ProviderGeneration, a.UUID)
	wantUnchanged(t, "stale generation of a provider named but not written", before, takeSnapshot(t, s, consumerUUID(2)))

	_, err = s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID:        consumerUUID(2),
		Allocations:         map[string]placement.Resources{b.UUID: {placement.VCPU: 1}},
		ProviderGenerations: map[string]int64{providerUUID(9): 0},
	})
	wantNotFound(t, "generation of an unknown provider", err)

	plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID:        consumerUUID(2),
		Allocations:         map[string]placement.Resources{a.UUID: {placement.VCPU: 1}},
		ProviderGenerations: map[string]int64{a.UUID: 2},
	})
	if err != nil {
		t.Fatalf("write with the current provider generation: %v", err)
	}
	if plan.Providers[a.UUID] != 3 {
		t.Errorf("plan.Providers = %v, want %s → 3", plan.Providers, a.UUID)
	}
	wantUsage(t, s, a.UUID, placement.Resources{placement.VCPU: 2})
}

func testCapacity(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, stdInventories()) // VCPU capacity 16, max_unit 8; MEMORY_MB capacity 15872
	q := mustCreateProvider(t, s, 2, stdInventories())

	// Exactly at capacity fits.
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{p.UUID: {placement.VCPU: 8, placement.MemoryMB: 15872 - 512}})
	mustClaim(t, s, consumerUUID(2), map[string]placement.Resources{p.UUID: {placement.VCPU: 8, placement.MemoryMB: 512}})
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 16, placement.MemoryMB: 15872})
	mustClaim(t, s, consumerUUID(9), map[string]placement.Resources{q.UUID: {placement.DiskGB: 60}})

	consumers := []string{consumerUUID(3), consumerUUID(4)}
	before := takeSnapshot(t, s, consumers...)
	_, err := claim(s, consumerUUID(3), map[string]placement.Resources{p.UUID: {placement.VCPU: 1}})
	wantCapacity(t, "one VCPU over capacity", err, p.UUID, placement.VCPU)
	_, err = claim(s, consumerUUID(3), map[string]placement.Resources{q.UUID: {placement.DiskGB: 41}})
	wantCapacity(t, "disk over capacity", err, q.UUID, placement.DiskGB)
	// An amount above max_unit is a bad request, not a full host.
	_, err = claim(s, consumerUUID(3), map[string]placement.Resources{q.UUID: {placement.DiskGB: 101}})
	if !placement.IsInvalid(err) {
		t.Errorf("disk above max_unit: err = %v, want a *placement.InvalidError", err)
	}
	_, err = claim(s, consumerUUID(3), map[string]placement.Resources{q.UUID: {placement.MemoryMB: 15873}})
	wantCapacity(t, "memory over capacity (reserved excluded)", err, q.UUID, placement.MemoryMB)
	_, err = claim(s, consumerUUID(3), map[string]placement.Resources{q.UUID: {"CUSTOM_GPU": 1}})
	wantCapacity(t, "class without inventory", err, q.UUID, "CUSTOM_GPU")

	// Several providers in one write: the one that fits is not written either.
	_, err = claim(s, consumerUUID(3), map[string]placement.Resources{
		q.UUID: {placement.VCPU: 1},
		p.UUID: {placement.MemoryMB: 1},
	})
	wantCapacity(t, "write whose second provider is full", err, p.UUID, placement.MemoryMB)

	// Several consumers in one write: all or none.
	_, err = s.WriteAllocations(ctx,
		placement.AllocationWrite{ConsumerUUID: consumerUUID(3), Allocations: map[string]placement.Resources{q.UUID: {placement.VCPU: 4}}},
		placement.AllocationWrite{ConsumerUUID: consumerUUID(4), Allocations: map[string]placement.Resources{q.UUID: {placement.VCPU: 8}}},
		placement.AllocationWrite{ConsumerUUID: consumerUUID(5), Allocations: map[string]placement.Resources{q.UUID: {placement.VCPU: 8}}},
	)
	wantCapacity(t, "third of three writes over capacity", err, q.UUID, placement.VCPU)
	wantUnchanged(t, "capacity errors", before, takeSnapshot(t, s, consumers...))
	_, err = s.GetConsumer(ctx, consumerUUID(5))
	wantNotFound(t, "consumer of a refused multi-write", err)

	// Shrinking an existing consumer on a full provider is allowed: its old
	// allocation is not counted against it.
	c := mustGetConsumer(t, s, consumerUUID(1))
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: c.UUID, ConsumerGeneration: gen(c.Generation),
		Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 8, placement.MemoryMB: 1024}},
	}); err != nil {
		t.Fatalf("rewriting a consumer on a full provider: %v", err)
	}
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 16, placement.MemoryMB: 1536})
	checkUsageMatchesAllocations(t, s)
}

func testUnitConstraints(t *testing.T, s store.Store) {
	fpga := placement.Inventory{Total: 100, MinUnit: 4, MaxUnit: 16, StepSize: 4, AllocationRatio: 1}
	p := mustCreateProvider(t, s, 1, placement.Inventories{"CUSTOM_FPGA": fpga})
	for _, n := range []int64{2, 20, 6, 15} {
		before := takeSnapshot(t, s, consumerUUID(1))
		_, err := claim(s, consumerUUID(1), map[string]placement.Resources{p.UUID: {"CUSTOM_FPGA": n}})
		if err == nil {
			t.Errorf("claim of %d CUSTOM_FPGA (min 4, max 16, step 4) accepted", n)
			continue
		}
		if !placement.IsCapacity(err) && !placement.IsInvalid(err) {
			t.Errorf("claim of %d CUSTOM_FPGA: err = %v, want a capacity or invalid error", n, err)
		}
		wantUnchanged(t, "unit constraint violation", before, takeSnapshot(t, s, consumerUUID(1)))
	}
	for i, n := range []int64{4, 8, 16} {
		mustClaim(t, s, consumerUUID(10+i), map[string]placement.Resources{p.UUID: {"CUSTOM_FPGA": n}})
	}
	wantUsage(t, s, p.UUID, placement.Resources{"CUSTOM_FPGA": 28})
}

func testInvalidWrites(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, stdInventories())
	before := takeSnapshot(t, s, consumerUUID(1))

	_, err := claim(s, consumerUUID(1), map[string]placement.Resources{p.UUID: {placement.VCPU: 0}})
	if !placement.IsInvalid(err) {
		t.Errorf("zero amount: err = %v, want a *placement.InvalidError", err)
	}
	_, err = claim(s, consumerUUID(1), map[string]placement.Resources{p.UUID: {placement.VCPU: -2}})
	if !placement.IsInvalid(err) {
		t.Errorf("negative amount: err = %v, want a *placement.InvalidError", err)
	}
	_, err = claim(s, consumerUUID(1), map[string]placement.Resources{providerUUID(9): {placement.VCPU: 1}})
	wantNotFound(t, "allocation on an unknown provider", err)
	_, err = s.WriteAllocations(ctx, placement.AllocationWrite{Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 1}}})
	if !placement.IsInvalid(err) {
		t.Errorf("write without consumer: err = %v, want a *placement.InvalidError", err)
	}
	w := placement.AllocationWrite{ConsumerUUID: consumerUUID(1), Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 1}}}
	_, err = s.WriteAllocations(ctx, w, w)
	if !placement.IsInvalid(err) {
		t.Errorf("consumer written twice in one call: err = %v, want a *placement.InvalidError", err)
	}
	wantUnchanged(t, "invalid writes", before, takeSnapshot(t, s, consumerUUID(1)))

	// An empty call writes nothing and fails nothing.
	if _, err := s.WriteAllocations(ctx); err != nil {
		t.Errorf("WriteAllocations with no writes: %v", err)
	}
	wantUnchanged(t, "empty WriteAllocations", before, takeSnapshot(t, s, consumerUUID(1)))
}

func testGenerationBumps(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustCreateProvider(t, s, 1, stdInventories())
	b := mustCreateProvider(t, s, 2, stdInventories())
	c := mustCreateProvider(t, s, 3, stdInventories())
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{a.UUID: {placement.VCPU: 1}})
	mustClaim(t, s, consumerUUID(2), map[string]placement.Resources{c.UUID: {placement.VCPU: 1}})
	// Generations now a 2, b 1, c 2.

	// Moving consumer 1 from a to b changes both usages: both bump, c does not.
	plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: consumerUUID(1), ConsumerGeneration: gen(1),
		Allocations: map[string]placement.Resources{b.UUID: {placement.VCPU: 2}},
	})
	if err != nil {
		t.Fatalf("moving consumer 1: %v", err)
	}
	want := map[string]int64{a.UUID: 3, b.UUID: 2}
	if len(plan.Providers) != 2 || plan.Providers[a.UUID] != 3 || plan.Providers[b.UUID] != 2 {
		t.Errorf("plan.Providers = %v, want %v", plan.Providers, want)
	}
	for u, g := range map[string]int64{a.UUID: 3, b.UUID: 2, c.UUID: 2} {
		if got := mustGetProvider(t, s, u).Generation; got != g {
			t.Errorf("generation of %s = %d, want %d", u, got, g)
		}
	}
	wantUsage(t, s, a.UUID, placement.Resources{})
	wantUsage(t, s, b.UUID, placement.Resources{placement.VCPU: 2})

	// Two consumers on two providers in one call: each provider bumps once.
	plan, err = s.WriteAllocations(ctx,
		placement.AllocationWrite{ConsumerUUID: consumerUUID(3), Allocations: map[string]placement.Resources{a.UUID: {placement.VCPU: 1}, c.UUID: {placement.VCPU: 1}}},
		placement.AllocationWrite{ConsumerUUID: consumerUUID(4), Allocations: map[string]placement.Resources{a.UUID: {placement.VCPU: 1}, c.UUID: {placement.DiskGB: 1}}},
	)
	if err != nil {
		t.Fatalf("two consumers in one call: %v", err)
	}
	for u, g := range map[string]int64{a.UUID: 4, b.UUID: 2, c.UUID: 3} {
		if got := mustGetProvider(t, s, u).Generation; got != g {
			t.Errorf("generation of %s = %d, want %d", u, got, g)
		}
		if pg, ok := plan.Providers[u]; ok && pg != g {
			t.Errorf("plan gives %s generation %d, store has %d", u, pg, g)
		}
	}
	if _, ok := plan.Providers[b.UUID]; ok || len(plan.Providers) != 2 {
		t.Errorf("plan.Providers = %v, want a and c only", plan.Providers)
	}
}

func testDeleteConsumer(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustCreateProvider(t, s, 1, stdInventories())
	b := mustCreateProvider(t, s, 2, stdInventories())
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{
		a.UUID: {placement.VCPU: 2, placement.MemoryMB: 512},
		b.UUID: {placement.DiskGB: 10},
	})
	mustClaim(t, s, consumerUUID(2), map[string]placement.Resources{a.UUID: {placement.VCPU: 1}})

	_, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumerUUID(1), ConsumerGeneration: gen(5)})
	wantConflict(t, "delete with a stale generation", err, placement.ConsumerGeneration, consumerUUID(1))

	plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumerUUID(1), ConsumerGeneration: gen(1), Allocations: map[string]placement.Resources{}})
	if err != nil {
		t.Fatalf("deleting consumer 1: %v", err)
	}
	if len(plan.Consumers) != 1 || plan.Consumers[0].New != nil {
		t.Errorf("plan.Consumers = %+v, want one deletion", plan.Consumers)
	}
	if plan.Providers[a.UUID] != 4 || plan.Providers[b.UUID] != 3 {
		t.Errorf("plan.Providers = %v, want a → 4, b → 3", plan.Providers)
	}
	_, err = s.GetConsumer(ctx, consumerUUID(1))
	wantNotFound(t, "GetConsumer after delete", err)
	wantUsage(t, s, a.UUID, placement.Resources{placement.VCPU: 1})
	wantUsage(t, s, b.UUID, placement.Resources{})
	on, err := s.ConsumersOn(ctx, b.UUID)
	if err != nil || len(on) != 0 {
		t.Errorf("ConsumersOn(b) after delete = %v, %v; want none", on, err)
	}
	if got := mustGetProvider(t, s, b.UUID).Generation; got != 3 {
		t.Errorf("generation of b = %d, want 3", got)
	}

	// The uuid can be used again, as a new consumer.
	plan = mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{b.UUID: {placement.DiskGB: 1}})
	if plan.Consumers[0].New == nil || plan.Consumers[0].New.Generation != 1 {
		t.Errorf("re-created consumer: plan %+v, want generation 1", plan.Consumers)
	}
	checkUsageMatchesAllocations(t, s)
}

// setupMove creates a source and a destination provider and an instance
// consumer holding alloc on the source.
func setupMove(t *testing.T, s store.Store, destInvs placement.Inventories, alloc placement.Resources) (src, dst placement.Provider, inst, mig string) {
	t.Helper()
	src = mustCreateProvider(t, s, 1, stdInventories())
	dst = mustCreateProvider(t, s, 2, destInvs)
	inst, mig = consumerUUID(1), consumerUUID(2)
	mustClaim(t, s, inst, map[string]placement.Resources{src.UUID: alloc})
	// Someone else on the destination, so usage there is not trivially zero.
	mustClaim(t, s, consumerUUID(3), map[string]placement.Resources{dst.UUID: {placement.VCPU: 1, placement.MemoryMB: 512}})
	return mustGetProvider(t, s, src.UUID), mustGetProvider(t, s, dst.UUID), inst, mig
}

// moveWrites hands the instance's source allocation to the migration
// consumer and gives the instance the destination allocation, in one call.
func moveWrites(src, dst placement.Provider, inst, mig string, instGen int64, alloc placement.Resources) []placement.AllocationWrite {
	return []placement.AllocationWrite{
		{
			ConsumerUUID: mig, Type: placement.ConsumerMigration, ProjectID: "proj", UserID: "user",
			Allocations: map[string]placement.Resources{src.UUID: alloc},
		},
		{
			ConsumerUUID: inst, ConsumerGeneration: gen(instGen),
			Allocations:         map[string]placement.Resources{dst.UUID: alloc},
			ProviderGenerations: map[string]int64{dst.UUID: dst.Generation},
		},
	}
}

func testAtomicMove(t *testing.T, s store.Store) {
	ctx := context.Background()
	alloc := placement.Resources{placement.VCPU: 4, placement.MemoryMB: 4096, placement.DiskGB: 40}
	src, dst, inst, mig := setupMove(t, s, stdInventories(), alloc)

	plan, err := s.WriteAllocations(ctx, moveWrites(src, dst, inst, mig, 1, alloc)...)
	if err != nil {
		t.Fatalf("atomic move: %v", err)
	}
	if len(plan.Consumers) != 2 {
		t.Errorf("plan.Consumers = %+v, want two", plan.Consumers)
	}
	// The source's usage is the same amount, now held by the migration.
	wantUsage(t, s, src.UUID, alloc)
	wantUsage(t, s, dst.UUID, placement.Resources{placement.VCPU: 5, placement.MemoryMB: 4608, placement.DiskGB: 40})
	m := mustGetConsumer(t, s, mig)
	if m.Generation != 1 || m.Type != placement.ConsumerMigration || len(m.Allocations) != 1 || !m.Allocations[src.UUID].Equal(alloc) {
		t.Errorf("migration consumer = %+v, want generation 1, type MIGRATION, %v on the source", m, alloc)
	}
	in := mustGetConsumer(t, s, inst)
	if in.Generation != 2 || in.Type != placement.ConsumerInstance || len(in.Allocations) != 1 || !in.Allocations[dst.UUID].Equal(alloc) {
		t.Errorf("instance consumer = %+v, want generation 2, type INSTANCE, %v on the destination", in, alloc)
	}
	if g := mustGetProvider(t, s, src.UUID).Generation; g != src.Generation+1 {
		t.Errorf("source generation = %d, want %d", g, src.Generation+1)
	}
	if g := mustGetProvider(t, s, dst.UUID).Generation; g != dst.Generation+1 {
		t.Errorf("destination generation = %d, want %d", g, dst.Generation+1)
	}
	onSrc, err := s.ConsumersOn(ctx, src.UUID)
	if err != nil || len(onSrc) != 1 || onSrc[0].UUID != mig {
		t.Errorf("ConsumersOn(source) = %+v, %v; want only the migration", onSrc, err)
	}

	// Confirming the move drops the migration's allocation.
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: mig, ConsumerGeneration: gen(1)}); err != nil {
		t.Fatalf("dropping the migration consumer: %v", err)
	}
	wantUsage(t, s, src.UUID, placement.Resources{})
	checkUsageMatchesAllocations(t, s)
}

func testAtomicMoveDestinationFull(t *testing.T, s store.Store) {
	ctx := context.Background()
	alloc := placement.Resources{placement.VCPU: 4, placement.MemoryMB: 4096, placement.DiskGB: 40}
	small := stdInventories()
	disk := placement.NewInventory(60)
	disk.Reserved = 30 // capacity 30: 40 GB do not fit (max_unit 60 allows them)
	small[placement.DiskGB] = disk
	src, dst, inst, mig := setupMove(t, s, small, alloc)

	before := takeSnapshot(t, s, inst, mig)
	_, err := s.WriteAllocations(ctx, moveWrites(src, dst, inst, mig, 1, alloc)...)
	wantCapacity(t, "move to a destination without room", err, dst.UUID, placement.DiskGB)
	wantUnchanged(t, "failed move", before, takeSnapshot(t, s, inst, mig))
	wantUsage(t, s, src.UUID, alloc)
	_, err = s.GetConsumer(ctx, mig)
	wantNotFound(t, "migration consumer of a failed move", err)
	if in := mustGetConsumer(t, s, inst); in.Generation != 1 || !in.Allocations[src.UUID].Equal(alloc) {
		t.Errorf("instance after failed move = %+v, want generation 1 on the source", in)
	}

	// Same with a stale destination generation: a conflict, nothing written.
	stale := dst
	stale.Generation--
	_, err = s.WriteAllocations(ctx, moveWrites(src, stale, inst, mig, 1, placement.Resources{placement.VCPU: 1})...)
	wantConflict(t, "move naming a stale destination generation", err, placement.ProviderGeneration, dst.UUID)
	wantUnchanged(t, "move naming a stale destination generation", before, takeSnapshot(t, s, inst, mig))
	checkUsageMatchesAllocations(t, s)
}

func testConsumersOn(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustCreateProvider(t, s, 1, stdInventories())
	b := mustCreateProvider(t, s, 2, stdInventories())
	mustCreateProvider(t, s, 3, stdInventories())
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{a.UUID: {placement.VCPU: 1}, b.UUID: {placement.DiskGB: 2}})
	mustClaim(t, s, consumerUUID(2), map[string]placement.Resources{a.UUID: {placement.VCPU: 2, placement.MemoryMB: 256}})
	mustClaim(t, s, consumerUUID(3), map[string]placement.Resources{b.UUID: {placement.VCPU: 3}})

	ids := func(cs []placement.Consumer) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.UUID)
		}
		return sortedStrings(out)
	}
	onA, err := s.ConsumersOn(ctx, a.UUID)
	if err != nil {
		t.Fatalf("ConsumersOn(a): %v", err)
	}
	if got, want := ids(onA), []string{consumerUUID(1), consumerUUID(2)}; !equalStrings(got, want) {
		t.Errorf("ConsumersOn(a) = %v, want %v", got, want)
	}
	for _, c := range onA {
		if c.UUID == consumerUUID(1) {
			// The whole consumer, allocations elsewhere included.
			if len(c.Allocations) != 2 || !c.Allocations[b.UUID].Equal(placement.Resources{placement.DiskGB: 2}) || c.Generation != 1 {
				t.Errorf("consumer 1 from ConsumersOn = %+v, want both allocations and generation 1", c)
			}
		}
	}
	onB, err := s.ConsumersOn(ctx, b.UUID)
	if err != nil {
		t.Fatalf("ConsumersOn(b): %v", err)
	}
	if got, want := ids(onB), []string{consumerUUID(1), consumerUUID(3)}; !equalStrings(got, want) {
		t.Errorf("ConsumersOn(b) = %v, want %v", got, want)
	}
	if on, err := s.ConsumersOn(ctx, providerUUID(3)); err != nil || len(on) != 0 {
		t.Errorf("ConsumersOn(empty provider) = %v, %v; want none", on, err)
	}
	if on, err := s.ConsumersOn(ctx, providerUUID(99)); (err != nil && !errors.Is(err, store.ErrNotFound)) || len(on) != 0 {
		t.Errorf("ConsumersOn(unknown provider) = %v, %v; want none", on, err)
	}
	checkUsageMatchesAllocations(t, s)
}

// testUsageIsSumOfAllocations runs a seeded random mix of creates, updates,
// moves and deletes, keeps a model of what succeeded, and checks the store
// against it.
func testUsageIsSumOfAllocations(t *testing.T, s store.Store) {
	ctx := context.Background()
	const nProviders, nConsumers, steps = 4, 12, 300
	var provs []string
	for i := 1; i <= nProviders; i++ {
		invs := stdInventories()
		invs[placement.VCPU] = placement.NewInventory(6)
		provs = append(provs, mustCreateProvider(t, s, i, invs).UUID)
	}
	model := map[string]placement.Consumer{}
	rng := rand.New(rand.NewSource(7))
	var ok, refused int
	for step := 0; step < steps; step++ {
		c := consumerUUID(rng.Intn(nConsumers))
		w := placement.AllocationWrite{ConsumerUUID: c, Allocations: map[string]placement.Resources{}}
		if cur, exists := model[c]; exists {
			w.ConsumerGeneration = gen(cur.Generation)
		}
		if rng.Intn(5) > 0 { // otherwise delete
			for _, p := range provs {
				if rng.Intn(3) == 0 {
					w.Allocations[p] = placement.Resources{placement.VCPU: 1 + rng.Int63n(3), placement.DiskGB: 1 + rng.Int63n(10)}
				}
			}
		}
		plan, err := s.WriteAllocations(ctx, w)
		switch {
		case err == nil:
			ok++
			if len(w.Allocations) == 0 {
				delete(model, c)
			} else {
				model[c] = *plan.Consumers[0].New
			}
		case placement.IsCapacity(err):
			refused++
		default:
			t.Fatalf("step %d: %v", step, err)
		}
	}
	if ok < steps/3 || refused == 0 {
		t.Fatalf("the mix was not exercised: %d writes succeeded, %d refused", ok, refused)
	}

	want := map[string]placement.Resources{}
	for _, c := range model {
		for p, r := range c.Allocations {
			want[p] = want[p].Add(r)
		}
		got := mustGetConsumer(t, s, c.UUID)
		if !sameConsumer(got, c) {
			t.Errorf("consumer %s = %+v, model has %+v", c.UUID, got, c)
		}
	}
	for i := 0; i < nConsumers; i++ {
		if _, exists := model[consumerUUID(i)]; !exists {
			_, err := s.GetConsumer(ctx, consumerUUID(i))
			wantNotFound(t, "consumer absent from the model", err)
		}
	}
	for _, p := range provs {
		u := usageOf(t, s, p)
		if !u.Equal(want[p]) {
			t.Errorf("usage of %s = %v, model says %v", p, u, want[p])
		}
		if u[placement.VCPU] > 6 {
			t.Errorf("provider %s overcommitted: %d VCPU of 6", p, u[placement.VCPU])
		}
	}
	checkUsageMatchesAllocations(t, s)
}

// testHugeCapacity: an inventory whose (total − reserved) × ratio is far
// past int64 (Placement takes ratios up to 3.4e38) is an unbounded
// capacity, not a wrapped one: allocations fit, usage sums exactly, and
// an amount the arithmetic could wrap on (usage + 2^62 + 2^62) is refused
// by max_unit as a bad request, never stored.
func testHugeCapacity(t *testing.T, s store.Store) {
	const maxInt = 1<<31 - 1
	vcpu := placement.NewInventory(maxInt)
	vcpu.AllocationRatio = 3.4e38
	p := mustCreateProvider(t, s, 1, placement.Inventories{placement.VCPU: vcpu})
	if got := mustGetProvider(t, s, p.UUID).Inventories[placement.VCPU].Capacity(); got != math.MaxInt64 {
		t.Fatalf("capacity of %d VCPU at ratio 3.4e38 = %d, want math.MaxInt64", maxInt, got)
	}
	for i := 1; i <= 3; i++ {
		mustClaim(t, s, consumerUUID(i), map[string]placement.Resources{p.UUID: {placement.VCPU: maxInt}})
	}
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 3 * maxInt})
	_, err := claim(s, consumerUUID(9), map[string]placement.Resources{p.UUID: {placement.VCPU: 1 << 62}})
	if err == nil || !placement.IsInvalid(err) {
		t.Fatalf("claiming 2^62 VCPU (past max_unit): %v, want an invalid-request error", err)
	}
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 3 * maxInt})

	// A max_unit as large as int64 allows, on a capacity that is not: the
	// sum usage + n is never formed, so no wrap lets 2^62 + 2^62 through.
	mem := placement.NewInventory(1 << 62)
	mem.MaxUnit = math.MaxInt64
	q := mustCreateProvider(t, s, 2, placement.Inventories{placement.MemoryMB: mem})
	mustClaim(t, s, consumerUUID(4), map[string]placement.Resources{q.UUID: {placement.MemoryMB: 1 << 62}})
	_, err = claim(s, consumerUUID(5), map[string]placement.Resources{q.UUID: {placement.MemoryMB: math.MaxInt64}})
	if !placement.IsCapacity(err) {
		t.Fatalf("claiming MaxInt64 MEMORY_MB on a full provider: %v, want a capacity error", err)
	}
	wantUsage(t, s, q.UUID, placement.Resources{placement.MemoryMB: 1 << 62})
}
