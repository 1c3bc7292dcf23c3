package placementapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/allocations"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceclasses"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceproviders"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/traits"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/records"
	"keel/internal/testenv"
)

// TestGophercloudBootsOnAProviderTree: child providers made through the
// Placement API with gophercloud (one CUSTOM_X with trait CUSTOM_T under
// h01's and h02's providers) take a flavor's granular group
// resources1:CUSTOM_X=1 + trait1:CUSTOM_T=required: the server lands on
// h01 or h02, its allocation (GET /allocations/{consumer}) holds the
// flavor on the host's provider and CUSTOM_X on the child, a live
// migration claims the same shape on the other tree, a delete gives all
// of it back, and a group no tree can satisfy gets No valid host.
func TestGophercloudBootsOnAProviderTree(t *testing.T) {
	ctx := context.Background()
	x := records.Flavor{ID: "10", Name: "x1.custom", VCPUs: 1, RAMMB: 512, DiskGB: 1,
		ExtraSpecs: map[string]string{"resources1:CUSTOM_X": "1", "trait1:CUSTOM_T": "required"}}
	nope := records.Flavor{ID: "11", Name: "x1.nope", VCPUs: 1, RAMMB: 512, DiskGB: 1,
		ExtraSpecs: map[string]string{"resources1:CUSTOM_X": "1", "trait1:CUSTOM_MISSING": "required"}}
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3, Flavors: append(append([]records.Flavor(nil), clienttest.Flavors...), x, nope)})
	cl := cloud.Connect(t)
	pl, err := openstack.NewPlacementV1(cl.ComputeClient().ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	pl.Microversion = "1.39"

	if err := resourceclasses.Create(ctx, pl, resourceclasses.CreateOpts{Name: "CUSTOM_X"}).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []string{"CUSTOM_T", "CUSTOM_MISSING"} {
		if err := traits.Create(ctx, pl, tr).ExtractErr(); err != nil {
			t.Fatal(err)
		}
	}
	pages, err := resourceproviders.List(pl, resourceproviders.ListOpts{}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rps, err := resourceproviders.ExtractResourceProviders(pages)
	if err != nil {
		t.Fatal(err)
	}
	root := map[string]string{}
	for _, rp := range rps {
		root[rp.Name] = rp.UUID
	}
	child := map[string]string{} // host → its CUSTOM_X child
	for _, h := range []string{"h01", "h02"} {
		rp, err := resourceproviders.Create(ctx, pl, resourceproviders.CreateOpts{Name: h + "_x", ParentProviderUUID: root[h]}).Extract()
		if err != nil {
			t.Fatalf("child of %s: %v", h, err)
		}
		inv, err := resourceproviders.UpdateInventories(ctx, pl, rp.UUID, resourceproviders.UpdateInventoriesOpts{
			ResourceProviderGeneration: rp.Generation,
			Inventories:                map[string]resourceproviders.Inventory{"CUSTOM_X": {Total: 1, MaxUnit: 1, MinUnit: 1, StepSize: 1, AllocationRatio: 1}},
		}).Extract()
		if err != nil {
			t.Fatalf("inventory of %s_x: %v", h, err)
		}
		if _, err := resourceproviders.UpdateTraits(ctx, pl, rp.UUID, resourceproviders.UpdateTraitsOpts{
			ResourceProviderGeneration: inv.ResourceProviderGeneration, Traits: []string{"CUSTOM_T"},
		}).Extract(); err != nil {
			t.Fatalf("traits of %s_x: %v", h, err)
		}
		child[h] = rp.UUID
	}

	boot := func(name, flavor string) client.Server {
		t.Helper()
		srv, err := cl.CreateServer(ctx, name, flavor)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		srv, err = cl.WaitServer(wctx, srv.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" })
		if err != nil {
			t.Fatalf("boot of %s: %v", name, err)
		}
		return srv
	}
	used := func(uuid string) map[string]int {
		t.Helper()
		u, err := resourceproviders.GetUsages(ctx, pl, uuid).Extract()
		if err != nil {
			t.Fatal(err)
		}
		return u.Usages
	}
	// holds checks the server's allocation: the flavor on host's
	// provider, CUSTOM_X on host's child, nothing else.
	holds := func(id, host string) {
		t.Helper()
		al, err := allocations.Get(ctx, pl, id).Extract()
		if err != nil {
			t.Fatal(err)
		}
		r, c := al.Allocations[root[host]].Resources, al.Allocations[child[host]].Resources
		if len(al.Allocations) != 2 || r["VCPU"] != 1 || r["MEMORY_MB"] != 512 || r["DISK_GB"] != 1 || len(r) != 3 || c["CUSTOM_X"] != 1 || len(c) != 1 {
			t.Fatalf("allocations of %s: %+v, want the flavor on %s and CUSTOM_X:1 on %s_x", id, al.Allocations, host, host)
		}
		if u := used(child[host]); u["CUSTOM_X"] != 1 {
			t.Fatalf("%s_x usage %v, want CUSTOM_X 1", host, u)
		}
	}

	vm1 := boot("vm1", "x1.custom")
	if vm1.Status != "ACTIVE" || (vm1.Host != "h01" && vm1.Host != "h02") {
		t.Fatalf("vm1: %s on %q (%s), want ACTIVE on h01 or h02", vm1.Status, vm1.Host, vm1.Fault)
	}
	holds(vm1.ID, vm1.Host)
	other := map[string]string{"h01": "h02", "h02": "h01"}[vm1.Host]

	// A live migration: only the other tree has CUSTOM_X.
	w, err := cl.LiveMigrate(ctx, vm1.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if m, err := w.Wait(wctx, 20*time.Millisecond, nil); err != nil || m.Status != "completed" || m.Dest != other {
		t.Fatalf("live migration: %+v %v, want completed to %s", m, err, other)
	}
	if _, err := cl.WaitServer(wctx, vm1.ID, 20*time.Millisecond, func(s client.Server) bool { return s.TaskState == "" && s.Host == other }); err != nil {
		t.Fatal(err)
	}
	holds(vm1.ID, other)
	if u := used(child[vm1.Host]); u["CUSTOM_X"] != 0 {
		t.Fatalf("%s_x after the migration: usage %v, want none", vm1.Host, u)
	}

	vm2 := boot("vm2", "x1.custom")
	if vm2.Status != "ACTIVE" || vm2.Host != vm1.Host {
		t.Fatalf("vm2: %s on %q, want ACTIVE on %s (the one CUSTOM_X left)", vm2.Status, vm2.Host, vm1.Host)
	}
	holds(vm2.ID, vm1.Host)
	for _, c := range []struct{ name, flavor string }{{"vm3", "x1.custom"}, {"vm4", "x1.nope"}} {
		s := boot(c.name, c.flavor)
		if s.Status != "ERROR" || !strings.Contains(s.Fault, "No valid host") {
			t.Errorf("%s (%s): %s, fault %q, want ERROR with No valid host", c.name, c.flavor, s.Status, s.Fault)
		}
		if _, err := allocations.Get(ctx, pl, s.ID).Extract(); err != nil {
			t.Fatal(err)
		}
	}

	for _, s := range []client.Server{vm1, vm2} {
		if err := cl.DeleteServer(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	waitCtx := testenv.Context(t)
	for _, h := range []string{"h01", "h02"} {
		for (used(child[h])["CUSTOM_X"] != 0 || used(root[h])["VCPU"] != 0) && waitCtx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		if u, r := used(child[h]), used(root[h]); u["CUSTOM_X"] != 0 || r["VCPU"] != 0 {
			t.Errorf("%s after the deletes: child %v, root %v, want nothing used", h, u, r)
		}
	}
}
