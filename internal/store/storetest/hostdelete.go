package storetest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// testDeleteService: DeleteService refuses a host with an instance, a
// migration in progress or an allocation on its tree, changing nothing,
// and otherwise removes the service, the host record, the host's whole
// provider tree (not a sharing pool, not another host) and the host's
// aggregate membership, noting each; the host can then register again
// under the same names.
func testDeleteService(t *testing.T, s store.Store) {
	ctx := context.Background()
	const host, other = "cmp-1", "cmp-2"
	for _, h := range []string{host, other} {
		if err := s.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", Zone: "az1", LastSeenUp: t0, UpdatedAt: t0}); err != nil {
			t.Fatalf("PutService %s: %v", h, err)
		}
		if err := s.PutHostRecord(ctx, hostRecord(h, 1)); err != nil {
			t.Fatalf("PutHostRecord %s: %v", h, err)
		}
	}
	mk := func(n int, name, parent string, invs placement.Inventories, traits ...string) string {
		t.Helper()
		p, err := s.CreateProvider(ctx, placement.Provider{UUID: providerUUID(n), Name: name, ParentUUID: parent, Inventories: invs, Traits: traits})
		if err != nil {
			t.Fatalf("CreateProvider %s: %v", name, err)
		}
		return p.UUID
	}
	root := mk(1, host, "", stdInventories())
	numa := mk(2, host+"_numa0", root, stdInventories())
	gpu := mk(3, host+"_numa0_gpu", numa, placement.Inventories{"VGPU": placement.NewInventory(4)})
	otherRoot := mk(4, other, "", stdInventories())
	pool := mk(5, "disk-pool", "", placement.Inventories{placement.DiskGB: placement.NewInventory(1000)}, placement.SharesViaAggregate)
	aggs := map[string]records.Aggregate{}
	for _, a := range []records.Aggregate{{Name: "both", Hosts: []string{other, host}}, {Name: "other-only", Hosts: []string{other}}, {Name: "host-only", Hosts: []string{host}}} {
		created, err := s.CreateAggregate(ctx, a)
		if err != nil {
			t.Fatalf("CreateAggregate %s: %v", a.Name, err)
		}
		aggs[a.Name] = created
	}
	refused := func(what string, want error) {
		t.Helper()
		expectChanges(t, s, "DeleteService refused ("+what+")", func() []string {
			_, err := s.DeleteService(ctx, host)
			var inUse *placement.InUseError
			if want == nil && !errors.As(err, &inUse) || want != nil && !errors.Is(err, want) {
				t.Errorf("DeleteService with %s: err = %v, want %v", what, err, want)
			}
			return nil
		})
		if _, err := s.GetService(ctx, host); err != nil {
			t.Errorf("after the refused delete (%s): GetService: %v", what, err)
		}
		if _, err := s.GetProvider(ctx, gpu); err != nil {
			t.Errorf("after the refused delete (%s): the tree's leaf: %v", what, err)
		}
	}

	in, err := s.CreateInstance(ctx, instance(1, host))
	if err != nil {
		t.Fatal(err)
	}
	refused("an instance", store.ErrHostHasInstances)
	if err := s.DeleteInstance(ctx, in.UUID); err != nil {
		t.Fatal(err)
	}

	// A resize waiting to be confirmed (finished) still involves its
	// destination; an evacuation's done and the terminal statuses do not.
	resize := migration(1, 2, other, host, records.MigrationFinished)
	resize.Type = records.MigrationTypeResize
	m, err := s.CreateMigration(ctx, resize)
	if err != nil {
		t.Fatal(err)
	}
	evac := migration(2, 3, host, other, records.MigrationDone)
	evac.Type = records.MigrationTypeEvac
	if _, err := s.CreateMigration(ctx, evac); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateMigration(ctx, migration(3, 4, host, other, records.MigrationFailed)); err != nil {
		t.Fatal(err)
	}
	refused("a resize to confirm", store.ErrHostHasMigrations)
	m.Status = records.MigrationConfirmed
	if _, err := s.UpdateMigration(ctx, m); err != nil {
		t.Fatal(err)
	}

	consumer := consumerUUID(1)
	mustClaim(t, s, consumer, map[string]placement.Resources{gpu: {"VGPU": 1}})
	refused("an allocation on the tree's leaf", nil)
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumer, AnyConsumerGeneration: true}); err != nil {
		t.Fatal(err)
	}

	var gone records.Service
	expectChanges(t, s, "DeleteService", func() []string {
		gone, err = s.DeleteService(ctx, host)
		if err != nil {
			t.Fatalf("DeleteService: %v", err)
		}
		return []string{provKey(root), provKey(numa), provKey(gpu),
			string(store.ChangeAggregate) + ":" + strconv.FormatInt(aggs["both"].ID, 10),
			string(store.ChangeAggregate) + ":" + strconv.FormatInt(aggs["host-only"].ID, 10),
			string(store.ChangeHost) + ":" + host, string(store.ChangeService) + ":" + host}
	})
	if gone.Host != host || gone.Zone != "az1" || !gone.LastSeenUp.Equal(t0) {
		t.Errorf("DeleteService returned %+v, want the deleted record", gone)
	}
	checkHostGone(t, s, host, other, []string{root, numa, gpu}, []string{otherRoot, pool}, aggs)
	_, err = s.DeleteService(ctx, host)
	wantNotFound(t, "DeleteService of a deleted service", err)
	_, err = s.DeleteService(ctx, "never-was")
	wantNotFound(t, "DeleteService of an unknown service", err)

	// The agent registers again: the names and the UUID are free.
	if _, err := s.CreateProvider(ctx, placement.Provider{UUID: root, Name: host, Inventories: stdInventories()}); err != nil {
		t.Errorf("the host's provider again: %v", err)
	}
	if err := s.PutService(ctx, records.Service{Host: host, Binary: "nova-compute", Zone: "az1"}); err != nil {
		t.Errorf("the host's service again: %v", err)
	}

	// A service with no provider and no host record (never audited) goes
	// alone.
	if err := s.PutService(ctx, records.Service{Host: "bare", Binary: "nova-compute"}); err != nil {
		t.Fatal(err)
	}
	expectChanges(t, s, "DeleteService of a bare service", func() []string {
		if _, err := s.DeleteService(ctx, "bare"); err != nil {
			t.Errorf("DeleteService of a service without provider or host record: %v", err)
		}
		return []string{string(store.ChangeService) + ":bare"}
	})
}

// checkHostGone checks what testDeleteService's delete of host left: no
// service, host record or provider of its tree, the providers kept (the
// other host's, the pool) and the other host's records still there, and
// host out of every aggregate.
func checkHostGone(t *testing.T, s store.Store, host, other string, tree, kept []string, aggs map[string]records.Aggregate) {
	t.Helper()
	ctx := context.Background()
	_, err := s.GetService(ctx, host)
	wantNotFound(t, "GetService after DeleteService", err)
	_, err = s.GetHostRecord(ctx, host)
	wantNotFound(t, "GetHostRecord after DeleteService", err)
	for _, u := range tree {
		_, err = s.GetProvider(ctx, u)
		wantNotFound(t, "GetProvider of the deleted host's tree", err)
	}
	for _, u := range kept {
		if _, err := s.GetProvider(ctx, u); err != nil {
			t.Errorf("provider %s not of the host's tree: %v", u, err)
		}
	}
	if svcs, err := s.ListServices(ctx); err != nil || len(svcs) != 1 || svcs[0].Host != other {
		t.Errorf("ListServices after DeleteService = %+v, %v; want %s only", svcs, err, other)
	}
	if _, err := s.GetHostRecord(ctx, other); err != nil {
		t.Errorf("the other host's record: %v", err)
	}
	for name, want := range map[string][]string{"both": {other}, "other-only": {other}, "host-only": {}} {
		a, err := s.GetAggregate(ctx, aggs[name].ID)
		if err != nil || !slices.Equal(a.Hosts, want) && len(a.Hosts)+len(want) > 0 || a.Name != name {
			t.Errorf("aggregate %s after DeleteService: %+v, %v; want hosts %v", name, a, err, want)
		}
	}
}
