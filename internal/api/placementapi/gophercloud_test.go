package placementapi_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/allocationcandidates"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/allocations"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceproviders"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/usages"

	"keel/internal/client"
	"keel/internal/client/clienttest"
)

// TestGophercloudSeesWhatKeelClaims drives a running keel's placement API
// with gophercloud's placement client: a server booted through the compute
// API shows as the allocations, usages and candidates placement reports,
// and writes through placement keep to generations and capacity.
func TestGophercloudSeesWhatKeelClaims(t *testing.T) {
	ctx := context.Background()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	cl := cloud.Connect(t)
	pl, err := openstack.NewPlacementV1(cl.ComputeClient().ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	pl.Microversion = "1.39"

	pages, err := resourceproviders.List(pl, resourceproviders.ListOpts{}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rps, err := resourceproviders.ExtractResourceProviders(pages)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, rp := range rps {
		byName[rp.Name] = rp.UUID
	}
	if len(rps) != 3 || byName["h01"] == "" || byName["h03"] == "" {
		t.Fatalf("providers: %+v", rps)
	}

	srv, err := cl.CreateServer(ctx, "vm1", "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	srv, err = cl.WaitServer(wctx, srv.ID, 50*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" })
	if err != nil || srv.Status != "ACTIVE" {
		t.Fatalf("boot: %+v %v", srv, err)
	}
	host := byName[srv.Host]

	use, err := resourceproviders.GetUsages(ctx, pl, host).Extract()
	if err != nil || use.Usages["MEMORY_MB"] != 2048 || use.Usages["VCPU"] != 1 {
		t.Fatalf("usages on %s: %+v %v", srv.Host, use, err)
	}
	al, err := allocations.Get(ctx, pl, srv.ID).Extract()
	if err != nil || al.Allocations[host].Resources["MEMORY_MB"] != 2048 || al.ConsumerGeneration == nil || al.ConsumerType == nil || *al.ConsumerType != "INSTANCE" {
		t.Fatalf("the server's allocations: %+v %v", al, err)
	}
	pu, err := usages.Get(ctx, pl, usages.GetOpts{ProjectID: srv.ProjectID}).Extract()
	if err != nil || pu.Usages["INSTANCE"]["MEMORY_MB"] != 2048 || pu.Usages["INSTANCE"]["consumer_count"] != 1 {
		t.Fatalf("project usages: %+v %v", pu, err)
	}

	// 130560 MB per host, 2048 of it taken on the server's host.
	pages, err = allocationcandidates.List(pl, allocationcandidates.ListOpts{Resources: "MEMORY_MB:130000"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cands, err := allocationcandidates.ExtractAllocationCandidates(pages)
	if err != nil {
		t.Fatal(err)
	}
	if len(cands.AllocationRequests) != 2 || cands.ProviderSummaries[host].Resources != nil {
		t.Fatalf("candidates for 130000 MB: %+v", cands)
	}

	// A write naming the consumer's old generation is refused with 409;
	// with the current one it replaces the allocation (and the host's
	// usage follows at once).
	old := *al.ConsumerGeneration - 1
	up := allocations.UpdateOpts{ProjectID: srv.ProjectID, UserID: srv.UserID, ConsumerType: "INSTANCE", ConsumerGeneration: &old,
		Allocations: map[string]allocations.ProviderAllocationsOpts{host: {Resources: map[string]int{"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}}}}
	err = allocations.Update(ctx, pl, srv.ID, up).ExtractErr()
	if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Fatalf("stale consumer generation: %v, want 409", err)
	}
	up.ConsumerGeneration = al.ConsumerGeneration
	if err := allocations.Update(ctx, pl, srv.ID, up).ExtractErr(); err != nil {
		t.Fatalf("current consumer generation: %v", err)
	}
	if use, err := resourceproviders.GetUsages(ctx, pl, host).Extract(); err != nil || use.Usages["VCPU"] != 2 {
		t.Fatalf("usages after the update: %+v %v", use, err)
	}
	var unexpected gophercloud.ErrUnexpectedResponseCode
	_, err = resourceproviders.Get(ctx, pl, "00000000-0000-0000-0000-000000000000").Extract()
	if !errors.As(err, &unexpected) || unexpected.Actual != http.StatusNotFound {
		t.Fatalf("unknown provider: %v, want 404", err)
	}
}
