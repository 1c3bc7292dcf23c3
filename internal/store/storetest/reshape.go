package storetest

import (
	"context"
	"errors"
	"testing"

	"keel/internal/placement"
	"keel/internal/store"
)

var reshapeTests = []subtest{
	{"MovesInventoryAndAllocationsIntoAChild", testReshapeIntoChild},
	{"RefusesAtomically", testReshapeRefusals},
}

// testReshapeIntoChild moves a host's VCPU into a NUMA child while a
// consumer holds some: after the reshape the root has no VCPU, the child
// has it with the consumer's allocation on it, and the root's other
// classes and usage stay.
func testReshapeIntoChild(t *testing.T, s store.Store) {
	ctx := context.Background()
	root := mustCreateProvider(t, s, 1, stdInventories())
	child, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(2), Name: "host-1-numa0", ParentUUID: root.UUID, Inventories: placement.Inventories{}})
	if err != nil {
		t.Fatal(err)
	}
	c := consumerUUID(1)
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: c, ProjectID: "p", UserID: "u",
		Allocations: map[string]placement.Resources{root.UUID: {placement.VCPU: 2, placement.MemoryMB: 1024}}}); err != nil {
		t.Fatal(err)
	}
	root = mustGetProvider(t, s, root.UUID)
	cons, err := s.GetConsumer(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	rootInv := stdInventories()
	vcpu := rootInv[placement.VCPU]
	delete(rootInv, placement.VCPU)
	plan, err := s.Reshape(ctx,
		[]placement.InventoryWrite{
			{UUID: root.UUID, Generation: root.Generation, Inventories: rootInv},
			{UUID: child.UUID, Generation: child.Generation, Inventories: placement.Inventories{placement.VCPU: vcpu}},
		},
		[]placement.AllocationWrite{{ConsumerUUID: c, ProjectID: "p", UserID: "u", ConsumerGeneration: gen(cons.Generation),
			Allocations: map[string]placement.Resources{root.UUID: {placement.MemoryMB: 1024}, child.UUID: {placement.VCPU: 2}}}})
	if err != nil {
		t.Fatalf("Reshape: %v", err)
	}
	r, ch := mustGetProvider(t, s, root.UUID), mustGetProvider(t, s, child.UUID)
	if _, ok := r.Inventories[placement.VCPU]; ok || len(r.Inventories) != 2 || ch.Inventories[placement.VCPU].Total != 8 {
		t.Errorf("inventories after the reshape: root %v, child %v", r.Inventories, ch.Inventories)
	}
	if r.Generation != plan.Providers[root.UUID] || ch.Generation != plan.Providers[child.UUID] || r.Generation <= root.Generation || ch.Generation <= child.Generation {
		t.Errorf("generations: root %d→%d, child %d→%d, plan %v", root.Generation, r.Generation, child.Generation, ch.Generation, plan.Providers)
	}
	wantUsage(t, s, root.UUID, placement.Resources{placement.MemoryMB: 1024})
	wantUsage(t, s, child.UUID, placement.Resources{placement.VCPU: 2})
	got, err := s.GetConsumer(ctx, c)
	if err != nil || got.Generation != cons.Generation+1 || got.Allocations[child.UUID][placement.VCPU] != 2 {
		t.Errorf("consumer after the reshape: %+v (%v)", got, err)
	}
}

// testReshapeRefusals: a stale generation, a class removed while still
// allocated, and an allocation over the new capacity each refuse the
// whole reshape, leaving inventories, usage and generations as they were.
func testReshapeRefusals(t *testing.T, s store.Store) {
	ctx := context.Background()
	root := mustCreateProvider(t, s, 1, stdInventories())
	c := consumerUUID(1)
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: c, ProjectID: "p", UserID: "u",
		Allocations: map[string]placement.Resources{root.UUID: {placement.VCPU: 2}}}); err != nil {
		t.Fatal(err)
	}
	root = mustGetProvider(t, s, root.UUID)
	noVCPU := stdInventories()
	delete(noVCPU, placement.VCPU)
	small := stdInventories()
	disk := placement.NewInventory(10)
	disk.MaxUnit = 100
	small[placement.DiskGB] = disk
	cases := []struct {
		what   string
		invs   []placement.InventoryWrite
		writes []placement.AllocationWrite
		is     func(error) bool
	}{
		{"stale generation", []placement.InventoryWrite{{UUID: root.UUID, Generation: root.Generation - 1, Inventories: stdInventories()}}, nil, placement.IsConflict},
		{"class removed while allocated", []placement.InventoryWrite{{UUID: root.UUID, Generation: root.Generation, Inventories: noVCPU}}, nil,
			func(err error) bool { var e *placement.InUseError; return errors.As(err, &e) }},
		{"allocation over the new capacity", []placement.InventoryWrite{{UUID: root.UUID, Generation: root.Generation, Inventories: small}},
			[]placement.AllocationWrite{{ConsumerUUID: consumerUUID(2), ProjectID: "p", UserID: "u",
				Allocations: map[string]placement.Resources{root.UUID: {placement.DiskGB: 20}}}}, placement.IsCapacity},
		{"unknown provider", []placement.InventoryWrite{{UUID: providerUUID(9), Inventories: stdInventories()}}, nil,
			func(err error) bool { return errors.Is(err, store.ErrNotFound) }},
	}
	for _, tc := range cases {
		if _, err := s.Reshape(ctx, tc.invs, tc.writes); !tc.is(err) {
			t.Errorf("%s: %v", tc.what, err)
		}
		after := mustGetProvider(t, s, root.UUID)
		if after.Generation != root.Generation || len(after.Inventories) != 3 || after.Inventories[placement.DiskGB].Total != 100 {
			t.Errorf("%s: the provider changed: %+v", tc.what, after)
		}
		wantUsage(t, s, root.UUID, placement.Resources{placement.VCPU: 2})
		if _, err := s.GetConsumer(ctx, consumerUUID(2)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: the new consumer exists: %v", tc.what, err)
		}
	}
}
