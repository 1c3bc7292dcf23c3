package computeapi_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/hypervisors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/instanceactions"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/migrations"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/services"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/tags"
	"github.com/gophercloud/gophercloud/v2/pagination"

	"keel/internal/client"
	"keel/internal/client/clienttest"
)

// TestGophercloudComputeLifecycle drives keel's compute API with
// gophercloud's compute packages, as a Go user of an OpenStack cloud
// would: boot, list with filters, update, live-migrate (scheduler's choice,
// then a named host), the migration records, hypervisors, services and
// instance actions (also of a deleted server).
func TestGophercloudComputeLifecycle(t *testing.T) {
	ctx := context.Background()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.80")

	// Boot, with what Nova keeps and shows back.
	fl, err := cl.FindFlavor(ctx, "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	created := servers.Create(ctx, sc, servers.CreateOpts{
		Name: "vm1", FlavorRef: fl.ID, Networks: "none", Metadata: map[string]string{"role": "db"},
		AccessIPv4: "192.0.2.7",
	}, nil)
	s, err := created.Extract()
	if err != nil {
		t.Fatal(err)
	}
	createReq := created.Header.Get("X-Compute-Request-Id")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	srv, err := cl.WaitServer(wctx, s.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" })
	if err != nil || srv.Status != "ACTIVE" || srv.Host == "" {
		t.Fatalf("boot: %+v %v", srv, err)
	}
	got, err := servers.Get(ctx, sc, s.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata["role"] != "db" || got.AccessIPv4 != "192.0.2.7" || got.Flavor["original_name"] != "m1.small" || got.AvailabilityZone != "nova" {
		t.Fatalf("shown server: metadata %v, accessIPv4 %q, flavor %v, zone %q", got.Metadata, got.AccessIPv4, got.Flavor, got.AvailabilityZone)
	}

	// Update, and list with Nova's filters.
	name := "vm1-renamed"
	upd, err := servers.Update(ctx, sc, s.ID, servers.UpdateOpts{Name: name, AccessIPv6: "2001:db8:0::1"}).Extract()
	if err != nil || upd.Name != name || upd.AccessIPv6 != "2001:db8::1" || upd.AccessIPv4 != "192.0.2.7" {
		t.Fatalf("update: %+v %v", upd, err)
	}
	boot(t, cl, sc, "other", "", servers.SchedulerHintOpts{})
	for _, c := range []struct {
		opts servers.ListOpts
		want []string
	}{
		{servers.ListOpts{Name: "^vm1-"}, []string{name}},
		{servers.ListOpts{Limit: 1}, []string{"other"}}, // newest first
		{servers.ListOpts{Flavor: fl.ID, Status: "ACTIVE"}, []string{"other", name}},
		{servers.ListOpts{ChangesSince: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, nil},
	} {
		var names []string
		// The first page only: with a limit it is all the server returns.
		err := servers.List(sc, c.opts).EachPage(ctx, func(_ context.Context, page pagination.Page) (bool, error) {
			all, err := servers.ExtractServers(page)
			for _, x := range all {
				names = append(names, x.Name)
			}
			return false, err
		})
		if err != nil {
			t.Fatalf("list %+v: %v", c.opts, err)
		}
		if strings.Join(names, ",") != strings.Join(c.want, ",") {
			t.Errorf("list %+v: %v, want %v", c.opts, names, c.want)
		}
	}
	_, err = servers.List(sc, servers.ListOpts{ChangesSince: "yesterday"}).AllPages(ctx)
	wantStatus(t, "changes-since=yesterday", err, http.StatusBadRequest)

	// Live-migrate: the scheduler's choice, then a named host.
	migrate := func(host *string) client.Server {
		t.Helper()
		block := false // Nova's schema requires block_migration
		res := servers.LiveMigrate(ctx, sc, s.ID, servers.LiveMigrateOpts{Host: host, BlockMigration: &block})
		if res.Err != nil {
			t.Fatalf("live migration to %v: %v", host, res.Err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		srv, err := cl.WaitServer(wctx, s.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status == "ACTIVE" && s.TaskState == "" })
		if err != nil {
			t.Fatalf("waiting for the live migration: %v", err)
		}
		// The instance settles on its host just before its migration
		// record says completed (the conductor saves the instance first,
		// as Nova does): wait for the record too.
		for {
			live, err := cl.ServerMigrations(wctx, s.ID)
			if err == nil && len(live) == 0 {
				break
			}
			if wctx.Err() != nil {
				t.Fatalf("the live migration's record did not end: %+v %v", live, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return srv
	}
	src := srv.Host
	mid := migrate(nil).Host
	if mid == src {
		t.Fatalf("live migration without a host stayed on %s", src)
	}
	target := ""
	for _, h := range []string{"h01", "h02", "h03"} {
		if h != src && h != mid {
			target = h
		}
	}
	if dst := migrate(&target).Host; dst != target {
		t.Fatalf("live migration to %s ended on %s", target, dst)
	}

	// The migrations, newest first, with 2.80's user and project.
	pages, err := migrations.List(sc, migrations.ListOpts{InstanceID: &s.ID}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	migs, err := migrations.ExtractMigrations(pages)
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) != 2 || migs[0].SourceCompute != mid || migs[0].DestCompute != target || migs[1].SourceCompute != src ||
		migs[0].Status != "completed" || migs[0].MigrationType != "live-migration" || migs[0].UserID == "" || migs[0].ProjectID != srv.ProjectID {
		t.Fatalf("migrations: %+v", migs)
	}

	// Hypervisors: vm1 is counted on its new host only.
	other, err := cl.FindServer(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	pages, err = hypervisors.List(sc, hypervisors.ListOpts{}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := hypervisors.ExtractHypervisors(pages)
	if err != nil {
		t.Fatal(err)
	}
	var targetID string
	for _, h := range hs {
		want := 0
		if h.HypervisorHostname == target {
			want, targetID = 1, h.ID
		}
		if h.HypervisorHostname == other.Host {
			want++
		}
		if h.RunningVMs != want || h.State != "up" {
			t.Errorf("hypervisor %s: %d running, state %s; want %d, up", h.HypervisorHostname, h.RunningVMs, h.State, want)
		}
	}
	if len(hs) != 3 || targetID == "" {
		t.Fatalf("hypervisors: %+v", hs)
	}
	stats, err := hypervisors.GetStatistics(ctx, sc).Extract()
	if err != nil || stats.Count != 3 || stats.RunningVMs != 2 {
		t.Fatalf("statistics: %+v %v", stats, err)
	}
	up, err := hypervisors.GetUptime(ctx, sc, targetID).Extract()
	if err != nil || up.HypervisorHostname != target || !strings.Contains(up.Uptime, " up") {
		t.Fatalf("uptime of %s: %+v %v", target, up, err)
	}

	// Services: disable the target; it shows disabled with the reason.
	pages, err = services.List(sc, services.ListOpts{Binary: "nova-compute", Host: target}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := services.ExtractServices(pages)
	if err != nil || len(svcs) != 1 || svcs[0].State != "up" || svcs[0].Status != "enabled" {
		t.Fatalf("services on %s: %+v %v", target, svcs, err)
	}
	svc, err := services.Update(ctx, sc, svcs[0].ID, services.UpdateOpts{Status: services.ServiceDisabled, DisabledReason: "maintenance"}).Extract()
	if err != nil || svc.Status != "disabled" || svc.DisabledReason != "maintenance" || svc.Host != target {
		t.Fatalf("disabling %s: %+v %v", target, svc, err)
	}

	// Instance actions: create and the two live migrations, newest first;
	// the create one found by its request id.
	actions := func(id string) []instanceactions.InstanceAction {
		t.Helper()
		pages, err := instanceactions.List(sc, id, nil).AllPages(ctx)
		if err != nil {
			t.Fatalf("actions of %s: %v", id, err)
		}
		acts, err := instanceactions.ExtractInstanceActions(pages)
		if err != nil {
			t.Fatal(err)
		}
		return acts
	}
	acts := actions(s.ID)
	if len(acts) != 3 || acts[0].Action != "live-migration" || acts[1].Action != "live-migration" || acts[2].Action != "create" ||
		acts[2].RequestID != createReq || acts[2].ProjectID != srv.ProjectID {
		t.Fatalf("actions: %+v (create request %s)", acts, createReq)
	}
	act, err := instanceactions.Get(ctx, sc, s.ID, acts[0].RequestID).Extract()
	if err != nil || act.Events == nil || len(*act.Events) != 1 || (*act.Events)[0].Result != "Success" || act.Message != "" {
		t.Fatalf("the last live migration's action: %+v %v", act, err)
	}
	act, err = instanceactions.Get(ctx, sc, s.ID, createReq).Extract()
	if err != nil || act.Events == nil || len(*act.Events) != 1 || (*act.Events)[0].Event != "compute_build_and_run_instance" || (*act.Events)[0].Result != "Success" {
		t.Fatalf("the create action: %+v %v", act, err)
	}
	_, err = instanceactions.Get(ctx, sc, s.ID, "req-nope").Extract()
	wantStatus(t, "an unknown action", err, http.StatusNotFound)

	// A deleted server's actions stay readable (2.21): create, delete.
	if err := servers.Delete(ctx, sc, s.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if acts := actions(s.ID); len(acts) != 4 || acts[0].Action != "delete" {
		t.Fatalf("actions after delete: %+v", acts)
	}
	_, err = instanceactions.List(computeAt(cl, "2.20"), s.ID, nil).AllPages(ctx)
	wantStatus(t, "a deleted server's actions before 2.21", err, http.StatusNotFound)
}

// TestGophercloudFlavorExtraSpecs sets, reads, updates and unsets a
// flavor's extra specs with gophercloud; a server booted afterwards carries
// them in its flavor (2.47).
func TestGophercloudFlavorExtraSpecs(t *testing.T) {
	ctx := context.Background()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.61")
	fl, err := cl.FindFlavor(ctx, "m1.small") // the flavor boot uses
	if err != nil {
		t.Fatal(err)
	}
	set, err := flavors.CreateExtraSpecs(ctx, sc, fl.ID, flavors.ExtraSpecsOpts{"hw:cpu_policy": "shared", "trait:CUSTOM_X": "required"}).Extract()
	if err != nil || len(set) != 2 {
		t.Fatalf("set: %v %v", set, err)
	}
	if _, err := flavors.UpdateExtraSpec(ctx, sc, fl.ID, flavors.ExtraSpecsOpts{"hw:cpu_policy": "dedicated"}).Extract(); err != nil {
		t.Fatal(err)
	}
	if err := flavors.DeleteExtraSpec(ctx, sc, fl.ID, "trait:CUSTOM_X").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	got, err := flavors.ListExtraSpecs(ctx, sc, fl.ID).Extract()
	if err != nil || len(got) != 1 || got["hw:cpu_policy"] != "dedicated" {
		t.Fatalf("extra specs after set, update, unset: %v %v", got, err)
	}
	_, err = flavors.GetExtraSpec(ctx, sc, fl.ID, "trait:CUSTOM_X").Extract()
	wantStatus(t, "an unset key", err, http.StatusNotFound)
	// gophercloud refuses this one itself, so it goes out raw.
	_, err = sc.Put(ctx, sc.ServiceURL("flavors", fl.ID, "os-extra_specs", "a"), map[string]string{"a": "1", "b": "2"}, nil, nil)
	wantStatus(t, "an update naming two keys", err, http.StatusBadRequest)

	srv := boot(t, cl, computeAt(cl, "2.47"), "pinned", "", servers.SchedulerHintOpts{})
	shown, err := servers.Get(ctx, computeAt(cl, "2.47"), srv.ID).Extract()
	if err != nil || fmt.Sprint(shown.Flavor["extra_specs"]) != "map[hw:cpu_policy:dedicated]" {
		t.Fatalf("the booted server's flavor: %v %v", shown.Flavor, err)
	}
}

// TestGophercloudServerTags adds, checks, replaces and deletes server tags
// with gophercloud (2.26), filters the server list by them, and finds the
// tag API absent before 2.26.
func TestGophercloudServerTags(t *testing.T) {
	ctx := context.Background()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.26")
	a := boot(t, cl, sc, "a", "", servers.SchedulerHintOpts{})
	b := boot(t, cl, sc, "b", "", servers.SchedulerHintOpts{})
	for _, tag := range []string{"web", "prod"} {
		if err := tags.Add(ctx, sc, a.ID, tag).ExtractErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tags.Add(ctx, sc, b.ID, "web").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if ok, err := tags.Check(ctx, sc, a.ID, "prod").Extract(); !ok || err != nil {
		t.Errorf("check prod on a: %v %v", ok, err)
	}
	if ok, err := tags.Check(ctx, sc, b.ID, "prod").Extract(); ok || err != nil {
		t.Errorf("check prod on b: %v %v", ok, err)
	}
	names := func(opts servers.ListOpts) string {
		t.Helper()
		pages, err := servers.List(sc, opts).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, err := servers.ExtractServers(pages)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range all {
			out = append(out, s.Name)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		opts servers.ListOpts
		want string
	}{
		{servers.ListOpts{Tags: "web,prod"}, "a"},
		{servers.ListOpts{TagsAny: "prod,nope"}, "a"},
		{servers.ListOpts{NotTags: "prod"}, "b"},
		{servers.ListOpts{Tags: "web"}, "a,b"},
	} {
		if got := names(c.opts); got != c.want {
			t.Errorf("list %+v: %s, want %s", c.opts, got, c.want)
		}
	}
	got, err := tags.ReplaceAll(ctx, sc, a.ID, tags.ReplaceAllOpts{Tags: []string{"db", "db", "eu"}}).Extract()
	if err != nil || strings.Join(got, ",") != "db,eu" {
		t.Fatalf("replace all: %v %v", got, err)
	}
	if err := tags.Delete(ctx, sc, a.ID, "db").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if got, err := tags.List(ctx, sc, a.ID).Extract(); err != nil || strings.Join(got, ",") != "eu" {
		t.Fatalf("after deleting db: %v %v", got, err)
	}
	err = tags.Add(ctx, sc, a.ID, "a/b").ExtractErr()
	wantStatus(t, "a tag with a slash", err, http.StatusNotFound) // the slash makes another path
	err = tags.Add(ctx, sc, a.ID, "a,b").ExtractErr()
	wantStatus(t, "a tag with a comma", err, http.StatusBadRequest)
	if err := tags.DeleteAll(ctx, sc, a.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if got, err := tags.List(ctx, sc, a.ID).Extract(); err != nil || len(got) != 0 {
		t.Fatalf("after delete all: %v %v", got, err)
	}
	_, err = tags.List(ctx, computeAt(cl, "2.25"), a.ID).Extract()
	wantStatus(t, "tags at 2.25", err, http.StatusNotFound)
}
