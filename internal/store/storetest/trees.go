package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"keel/internal/placement"
	"keel/internal/store"
)

// treeTests cover placement's provider trees, traits, aggregates and
// custom resource classes.
var treeTests = []subtest{
	{"ProviderTree", testProviderTree},
	{"UpdateProvider", testUpdateProvider},
	{"ProviderTraits", testProviderTraits},
	{"DeleteTrait", testDeleteTrait},
	{"ProviderAggregates", testProviderAggregates},
	{"ResourceClasses", testResourceClasses},
	{"DetailsSurviveOtherWrites", testDetailsSurviveOtherWrites},
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !placement.IsInvalid(err) {
		t.Errorf("%s: err = %v, want a *placement.InvalidError", what, err)
	}
}

func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: err = %v, want one wrapping %v", what, err, target)
	}
}

func testProviderTree(t *testing.T, s store.Store) {
	ctx := context.Background()
	root := mustCreateProvider(t, s, 1, stdInventories())
	child, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(2), Name: "host-1-numa0", ParentUUID: root.UUID})
	if err != nil || child.ParentUUID != root.UUID {
		t.Fatalf("creating a child: %+v %v", child, err)
	}
	if got := mustGetProvider(t, s, child.UUID); got.ParentUUID != root.UUID {
		t.Errorf("stored child has parent %q, want %s", got.ParentUUID, root.UUID)
	}
	if got := mustGetProvider(t, s, root.UUID); got.ParentUUID != "" {
		t.Errorf("root has parent %q", got.ParentUUID)
	}
	_, err = s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(3), Name: "orphan", ParentUUID: providerUUID(99)})
	wantInvalid(t, "creating a child of a provider that does not exist", err)
	if _, err := s.GetProvider(ctx, providerUUID(3)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused child was stored: %v", err)
	}

	wantIs(t, "deleting a parent", s.DeleteProvider(ctx, root.UUID), store.ErrHasChildren)
	if err := s.DeleteProvider(ctx, child.UUID); err != nil {
		t.Fatalf("deleting the child: %v", err)
	}
	if err := s.DeleteProvider(ctx, root.UUID); err != nil {
		t.Fatalf("deleting the root once childless: %v", err)
	}
}

func testUpdateProvider(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := mustCreateProvider(t, s, 1, stdInventories())
	b := mustCreateProvider(t, s, 2, nil)
	c := mustCreateProvider(t, s, 3, nil)

	var got placement.Provider
	expectChanges(t, s, "UpdateProvider", func() []string {
		var err error
		if got, err = s.UpdateProvider(ctx, a.UUID, "renamed", "", false); err != nil {
			t.Fatalf("rename: %v", err)
		}
		return []string{provKey(a.UUID)}
	})
	if got.Name != "renamed" || got.Generation != a.Generation || len(got.Inventories) != 3 {
		t.Errorf("renamed provider = %+v; want the name changed, generation %d and the inventories kept", got, a.Generation)
	}
	if p := mustGetProvider(t, s, a.UUID); p.Name != "renamed" || p.Generation != a.Generation {
		t.Errorf("stored after rename: %+v", p)
	}
	// The old name is free again, the new one taken.
	if _, err := s.UpdateProvider(ctx, b.UUID, a.Name, "", false); err != nil {
		t.Errorf("taking the freed name: %v", err)
	}
	_, err := s.UpdateProvider(ctx, c.UUID, "renamed", "", false)
	wantIs(t, "renaming onto a taken name", err, store.ErrExists)
	_, err = s.UpdateProvider(ctx, providerUUID(9), "x", "", false)
	wantNotFound(t, "updating an unknown provider", err)

	// b under a, c under b; then loops and re-parenting.
	if _, err := s.UpdateProvider(ctx, b.UUID, a.Name, a.UUID, false); err != nil {
		t.Fatalf("giving b a parent: %v", err)
	}
	if _, err := s.UpdateProvider(ctx, c.UUID, "host-3", b.UUID, false); err != nil {
		t.Fatalf("giving c a parent: %v", err)
	}
	_, err = s.UpdateProvider(ctx, a.UUID, "renamed", c.UUID, true)
	wantInvalid(t, "making a grandchild the parent", err)
	_, err = s.UpdateProvider(ctx, a.UUID, "renamed", a.UUID, true)
	wantInvalid(t, "making a provider its own parent", err)
	_, err = s.UpdateProvider(ctx, c.UUID, "host-3", a.UUID, false)
	wantInvalid(t, "re-parenting without permission", err)
	_, err = s.UpdateProvider(ctx, c.UUID, "host-3", "", false)
	wantInvalid(t, "un-parenting without permission", err)
	_, err = s.UpdateProvider(ctx, c.UUID, "host-3", providerUUID(9), true)
	wantInvalid(t, "a parent that does not exist", err)
	if p := mustGetProvider(t, s, c.UUID); p.ParentUUID != b.UUID {
		t.Errorf("refused updates changed c's parent to %q", p.ParentUUID)
	}
	if _, err := s.UpdateProvider(ctx, c.UUID, "host-3", a.UUID, true); err != nil {
		t.Errorf("re-parenting (1.37): %v", err)
	}
	if _, err := s.UpdateProvider(ctx, c.UUID, "host-3", "", true); err != nil {
		t.Errorf("un-parenting (1.37): %v", err)
	}
	if p := mustGetProvider(t, s, c.UUID); p.ParentUUID != "" {
		t.Errorf("c's parent after un-parenting: %q", p.ParentUUID)
	}
}

func testProviderTraits(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, stdInventories())
	for _, bad := range []string{"custom_lower", "NOT_CUSTOM", "CUSTOM_", "CUSTOM_A-B"} {
		if _, err := s.CreateTrait(ctx, bad); !placement.IsInvalid(err) {
			t.Errorf("CreateTrait(%q): %v, want an InvalidError", bad, err)
		}
	}
	if created, err := s.CreateTrait(ctx, "CUSTOM_FAST_NIC"); err != nil || !created {
		t.Fatalf("CreateTrait: created=%v err=%v", created, err)
	}
	if created, err := s.CreateTrait(ctx, "CUSTOM_FAST_NIC"); err != nil || created {
		t.Fatalf("CreateTrait again: created=%v err=%v, want false and no error", created, err)
	}
	if _, err := s.CreateTrait(ctx, "CUSTOM_GOLD"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.CustomTraits(ctx); err != nil || !reflect.DeepEqual(got, []string{"CUSTOM_FAST_NIC", "CUSTOM_GOLD"}) {
		t.Errorf("CustomTraits = %v, %v", got, err)
	}

	_, err := s.SetProviderTraits(ctx, p.UUID, p.Generation, []string{"CUSTOM_FAST_NIC", "CUSTOM_NOPE"})
	wantInvalid(t, "an unknown trait", err)
	_, err = s.SetProviderTraits(ctx, p.UUID, p.Generation+1, []string{"CUSTOM_FAST_NIC"})
	wantConflict(t, "stale generation", err, placement.ProviderGeneration, p.UUID)
	_, err = s.SetProviderTraits(ctx, providerUUID(9), 0, nil)
	wantNotFound(t, "unknown provider", err)
	if got := mustGetProvider(t, s, p.UUID); got.Generation != p.Generation || len(got.Traits) != 0 {
		t.Fatalf("refused trait writes changed the provider: %+v", got)
	}

	want := []string{"COMPUTE_STATUS_DISABLED", "CUSTOM_FAST_NIC", "HW_CPU_X86_AVX2"}
	var np placement.Provider
	expectChanges(t, s, "SetProviderTraits", func() []string {
		np, err = s.SetProviderTraits(ctx, p.UUID, p.Generation, []string{"HW_CPU_X86_AVX2", "CUSTOM_FAST_NIC", "COMPUTE_STATUS_DISABLED", "HW_CPU_X86_AVX2"})
		if err != nil {
			t.Fatalf("SetProviderTraits: %v", err)
		}
		return []string{provKey(p.UUID)}
	})
	if np.Generation != p.Generation+1 || !reflect.DeepEqual(np.Traits, want) {
		t.Errorf("after setting traits: generation %d traits %v, want %d and %v", np.Generation, np.Traits, p.Generation+1, want)
	}
	sums, err := s.ProviderSummaries(ctx, nil)
	if err != nil || len(sums) != 1 || !reflect.DeepEqual(sums[0].Traits, want) || len(sums[0].Inventories) != 3 {
		t.Errorf("summaries after setting traits: %+v %v", sums, err)
	}
	np, err = s.SetProviderTraits(ctx, p.UUID, np.Generation, nil)
	if err != nil || len(np.Traits) != 0 || np.Generation != p.Generation+2 {
		t.Errorf("clearing traits: %+v %v", np, err)
	}
	if got := mustGetProvider(t, s, p.UUID); len(got.Traits) != 0 {
		t.Errorf("stored traits after clearing: %v", got.Traits)
	}
}

func testDeleteTrait(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, nil)
	if _, err := s.CreateTrait(ctx, "CUSTOM_GOLD"); err != nil {
		t.Fatal(err)
	}
	np, err := s.SetProviderTraits(ctx, p.UUID, p.Generation, []string{"CUSTOM_GOLD"})
	if err != nil {
		t.Fatal(err)
	}
	wantIs(t, "deleting a trait in use", s.DeleteTrait(ctx, "CUSTOM_GOLD"), store.ErrInUse)
	if got, _ := s.CustomTraits(ctx); len(got) != 1 {
		t.Errorf("refused delete removed the trait: %v", got)
	}
	if _, err := s.SetProviderTraits(ctx, p.UUID, np.Generation, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTrait(ctx, "CUSTOM_GOLD"); err != nil {
		t.Fatalf("deleting an unused trait: %v", err)
	}
	wantNotFound(t, "deleting it again", s.DeleteTrait(ctx, "CUSTOM_GOLD"))
	if got, err := s.CustomTraits(ctx); err != nil || len(got) != 0 {
		t.Errorf("CustomTraits after delete = %v, %v", got, err)
	}
	// A provider created with traits: they must exist too.
	_, err = s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(2), Name: "b", Traits: []string{"CUSTOM_GOLD"}})
	wantInvalid(t, "creating a provider with a deleted trait", err)
	q, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(3), Name: "c", Traits: []string{"HW_CPU_X86_SSE42"}, Aggregates: []string{uuidFor(0xa66, 1)}})
	if err != nil || len(q.Traits) != 1 || len(q.Aggregates) != 1 {
		t.Errorf("creating a provider with traits and aggregates: %+v %v", q, err)
	}
	if got := mustGetProvider(t, s, q.UUID); !reflect.DeepEqual(got.Traits, []string{"HW_CPU_X86_SSE42"}) || !reflect.DeepEqual(got.Aggregates, []string{uuidFor(0xa66, 1)}) {
		t.Errorf("stored provider created with traits and aggregates: %+v", got)
	}
}

func testProviderAggregates(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, stdInventories())
	agg1, agg2 := uuidFor(0xa66, 1), uuidFor(0xa66, 2)
	_, err := s.SetProviderAggregates(ctx, p.UUID, gen(p.Generation+5), []string{agg1})
	wantConflict(t, "stale generation", err, placement.ProviderGeneration, p.UUID)
	_, err = s.SetProviderAggregates(ctx, providerUUID(9), nil, []string{agg1})
	wantNotFound(t, "unknown provider", err)

	var np placement.Provider
	expectChanges(t, s, "SetProviderAggregates", func() []string {
		np, err = s.SetProviderAggregates(ctx, p.UUID, gen(p.Generation), []string{agg2, agg1, agg2})
		if err != nil {
			t.Fatalf("SetProviderAggregates: %v", err)
		}
		return []string{provKey(p.UUID)}
	})
	if np.Generation != p.Generation+1 || !reflect.DeepEqual(np.Aggregates, []string{agg1, agg2}) {
		t.Errorf("after setting aggregates: %+v", np)
	}
	// Without a generation (Nova's aggregates mirrored by keel).
	np, err = s.SetProviderAggregates(ctx, p.UUID, nil, []string{agg2})
	if err != nil || np.Generation != p.Generation+2 {
		t.Fatalf("unchecked set: %+v %v", np, err)
	}
	sums, err := s.ProviderSummaries(ctx, []string{p.UUID})
	if err != nil || len(sums) != 1 || !reflect.DeepEqual(sums[0].Aggregates, []string{agg2}) || sums[0].Generation != np.Generation {
		t.Errorf("summary after setting aggregates: %+v %v", sums, err)
	}
}

func testResourceClasses(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, bad := range []placement.ResourceClass{"VCPU", "CUSTOM_lower", "GPU"} {
		if err := s.CreateResourceClass(ctx, bad); !placement.IsInvalid(err) {
			t.Errorf("CreateResourceClass(%q): %v, want an InvalidError", bad, err)
		}
	}
	if err := s.CreateResourceClass(ctx, "CUSTOM_FPGA"); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "creating it twice", s.CreateResourceClass(ctx, "CUSTOM_FPGA"), store.ErrExists)
	if err := s.CreateResourceClass(ctx, "CUSTOM_BAREMETAL"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.CustomResourceClasses(ctx); err != nil || !reflect.DeepEqual(got, []placement.ResourceClass{"CUSTOM_BAREMETAL", "CUSTOM_FPGA"}) {
		t.Errorf("CustomResourceClasses = %v, %v", got, err)
	}
	p := mustCreateProvider(t, s, 1, placement.Inventories{"CUSTOM_FPGA": placement.NewInventory(2)})
	wantIs(t, "deleting a class with inventory", s.DeleteResourceClass(ctx, "CUSTOM_FPGA"), store.ErrInUse)
	if _, err := s.SetInventories(ctx, p.UUID, p.Generation, placement.Inventories{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteResourceClass(ctx, "CUSTOM_FPGA"); err != nil {
		t.Fatalf("deleting an unused class: %v", err)
	}
	wantNotFound(t, "deleting it again", s.DeleteResourceClass(ctx, "CUSTOM_FPGA"))
	if got, _ := s.CustomResourceClasses(ctx); !reflect.DeepEqual(got, []placement.ResourceClass{"CUSTOM_BAREMETAL"}) {
		t.Errorf("CustomResourceClasses after delete = %v", got)
	}
}

// testDetailsSurviveOtherWrites checks that inventory and allocation writes
// keep a provider's parent, traits and aggregates.
func testDetailsSurviveOtherWrites(t *testing.T, s store.Store) {
	ctx := context.Background()
	root := mustCreateProvider(t, s, 1, nil)
	p, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(2), Name: "child", ParentUUID: root.UUID, Inventories: stdInventories()})
	if err != nil {
		t.Fatal(err)
	}
	if p, err = s.SetProviderTraits(ctx, p.UUID, p.Generation, []string{"COMPUTE_NET_ATTACH_INTERFACE"}); err != nil {
		t.Fatal(err)
	}
	if p, err = s.SetProviderAggregates(ctx, p.UUID, &p.Generation, []string{uuidFor(0xa66, 1)}); err != nil {
		t.Fatal(err)
	}
	np, err := s.SetInventories(ctx, p.UUID, p.Generation, stdInventories())
	if err != nil {
		t.Fatal(err)
	}
	if np.ParentUUID != root.UUID || len(np.Traits) != 1 || len(np.Aggregates) != 1 {
		t.Errorf("SetInventories returned %+v without the provider's details", np)
	}
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{p.UUID: {placement.VCPU: 1}})
	got := mustGetProvider(t, s, p.UUID)
	if got.ParentUUID != root.UUID || !reflect.DeepEqual(got.Traits, []string{"COMPUTE_NET_ATTACH_INTERFACE"}) ||
		!reflect.DeepEqual(got.Aggregates, []string{uuidFor(0xa66, 1)}) || got.Generation != np.Generation+1 {
		t.Errorf("after inventory and allocation writes: %+v", got)
	}
}
