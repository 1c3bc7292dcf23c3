package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"keel/internal/placement"
	"keel/internal/store"
)

var providerTests = []subtest{
	{"CreateGenerations", testCreateGenerations},
	{"CreateDuplicate", testCreateDuplicate},
	{"CreateInvalid", testCreateInvalid},
	{"GetUnknown", testGetUnknownProvider},
	{"SetInventories", testSetInventories},
	{"SetInventoriesInUse", testSetInventoriesInUse},
	{"DeleteProvider", testDeleteProvider},
	{"ProviderSummaries", testProviderSummaries},
}

func testCreateGenerations(t *testing.T, s store.Store) {
	ctx := context.Background()
	bare, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(1), Name: "bare", Generation: 7})
	if err != nil {
		t.Fatalf("CreateProvider without inventories: %v", err)
	}
	if bare.Generation != 0 {
		t.Errorf("provider without inventories: generation %d, want 0", bare.Generation)
	}
	if got := mustGetProvider(t, s, providerUUID(1)); got.Generation != 0 || got.Name != "bare" || len(got.Inventories) != 0 {
		t.Errorf("GetProvider = %+v, want generation 0, name bare, no inventories", got)
	}

	invs := stdInventories()
	full, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(2), Name: "full", Inventories: invs})
	if err != nil {
		t.Fatalf("CreateProvider with inventories: %v", err)
	}
	if full.Generation != 1 {
		t.Errorf("provider with inventories: generation %d, want 1", full.Generation)
	}
	got := mustGetProvider(t, s, providerUUID(2))
	if got.Generation != 1 || got.UUID != providerUUID(2) || got.Name != "full" {
		t.Errorf("GetProvider = %+v, want uuid %s, name full, generation 1", got, providerUUID(2))
	}
	if !reflect.DeepEqual(got.Inventories, invs) {
		t.Errorf("inventories round trip:\n got %+v\nwant %+v", got.Inventories, invs)
	}
	// The store must not alias the caller's map.
	invs[placement.VCPU] = placement.NewInventory(1)
	if got := mustGetProvider(t, s, providerUUID(2)); got.Inventories[placement.VCPU].Total != 8 {
		t.Errorf("store aliases the caller's inventories: VCPU total now %d", got.Inventories[placement.VCPU].Total)
	}
}

func testCreateDuplicate(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateProvider(t, s, 1, stdInventories())

	_, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(1), Name: "other-name"})
	if !errors.Is(err, store.ErrExists) {
		t.Errorf("duplicate uuid: err = %v, want ErrExists", err)
	}
	_, err = s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(2), Name: "host-1"})
	if !errors.Is(err, store.ErrExists) {
		t.Errorf("duplicate name: err = %v, want ErrExists", err)
	}
	_, err = s.GetProvider(ctx, providerUUID(2))
	wantNotFound(t, "provider refused for its duplicate name", err)
	if got := mustGetProvider(t, s, providerUUID(1)); got.Name != "host-1" || got.Generation != 1 {
		t.Errorf("original provider changed: %+v", got)
	}
}

func testCreateInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.CreateProvider(ctx, placement.Provider{Name: "no-uuid"}); err == nil {
		t.Error("provider without a uuid accepted")
	}
	if _, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(1)}); err == nil {
		t.Error("provider without a name accepted")
	}
	bad := placement.Inventories{placement.VCPU: {Total: 0, MinUnit: 1, MaxUnit: 1, StepSize: 1, AllocationRatio: 1}}
	_, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(2), Name: "bad", Inventories: bad})
	if !placement.IsInvalid(err) {
		t.Errorf("invalid inventory: err = %v, want a *placement.InvalidError", err)
	}
	_, err = s.GetProvider(ctx, providerUUID(2))
	wantNotFound(t, "provider refused for its inventory", err)
}

func testGetUnknownProvider(t *testing.T, s store.Store) {
	_, err := s.GetProvider(context.Background(), providerUUID(99))
	wantNotFound(t, "GetProvider of an unknown provider", err)
}

func testSetInventories(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustCreateProvider(t, s, 1, nil)

	invs := stdInventories()
	p, err := s.SetInventories(ctx, providerUUID(1), 0, invs)
	if err != nil {
		t.Fatalf("SetInventories at generation 0: %v", err)
	}
	if p.Generation != 1 || !reflect.DeepEqual(p.Inventories, invs) {
		t.Errorf("SetInventories returned %+v, want generation 1 and the new inventories", p)
	}

	more := stdInventories()
	disk := more[placement.DiskGB]
	disk.Total, disk.MaxUnit, disk.StepSize, disk.MinUnit = 200, 50, 5, 5
	more[placement.DiskGB] = disk
	more["CUSTOM_FPGA"] = placement.NewInventory(2)
	p, err = s.SetInventories(ctx, providerUUID(1), 1, more)
	if err != nil {
		t.Fatalf("SetInventories at generation 1: %v", err)
	}
	if p.Generation != 2 {
		t.Errorf("generation after second SetInventories = %d, want 2", p.Generation)
	}
	got := mustGetProvider(t, s, providerUUID(1))
	if got.Generation != 2 || !reflect.DeepEqual(got.Inventories, more) {
		t.Errorf("GetProvider = %+v, want generation 2 and %+v", got, more)
	}

	// Stale generation: refused, nothing changes.
	_, err = s.SetInventories(ctx, providerUUID(1), 1, stdInventories())
	ce := wantConflict(t, "SetInventories with a stale generation", err, placement.ProviderGeneration, providerUUID(1))
	if ce != nil && (ce.Expected == nil || *ce.Expected != 1 || ce.Actual == nil || *ce.Actual != 2) {
		t.Errorf("conflict = %v, want expected 1, actual 2", ce)
	}
	if got := mustGetProvider(t, s, providerUUID(1)); got.Generation != 2 || !reflect.DeepEqual(got.Inventories, more) {
		t.Errorf("stale SetInventories changed the provider: %+v", got)
	}

	// Invalid inventory: refused.
	bad := placement.Inventories{placement.VCPU: {Total: 4, Reserved: 5, MinUnit: 1, MaxUnit: 4, StepSize: 1, AllocationRatio: 1}}
	if _, err := s.SetInventories(ctx, providerUUID(1), 2, bad); !placement.IsInvalid(err) {
		t.Errorf("invalid inventory: err = %v, want a *placement.InvalidError", err)
	}
	if got := mustGetProvider(t, s, providerUUID(1)); got.Generation != 2 {
		t.Errorf("invalid SetInventories bumped the generation to %d", got.Generation)
	}

	_, err = s.SetInventories(ctx, providerUUID(42), 0, invs)
	wantNotFound(t, "SetInventories of an unknown provider", err)
}

func testSetInventoriesInUse(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, stdInventories())
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{
		p.UUID: {placement.VCPU: 4, placement.MemoryMB: 1024},
	})
	p = mustGetProvider(t, s, p.UUID)

	// Removing a class in use is refused.
	noVCPU := stdInventories()
	delete(noVCPU, placement.VCPU)
	_, err := s.SetInventories(ctx, p.UUID, p.Generation, noVCPU)
	var iu *placement.InUseError
	if !errors.As(err, &iu) {
		t.Fatalf("removing VCPU in use: err = %v, want a *placement.InUseError", err)
	}
	if iu.Class != placement.VCPU || iu.Used != 4 {
		t.Errorf("InUseError = %+v, want class VCPU, used 4", iu)
	}
	if got := mustGetProvider(t, s, p.UUID); got.Generation != p.Generation || len(got.Inventories) != 3 {
		t.Errorf("refused SetInventories changed the provider: %+v", got)
	}

	// Removing an unused class and lowering capacity below usage are
	// allowed; the usage survives the replacement.
	small := stdInventories()
	delete(small, placement.DiskGB)
	small[placement.VCPU] = placement.NewInventory(2)
	p2, err := s.SetInventories(ctx, p.UUID, p.Generation, small)
	if err != nil {
		t.Fatalf("removing an unused class and shrinking VCPU below usage: %v", err)
	}
	if p2.Generation != p.Generation+1 {
		t.Errorf("generation = %d, want %d", p2.Generation, p.Generation+1)
	}
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 4, placement.MemoryMB: 1024})
	checkUsageMatchesAllocations(t, s)

	// Over capacity now: no new VCPU fits, memory still does.
	_, err = claim(s, consumerUUID(2), map[string]placement.Resources{p.UUID: {placement.VCPU: 1}})
	wantCapacity(t, "claim on a provider over its VCPU capacity", err, p.UUID, placement.VCPU)
	mustClaim(t, s, consumerUUID(3), map[string]placement.Resources{p.UUID: {placement.MemoryMB: 512}})
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 4, placement.MemoryMB: 1536})
}

func testDeleteProvider(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := mustCreateProvider(t, s, 1, stdInventories())
	other := mustCreateProvider(t, s, 2, stdInventories())
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{p.UUID: {placement.VCPU: 1}})

	err := s.DeleteProvider(ctx, p.UUID)
	var iu *placement.InUseError
	if !errors.As(err, &iu) {
		t.Errorf("deleting a provider with allocations: err = %v, want a *placement.InUseError", err)
	}
	if got := mustGetProvider(t, s, p.UUID); got.Generation != 2 {
		t.Errorf("after refused delete: provider %+v, want it intact at generation 2", got)
	}
	wantUsage(t, s, p.UUID, placement.Resources{placement.VCPU: 1})

	c := mustGetConsumer(t, s, consumerUUID(1))
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: c.UUID, ConsumerGeneration: gen(c.Generation)}); err != nil {
		t.Fatalf("deleting the consumer: %v", err)
	}
	if err := s.DeleteProvider(ctx, p.UUID); err != nil {
		t.Fatalf("deleting a provider without allocations: %v", err)
	}
	_, err = s.GetProvider(ctx, p.UUID)
	wantNotFound(t, "GetProvider after delete", err)
	sums, err := s.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatalf("ProviderSummaries: %v", err)
	}
	if len(sums) != 1 || sums[0].UUID != other.UUID {
		t.Errorf("ProviderSummaries after delete = %+v, want only %s", sums, other.UUID)
	}
	wantNotFound(t, "deleting an unknown provider", s.DeleteProvider(ctx, p.UUID))

	// The name and uuid are free again; the new provider starts afresh.
	again, err := s.CreateProvider(ctx, placement.Provider{UUID: p.UUID, Name: p.Name})
	if err != nil {
		t.Fatalf("re-creating a deleted provider: %v", err)
	}
	if again.Generation != 0 || len(mustGetProvider(t, s, p.UUID).Inventories) != 0 {
		t.Errorf("re-created provider = %+v, want generation 0 and no inventories", again)
	}
	wantUsage(t, s, p.UUID, placement.Resources{})
}

func testProviderSummaries(t *testing.T, s store.Store) {
	ctx := context.Background()
	var uuids []string
	for i := 1; i <= 5; i++ {
		uuids = append(uuids, mustCreateProvider(t, s, i, stdInventories()).UUID)
	}
	mustCreateProvider(t, s, 6, nil)
	uuids = append(uuids, providerUUID(6))
	mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{
		uuids[0]: {placement.VCPU: 2, placement.MemoryMB: 2048},
		uuids[1]: {placement.DiskGB: 10},
	})
	mustClaim(t, s, consumerUUID(2), map[string]placement.Resources{
		uuids[0]: {placement.VCPU: 1, placement.DiskGB: 5},
	})

	all, err := s.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatalf("ProviderSummaries(nil): %v", err)
	}
	var got []string
	for _, ps := range all {
		got = append(got, ps.UUID)
	}
	if !equalStrings(sortedStrings(got), sortedStrings(uuids)) {
		t.Errorf("ProviderSummaries(nil) lists %v, want %v", got, uuids)
	}
	want := map[string]placement.Resources{
		uuids[0]: {placement.VCPU: 3, placement.MemoryMB: 2048, placement.DiskGB: 5},
		uuids[1]: {placement.DiskGB: 10},
	}
	for _, ps := range all {
		if !ps.Usage.Equal(want[ps.UUID]) {
			t.Errorf("usage of %s = %v, want %v", ps.UUID, ps.Usage, want[ps.UUID])
		}
		wantGen := int64(1)
		switch ps.UUID {
		case uuids[0]:
			wantGen = 3
		case uuids[1]:
			wantGen = 2
		case providerUUID(6):
			wantGen = 0
		}
		if ps.Generation != wantGen {
			t.Errorf("generation of %s = %d, want %d", ps.UUID, ps.Generation, wantGen)
		}
		if ps.UUID != providerUUID(6) && !reflect.DeepEqual(ps.Inventories, stdInventories()) {
			t.Errorf("inventories of %s = %+v", ps.UUID, ps.Inventories)
		}
	}

	some, err := s.ProviderSummaries(ctx, []string{uuids[1], providerUUID(77), uuids[0]})
	if err != nil {
		t.Fatalf("ProviderSummaries(some): %v", err)
	}
	if len(some) != 2 {
		t.Fatalf("ProviderSummaries with one unknown uuid returned %d summaries, want 2", len(some))
	}
	for _, ps := range some {
		if ps.UUID != uuids[0] && ps.UUID != uuids[1] {
			t.Errorf("ProviderSummaries(some) returned %s", ps.UUID)
		}
		if !ps.Usage.Equal(want[ps.UUID]) {
			t.Errorf("usage of %s = %v, want %v", ps.UUID, ps.Usage, want[ps.UUID])
		}
	}
	none, err := s.ProviderSummaries(ctx, []string{providerUUID(77)})
	if err != nil || len(none) != 0 {
		t.Errorf("ProviderSummaries(unknown) = %v, %v; want empty, nil", none, err)
	}
	checkUsageMatchesAllocations(t, s)
}
