package placementapi_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/allocationcandidates"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/allocations"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceclasses"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceproviders"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/traits"

	"keel/internal/client/clienttest"
)

// wantStatus checks that err is gophercloud's unexpected-status error with
// the given status.
func wantStatus(t *testing.T, what string, err error, status int) {
	t.Helper()
	var unexpected gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &unexpected) || unexpected.Actual != status {
		t.Errorf("%s: %v, want HTTP %d", what, err, status)
	}
}

// TestGophercloudManagesPlacement drives a running keel's placement API
// with gophercloud's placement client as an operator would: custom
// resource classes and traits, a provider of its own with inventories,
// traits and aggregates, and the filters that select it.
func TestGophercloudManagesPlacement(t *testing.T) {
	ctx := context.Background()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	cl := cloud.Connect(t)
	pl, err := openstack.NewPlacementV1(cl.ComputeClient().ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	pl.Microversion = "1.39"

	// Resource classes.
	if err := resourceclasses.Create(ctx, pl, resourceclasses.CreateOpts{Name: "CUSTOM_GPU"}).ExtractErr(); err != nil {
		t.Fatalf("creating a resource class: %v", err)
	}
	wantStatus(t, "creating it twice", resourceclasses.Create(ctx, pl, resourceclasses.CreateOpts{Name: "CUSTOM_GPU"}).ExtractErr(), http.StatusConflict)
	if err := resourceclasses.Update(ctx, pl, "CUSTOM_NPU").ExtractErr(); err != nil {
		t.Fatalf("PUT a resource class: %v", err)
	}
	pages, err := resourceclasses.List(pl).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rcs, err := resourceclasses.ExtractResourceClasses(pages)
	names := []string{}
	for _, rc := range rcs {
		names = append(names, rc.Name)
	}
	if err != nil || !slices.Contains(names, "VCPU") || !slices.Contains(names, "CUSTOM_GPU") || !slices.Contains(names, "CUSTOM_NPU") {
		t.Fatalf("resource classes: %v %v", names, err)
	}
	if rc, err := resourceclasses.Get(ctx, pl, "CUSTOM_GPU").Extract(); err != nil || rc.Name != "CUSTOM_GPU" {
		t.Fatalf("GET a resource class: %+v %v", rc, err)
	}
	if err := resourceclasses.Delete(ctx, pl, "CUSTOM_NPU").ExtractErr(); err != nil {
		t.Fatalf("deleting a resource class: %v", err)
	}

	// Traits.
	if err := traits.Create(ctx, pl, "CUSTOM_FAST_NIC").ExtractErr(); err != nil {
		t.Fatalf("creating a trait: %v", err)
	}
	if err := traits.Get(ctx, pl, "HW_CPU_X86_AVX2").ExtractErr(); err != nil {
		t.Fatalf("a standard trait: %v", err)
	}
	wantStatus(t, "an unknown trait", traits.Get(ctx, pl, "CUSTOM_NOPE").ExtractErr(), http.StatusNotFound)
	pages, err = traits.List(pl, traits.ListOpts{Name: "startswith:CUSTOM_"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ts, err := traits.ExtractTraits(pages); err != nil || !slices.Equal(ts, []string{"CUSTOM_FAST_NIC"}) {
		t.Fatalf("custom traits: %v %v", ts, err)
	}

	// A provider of the operator's own: inventories all at once and per
	// class, traits, aggregates, a new name.
	rp, err := resourceproviders.Create(ctx, pl, resourceproviders.CreateOpts{Name: "gpu-box"}).Extract()
	if err != nil {
		t.Fatalf("creating a provider: %v", err)
	}
	invs, err := resourceproviders.UpdateInventories(ctx, pl, rp.UUID, resourceproviders.UpdateInventoriesOpts{
		ResourceProviderGeneration: rp.Generation,
		Inventories: map[string]resourceproviders.Inventory{
			"VCPU":       {Total: 32, AllocationRatio: 1, MaxUnit: 32, MinUnit: 1, StepSize: 1},
			"CUSTOM_GPU": {Total: 4, AllocationRatio: 1, MaxUnit: 4, MinUnit: 1, StepSize: 1},
			"MEMORY_MB":  {Total: 1024, AllocationRatio: 1, MaxUnit: 1024, MinUnit: 1, StepSize: 1},
		},
	}).Extract()
	if err != nil || len(invs.Inventories) != 3 {
		t.Fatalf("inventories: %+v %v", invs, err)
	}
	one, err := resourceproviders.UpdateInventory(ctx, pl, rp.UUID, "MEMORY_MB", resourceproviders.UpdateInventoryOpts{
		ResourceProviderGeneration: invs.ResourceProviderGeneration,
		Inventory:                  resourceproviders.Inventory{Total: 65536, AllocationRatio: 1, MaxUnit: 65536, MinUnit: 1, StepSize: 1},
	}).Extract()
	if err != nil || one.Total != 65536 {
		t.Fatalf("one inventory: %+v %v", one, err)
	}
	_, err = resourceproviders.UpdateInventory(ctx, pl, rp.UUID, "MEMORY_MB", resourceproviders.UpdateInventoryOpts{
		ResourceProviderGeneration: invs.ResourceProviderGeneration,
		Inventory:                  resourceproviders.Inventory{Total: 1024, AllocationRatio: 1, MaxUnit: 1024, MinUnit: 1, StepSize: 1},
	}).Extract()
	wantStatus(t, "a stale generation", err, http.StatusConflict)
	if got, err := resourceproviders.GetInventory(ctx, pl, rp.UUID, "CUSTOM_GPU").Extract(); err != nil || got.Total != 4 {
		t.Fatalf("GET one inventory: %+v %v", got, err)
	}
	wantStatus(t, "deleting a class in use", resourceclasses.Delete(ctx, pl, "CUSTOM_GPU").ExtractErr(), http.StatusConflict)

	tr, err := resourceproviders.UpdateTraits(ctx, pl, rp.UUID, resourceproviders.UpdateTraitsOpts{
		ResourceProviderGeneration: one.ResourceProviderGeneration, Traits: []string{"CUSTOM_FAST_NIC", "HW_CPU_X86_AVX2"},
	}).Extract()
	if err != nil || len(tr.Traits) != 2 || tr.ResourceProviderGeneration != one.ResourceProviderGeneration+1 {
		t.Fatalf("traits: %+v %v", tr, err)
	}
	if got, err := resourceproviders.GetTraits(ctx, pl, rp.UUID).Extract(); err != nil || !slices.Equal(got.Traits, []string{"CUSTOM_FAST_NIC", "HW_CPU_X86_AVX2"}) {
		t.Fatalf("GET traits: %+v %v", got, err)
	}
	wantStatus(t, "deleting a trait in use", traits.Delete(ctx, pl, "CUSTOM_FAST_NIC").ExtractErr(), http.StatusConflict)
	agg := "aaaaaaaa-0000-4000-8000-00000000cafe"
	gen := tr.ResourceProviderGeneration
	ag, err := resourceproviders.UpdateAggregates(ctx, pl, rp.UUID, resourceproviders.UpdateAggregatesOpts{
		ResourceProviderGeneration: &gen, Aggregates: []string{agg},
	}).Extract()
	if err != nil || !slices.Equal(ag.Aggregates, []string{agg}) || ag.ResourceProviderGeneration == nil || *ag.ResourceProviderGeneration != gen+1 {
		t.Fatalf("aggregates: %+v %v", ag, err)
	}
	if got, err := resourceproviders.GetAggregates(ctx, pl, rp.UUID).Extract(); err != nil || !slices.Equal(got.Aggregates, []string{agg}) {
		t.Fatalf("GET aggregates: %+v %v", got, err)
	}
	newName := "gpu-box-1"
	if got, err := resourceproviders.Update(ctx, pl, rp.UUID, resourceproviders.UpdateOpts{Name: &newName}).Extract(); err != nil || got.Name != newName {
		t.Fatalf("rename: %+v %v", got, err)
	}

	// The filters pick it out of keel's hosts.
	list := func(opts resourceproviders.ListOpts) []string {
		t.Helper()
		pages, err := resourceproviders.List(pl, opts).AllPages(ctx)
		if err != nil {
			t.Fatalf("listing with %+v: %v", opts, err)
		}
		rps, err := resourceproviders.ExtractResourceProviders(pages)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range rps {
			out = append(out, p.Name)
		}
		return out
	}
	if got := list(resourceproviders.ListOpts{Required: "CUSTOM_FAST_NIC"}); !slices.Equal(got, []string{newName}) {
		t.Errorf("required=CUSTOM_FAST_NIC: %v", got)
	}
	if got := list(resourceproviders.ListOpts{Required: "!CUSTOM_FAST_NIC"}); !slices.Equal(got, []string{"h01", "h02"}) {
		t.Errorf("required=!CUSTOM_FAST_NIC: %v", got)
	}
	if got := list(resourceproviders.ListOpts{MemberOf: agg}); !slices.Equal(got, []string{newName}) {
		t.Errorf("member_of: %v", got)
	}
	if got := list(resourceproviders.ListOpts{Resources: "CUSTOM_GPU:2"}); !slices.Equal(got, []string{newName}) {
		t.Errorf("resources=CUSTOM_GPU:2: %v", got)
	}
	pages, err = allocationcandidates.List(pl, allocationcandidates.ListOpts{
		Resources: "VCPU:2,CUSTOM_GPU:1", Required: []string{"CUSTOM_FAST_NIC"}, MemberOf: []string{agg}, Limit: 10,
	}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := allocationcandidates.ExtractAllocationCandidates(pages)
	if err != nil || len(ac.AllocationRequests) != 1 || ac.AllocationRequests[0].Allocations[rp.UUID].Resources["CUSTOM_GPU"] != 1 {
		t.Fatalf("candidates: %+v %v", ac, err)
	}
	if s := ac.ProviderSummaries[rp.UUID]; s.Traits == nil || len(*s.Traits) != 2 || s.Resources["CUSTOM_GPU"].Capacity != 4 {
		t.Errorf("candidate summary: %+v", s)
	}

	// Claim a GPU there, as the candidate says; then the provider's
	// inventory cannot go while it is held.
	up := allocations.UpdateOpts{
		Allocations: map[string]allocations.ProviderAllocationsOpts{rp.UUID: {Resources: map[string]int{"VCPU": 2, "CUSTOM_GPU": 1}}},
		ProjectID:   "p1", UserID: "u1", ConsumerType: "INSTANCE",
	}
	if err := allocations.Update(ctx, pl, "bbbbbbbb-0000-4000-8000-000000000001", up).ExtractErr(); err != nil {
		t.Fatalf("claiming the candidate: %v", err)
	}
	wantStatus(t, "deleting an inventory in use", resourceproviders.DeleteInventory(ctx, pl, rp.UUID, "CUSTOM_GPU").ExtractErr(), http.StatusConflict)
	if err := resourceproviders.DeleteInventory(ctx, pl, rp.UUID, "MEMORY_MB").ExtractErr(); err != nil {
		t.Errorf("deleting an unused inventory: %v", err)
	}
	if err := allocations.Delete(ctx, pl, "bbbbbbbb-0000-4000-8000-000000000001").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := resourceproviders.DeleteTraits(ctx, pl, rp.UUID).ExtractErr(); err != nil {
		t.Fatalf("deleting the provider's traits: %v", err)
	}
	if err := traits.Delete(ctx, pl, "CUSTOM_FAST_NIC").ExtractErr(); err != nil {
		t.Errorf("deleting the unused trait: %v", err)
	}
	if err := resourceproviders.DeleteInventories(ctx, pl, rp.UUID).ExtractErr(); err != nil {
		t.Fatalf("deleting every inventory: %v", err)
	}
	if err := resourceclasses.Delete(ctx, pl, "CUSTOM_GPU").ExtractErr(); err != nil {
		t.Errorf("deleting the unused class: %v", err)
	}
	if err := resourceproviders.Delete(ctx, pl, rp.UUID).ExtractErr(); err != nil {
		t.Errorf("deleting the provider: %v", err)
	}
}
