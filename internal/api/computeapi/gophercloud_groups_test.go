package computeapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/aggregates"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/availabilityzones"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/placement/v1/resourceproviders"

	"keel/internal/client"
	"keel/internal/client/clienttest"
)

// wantStatus fails unless err is an HTTP error with the given status.
func wantStatus(t *testing.T, what string, err error, status int) {
	t.Helper()
	var ue gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &ue) || ue.Actual != status {
		t.Fatalf("%s: want HTTP %d, got %v", what, status, err)
	}
}

// compute returns a copy of the cloud's compute client at a microversion.
func computeAt(cl *client.Client, mv string) *gophercloud.ServiceClient {
	sc := *cl.ComputeClient()
	sc.Microversion = mv
	return &sc
}

// boot creates a server (with scheduler hints and a zone, if given) and
// waits until it leaves BUILD.
func boot(t *testing.T, cl *client.Client, sc *gophercloud.ServiceClient, name, zone string, hints servers.SchedulerHintOpts) client.Server {
	t.Helper()
	ctx := context.Background()
	fl, err := cl.FindFlavor(ctx, "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	s, err := servers.Create(ctx, sc, servers.CreateOpts{Name: name, FlavorRef: fl.ID, Networks: "none", AvailabilityZone: zone}, hints).Extract()
	if err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	srv, err := cl.WaitServer(wctx, s.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" })
	if err != nil {
		t.Fatalf("waiting for %s: %v", name, err)
	}
	return srv
}

// TestGophercloudAggregatesAndZones drives os-aggregates with gophercloud:
// an aggregate's availability_zone becomes its hosts' zone (zone list,
// scheduling), hosts join the placement aggregate of the same UUID, and
// Nova's error cases answer with Nova's statuses.
func TestGophercloudAggregatesAndZones(t *testing.T) {
	ctx := context.Background()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.41")

	ag, err := aggregates.Create(ctx, sc, aggregates.CreateOpts{Name: "rack1", AvailabilityZone: "az1"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if ag.AvailabilityZone != "az1" || ag.UUID == "" || ag.ID == 0 || ag.CreatedAt.IsZero() {
		t.Fatalf("created %+v", ag)
	}
	_, err = aggregates.Create(ctx, sc, aggregates.CreateOpts{Name: "rack1"}).Extract()
	wantStatus(t, "a second aggregate named rack1", err, http.StatusConflict)
	for _, h := range []string{"h01", "h02"} {
		if ag, err = aggregates.AddHost(ctx, sc, ag.ID, aggregates.AddHostOpts{Host: h}).Extract(); err != nil {
			t.Fatalf("adding %s: %v", h, err)
		}
	}
	_, err = aggregates.AddHost(ctx, sc, ag.ID, aggregates.AddHostOpts{Host: "h01"}).Extract()
	wantStatus(t, "adding h01 twice", err, http.StatusConflict)
	_, err = aggregates.AddHost(ctx, sc, ag.ID, aggregates.AddHostOpts{Host: "nosuch"}).Extract()
	wantStatus(t, "adding an unknown host", err, http.StatusNotFound)
	ag, err = aggregates.SetMetadata(ctx, sc, ag.ID, aggregates.SetMetadataOpts{Metadata: map[string]any{"ssd": "true"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	got, err := aggregates.Get(ctx, sc, ag.ID).Extract()
	if err != nil || fmt.Sprint(got.Hosts) != "[h01 h02]" || got.Metadata["ssd"] != "true" || got.Metadata["availability_zone"] != "az1" || got.UUID != ag.UUID {
		t.Fatalf("shown: %+v %v", got, err)
	}

	// A host is in one zone: h01 cannot join an aggregate of az2, nor can
	// an aggregate holding h01 move to az2.
	other, err := aggregates.Create(ctx, sc, aggregates.CreateOpts{Name: "rack2", AvailabilityZone: "az2"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	_, err = aggregates.AddHost(ctx, sc, other.ID, aggregates.AddHostOpts{Host: "h01"}).Extract()
	wantStatus(t, "h01 into az2 while in az1", err, http.StatusConflict)
	plain, err := aggregates.Create(ctx, sc, aggregates.CreateOpts{Name: "gpus"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aggregates.AddHost(ctx, sc, plain.ID, aggregates.AddHostOpts{Host: "h01"}).Extract(); err != nil {
		t.Fatalf("h01 into an aggregate without a zone: %v", err)
	}
	_, err = aggregates.SetMetadata(ctx, sc, plain.ID, aggregates.SetMetadataOpts{Metadata: map[string]any{"availability_zone": "az2"}}).Extract()
	wantStatus(t, "moving the aggregate holding h01 to az2", err, http.StatusBadRequest)
	err = aggregates.Delete(ctx, sc, plain.ID).ExtractErr()
	wantStatus(t, "deleting an aggregate with a host", err, http.StatusBadRequest)
	if _, err := aggregates.RemoveHost(ctx, sc, plain.ID, aggregates.RemoveHostOpts{Host: "h01"}).Extract(); err != nil {
		t.Fatal(err)
	}
	_, err = aggregates.RemoveHost(ctx, sc, plain.ID, aggregates.RemoveHostOpts{Host: "h01"}).Extract()
	wantStatus(t, "removing a host not in the aggregate", err, http.StatusNotFound)
	if err := aggregates.Delete(ctx, sc, plain.ID).ExtractErr(); err != nil {
		t.Fatalf("deleting the emptied aggregate: %v", err)
	}
	pages, err := aggregates.List(sc).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all, err := aggregates.ExtractAggregates(pages)
	if err != nil || len(all) != 2 || all[0].Name != "rack1" || all[1].Name != "rack2" {
		t.Fatalf("list: %+v %v", all, err)
	}

	// os-availability-zone follows the aggregates.
	pages, err = availabilityzones.ListDetail(sc).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	zones, err := availabilityzones.ExtractAvailabilityZones(pages)
	if err != nil {
		t.Fatal(err)
	}
	zoneHosts := map[string][]string{}
	for _, z := range zones {
		for h := range z.Hosts {
			zoneHosts[z.ZoneName] = append(zoneHosts[z.ZoneName], h)
		}
		slices.Sort(zoneHosts[z.ZoneName])
	}
	if fmt.Sprint(zoneHosts) != "map[az1:[h01 h02] nova:[h03]]" {
		t.Fatalf("zones: %v", zoneHosts)
	}

	// The scheduler follows them too.
	for i := 0; i < 3; i++ {
		srv := boot(t, cl, sc, fmt.Sprintf("az1-%d", i), "az1", servers.SchedulerHintOpts{})
		if srv.Status != "ACTIVE" || (srv.Host != "h01" && srv.Host != "h02") {
			t.Fatalf("a server for az1: %s on %q", srv.Status, srv.Host)
		}
	}
	// A server booted without a zone is in its host's zone.
	free := boot(t, cl, sc, "anyzone", "", servers.SchedulerHintOpts{})
	var az struct {
		Zone string `json:"OS-EXT-AZ:availability_zone"`
	}
	if err := servers.Get(ctx, sc, free.ID).ExtractInto(&az); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"h01": "az1", "h02": "az1", "h03": "nova"}[free.Host]; az.Zone != want {
		t.Fatalf("a server booted without a zone on %s shows zone %q, want %q", free.Host, az.Zone, want)
	}
	// az2 has no host: as in Nova, not an available zone to boot in (400,
	// not a server that goes to ERROR).
	fl, err := cl.FindFlavor(ctx, "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	_, err = servers.Create(ctx, sc, servers.CreateOpts{Name: "az2", FlavorRef: fl.ID, Networks: "none", AvailabilityZone: "az2"}, nil).Extract()
	wantStatus(t, "a server for az2 (no host there)", err, http.StatusBadRequest)

	// Placement mirrors the membership, as gophercloud's placement client
	// reads it.
	pl, err := openstack.NewPlacementV1(sc.ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	pl.Microversion = "1.19"
	rpPages, err := resourceproviders.List(pl, resourceproviders.ListOpts{}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rps, err := resourceproviders.ExtractResourceProviders(rpPages)
	if err != nil {
		t.Fatal(err)
	}
	placementAggs := func() map[string][]string {
		out := map[string][]string{}
		for _, rp := range rps {
			pa, err := resourceproviders.GetAggregates(ctx, pl, rp.UUID).Extract()
			if err != nil {
				t.Fatalf("placement aggregates of %s: %v", rp.Name, err)
			}
			out[rp.Name] = pa.Aggregates
		}
		return out
	}
	want := fmt.Sprintf("map[h01:[%s] h02:[%[1]s] h03:[]]", ag.UUID)
	if got := fmt.Sprint(placementAggs()); got != want {
		t.Fatalf("placement aggregates %s, want %s", got, want)
	}
	if _, err := aggregates.RemoveHost(ctx, sc, ag.ID, aggregates.RemoveHostOpts{Host: "h02"}).Extract(); err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("map[h01:[%s] h02:[] h03:[]]", ag.UUID)
	if got := fmt.Sprint(placementAggs()); got != want {
		t.Fatalf("after h02 left: placement aggregates %s, want %s", got, want)
	}
}

// TestGophercloudServerGroups drives os-server-groups and scheduler hints
// with gophercloud: anti-affinity spreads and then finds no valid host,
// affinity packs, a failed or deleted member leaves its group.
func TestGophercloudServerGroups(t *testing.T) {
	ctx := context.Background()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.64")

	anti, err := servergroups.Create(ctx, sc, servergroups.CreateOpts{Name: "web", Policy: "anti-affinity"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if anti.Policy == nil || *anti.Policy != "anti-affinity" || anti.Members == nil || len(anti.Members) != 0 || anti.ProjectID == "" {
		t.Fatalf("created %+v", anti)
	}
	var hosts []string
	var ids []string
	for i := 0; i < 3; i++ {
		srv := boot(t, cl, sc, fmt.Sprintf("web-%d", i), "", servers.SchedulerHintOpts{Group: anti.ID})
		if srv.Status != "ACTIVE" {
			t.Fatalf("member %d: %s (%s)", i, srv.Status, cl.FailureReason(ctx, srv.ID))
		}
		hosts = append(hosts, srv.Host)
		ids = append(ids, srv.ID)
	}
	slices.Sort(hosts)
	if fmt.Sprint(hosts) != "[h01 h02 h03]" {
		t.Fatalf("anti-affinity members on %v, want one per host", hosts)
	}
	fourth := boot(t, cl, sc, "web-3", "", servers.SchedulerHintOpts{Group: anti.ID})
	if fourth.Status != "ERROR" {
		t.Fatalf("a 4th anti-affinity member on 3 hosts: %s on %q", fourth.Status, fourth.Host)
	}
	raw := servers.Get(ctx, sc, fourth.ID)
	var body struct { // ExtractInto reads inside "server"
		Fault struct{ Message string } `json:"fault"`
	}
	if err := raw.ExtractInto(&body); err != nil || !strings.Contains(body.Fault.Message, "No valid host") {
		t.Fatalf("the 4th member's fault: %q %v", body.Fault.Message, err)
	}
	var shown struct {
		Groups []string `json:"server_groups"`
	}
	if err := servers.Get(ctx, computeAt(cl, "2.71"), ids[0]).ExtractInto(&shown); err != nil || fmt.Sprint(shown.Groups) != "["+anti.ID+"]" {
		t.Fatalf("server_groups of a member at 2.71: %v %v", shown.Groups, err)
	}
	got, err := servergroups.Get(ctx, sc, anti.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got.Members)
	slices.Sort(ids)
	if fmt.Sprint(got.Members) != fmt.Sprint(ids) {
		t.Fatalf("members %v, want the 3 placed servers %v (the failed one leaves)", got.Members, ids)
	}
	if err := cl.DeleteServer(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if got, _ = servergroups.Get(ctx, sc, anti.ID).Extract(); len(got.Members) != 2 || slices.Contains(got.Members, ids[0]) {
		t.Fatalf("members after deleting %s: %v", ids[0], got.Members)
	}

	// Affinity packs where spreading would otherwise win; before 2.64 the
	// policy is a list.
	old := computeAt(cl, "2.15")
	aff, err := servergroups.Create(ctx, old, servergroups.CreateOpts{Name: "db", Policies: []string{"affinity"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(aff.Policies) != "[affinity]" {
		t.Fatalf("created at 2.15: %+v", aff)
	}
	first := boot(t, cl, sc, "db-0", "", servers.SchedulerHintOpts{Group: aff.ID})
	for i := 1; i < 3; i++ {
		if srv := boot(t, cl, sc, fmt.Sprintf("db-%d", i), "", servers.SchedulerHintOpts{Group: aff.ID}); srv.Host != first.Host {
			t.Fatalf("affinity member %d on %s, the first on %s", i, srv.Host, first.Host)
		}
	}

	// Nova's input checks.
	_, err = servergroups.Create(ctx, sc, servergroups.CreateOpts{Name: "x", Policy: "affinity", Rules: &servergroups.Rules{MaxServerPerHost: 2}}).Extract()
	wantStatus(t, "rules on an affinity group", err, http.StatusBadRequest)
	_, err = servergroups.Create(ctx, sc, servergroups.CreateOpts{Name: "x", Policies: []string{"affinity"}}).Extract()
	wantStatus(t, "policies at 2.64", err, http.StatusBadRequest)
	_, err = servergroups.Create(ctx, computeAt(cl, "2.14"), servergroups.CreateOpts{Name: "x", Policies: []string{"soft-affinity"}}).Extract()
	wantStatus(t, "soft-affinity before 2.15", err, http.StatusBadRequest)
	fl, _ := cl.FindFlavor(ctx, "m1.small")
	_, err = servers.Create(ctx, sc, servers.CreateOpts{Name: "lost", FlavorRef: fl.ID, Networks: "none"},
		servers.SchedulerHintOpts{Group: "3f1e2d3c-0000-4000-8000-000000000000"}).Extract()
	wantStatus(t, "a hint naming no group", err, http.StatusBadRequest)

	// max_server_per_host 2 on 3 hosts takes 6.
	two, err := servergroups.Create(ctx, sc, servergroups.CreateOpts{Name: "pairs", Policy: "anti-affinity", Rules: &servergroups.Rules{MaxServerPerHost: 2}}).Extract()
	if err != nil || two.Rules == nil || two.Rules.MaxServerPerHost != 2 {
		t.Fatalf("created %+v %v", two, err)
	}

	pages, err := servergroups.List(sc, servergroups.ListOpts{}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := servergroups.ExtractServerGroups(pages)
	if err != nil || len(list) != 3 {
		t.Fatalf("list: %d groups %v", len(list), err)
	}
	var lim struct {
		Limits struct {
			Absolute struct {
				Used int `json:"totalServerGroupsUsed"`
			} `json:"absolute"`
		} `json:"limits"`
	}
	if _, err := sc.Get(ctx, sc.ServiceURL("limits"), &lim, nil); err != nil || lim.Limits.Absolute.Used != 3 {
		t.Fatalf("limits: totalServerGroupsUsed %d, want 3 (%v)", lim.Limits.Absolute.Used, err)
	}
	if err := servergroups.Delete(ctx, sc, two.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	_, err = servergroups.Get(ctx, sc, two.ID).Extract()
	wantStatus(t, "a deleted group", err, http.StatusNotFound)
}
