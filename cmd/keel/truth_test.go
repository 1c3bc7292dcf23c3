package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/records"
)

// TestCommandsTellTheTruth (issue 24, items 5, 8, 10 and 11): capacity as
// Placement counts it, refused flags, errors that name what the user typed
// and what to run, no stutters, servers in natural order.
func TestCommandsTellTheTruth(t *testing.T) {
	big := records.Flavor{ID: "90", Name: "m1.big", VCPUs: 2, RAMMB: 100 << 10, DiskGB: 10} // one a host
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2, Flavors: append(slices.Clone(clienttest.Flavors), big),
		Config: func(c *config.Config) { c.Default.CPUAllocationRatio = 4 }})
	useCloud(t, cloud)

	// 5: VCPU of (total − reserved) × cpu_allocation_ratio, as the web
	// view says (it was 1/32, the raw total).
	mustRun(t, "server", "create", "vm10", "--flavor", "m1.tiny", "--wait")
	mustRun(t, "server", "create", "vm2", "--flavor", "m1.tiny", "--wait")
	mustRun(t, "server", "create", "vm1", "--flavor", "m1.tiny", "--wait")
	var hosts []client.Host
	if err := json.Unmarshal([]byte(mustRun(t, "host", "list", "-f", "json")), &hosts); err != nil {
		t.Fatal(err)
	}
	raw := hosts[0].VCPUs
	if got := hosts[0].Placement["VCPU"]; got.Capacity != int64(raw*4) || got.AllocationRatio != 4 {
		t.Fatalf("host list --format json: VCPU %+v, want capacity %d (%d × 4)", got, raw*4, raw)
	}
	out := mustRun(t, "host", "list")
	for _, h := range hosts {
		wantContains(t, out, h.Name)
	}
	if !strings.Contains(out, "/"+itoa(int64(raw*4))+" ") || strings.Contains(out, "/"+itoa(int64(raw))+" ") {
		t.Errorf("host list shows VCPU of the raw %d, not the capacity %d:\n%s", raw, raw*4, out)
	}

	// 11: servers in natural order (vm1, vm2, vm10; was vm1, vm10, vm2).
	out = mustRun(t, "server", "list")
	if i1, i2, i10 := strings.Index(out, "vm1 "), strings.Index(out, "vm2 "), strings.Index(out, "vm10 "); !(i1 < i2 && i2 < i10) {
		t.Errorf("server list not in natural order:\n%s", out)
	}

	// 10: a requested host that refuses is named, with the explain
	// command that says why, filled in.
	mustRun(t, "server", "create", "big1", "--flavor", "m1.big", "--wait")
	mustRun(t, "server", "create", "big2", "--flavor", "m1.big", "--wait")
	b2 := showServer(t, "big2").Host
	_, err := run(t, "server", "migrate", "--live", "big1", "--host", b2, "--wait")
	if err == nil || !strings.Contains(err.Error(), "the requested host "+b2+" was rejected by ResourceFilter (run `keel schedule explain --flavor m1.big --host "+b2+"` for why)") {
		t.Errorf("migrate to a full host: %v", err)
	}
	mustRun(t, "schedule", "explain", "--flavor", "m1.big", "--host", b2)

	cases := []struct {
		args []string
		want string
	}{
		// 11: no stutter.
		{[]string{"plan", "approve", "999"}, "plan 999: not found (keel plan list shows the plans)"},
		{[]string{"plan", "show", "999"}, "plan 999: not found (keel plan list shows the plans)"},
		{[]string{"migration", "reset", "99"}, "migration 99: not found (keel migration list shows them)"},
		// 8: refused, with the choices.
		{[]string{"migration", "list", "--status", "bogus"}, `--status "bogus" is no migration status; the statuses are accepted, queued, preparing, running, completed, error, failed, cancelled, pre-migrating,`},
		{[]string{"rebalance", "plan", "--threshold", "0"}, "--threshold must be a coefficient of variation above 0"},
		// 10: an unknown host lists the hosts (was a 409 naming none).
		{[]string{"host", "drain", "nohost"}, "draining nohost: no compute host nohost (hosts: h01, h02) (HTTP 404)"},
		// 10: an unknown cloud lists the clouds.
		{[]string{"host", "list", "--os-cloud", "prod"}, `cloud "prod" is not in ` + cloud.CloudsYAML + " (its clouds: keel, keel-alt_demo, keel-demo)"},
	}
	for _, tc := range cases {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("keel %s:\n got %v\nwant an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	// A reset of a migration that ended says so once.
	ms, err := cloud.Connect(t).Migrations(t.Context(), client.MigrationFilter{})
	if err != nil || len(ms) == 0 {
		t.Fatalf("migrations: %v %d", err, len(ms))
	}
	_, err = run(t, "migration", "reset", itoa(ms[0].ID))
	if err == nil || strings.Count(err.Error(), "migration "+itoa(ms[0].ID)) != 1 || !strings.Contains(err.Error(), "HTTP 409") {
		t.Errorf("reset of an ended migration: %v", err)
	}
	var ae *client.APIError
	if _, err := cloud.Connect(t).Drain(t.Context(), client.DrainOptions{Hosts: []string{"nohost"}}); !asAPI(err, &ae) || ae.Status != http.StatusNotFound {
		t.Errorf("drain of an unknown host: %v, want a 404", err)
	}

	// 10: with no OS_CLIENT_CONFIG_FILE, ./.keel/clouds.yaml (keel dev's
	// default data dir) is read.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".keel"), 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(cloud.CloudsYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".keel", "clouds.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("OS_CLIENT_CONFIG_FILE", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	wantContains(t, mustRun(t, "host", "list"), "h01", "h02")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func asAPI(err error, ae **client.APIError) bool { return errors.As(err, ae) }

// TestPlanShowWaitFollows (issue 24, item 9): keel plan show N --wait
// follows a plan to its end, a line per move; a wait stopped (Ctrl-C)
// says the plan goes on and how to follow it again.
func TestPlanShowWaitFollows(t *testing.T) {
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	useCloud(t, cloud)
	mustRun(t, "server", "create", "a", "--flavor", "m1.tiny", "--wait")
	mustRun(t, "server", "create", "b", "--flavor", "m1.tiny", "--wait")
	host := showServer(t, "a").Host
	out := mustRun(t, "host", "drain", host)
	wantContains(t, out, "plan 1: draining "+host)
	out = mustRun(t, "plan", "show", "1", "--wait")
	wantContains(t, out, "plan 1 (drain "+host+")", "INSTANCE", "[1/", "copied in", "): done — ")
	if strings.Contains(out, "MiB in ") && !strings.Contains(out, "copied in") {
		t.Errorf("a move's line names memory it did not copy:\n%s", out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var buf strings.Builder
	_, err := waitPlan(ctx, cloud.Connect(t), 1, &buf, nil)
	if err == nil || !strings.Contains(err.Error(), "the plan goes on: keel plan show 1 --wait follows it again") {
		t.Errorf("a stopped wait: %v", err)
	}
}

// TestDrainHeaderNamesTheBindingCap (issue 24, item 7): a drain's header
// names the cap its moves run under and the time they are expected to
// take, not "parallel unlimited" while they go one at a time; plan show
// says the same while moves are left.
func TestDrainHeaderNamesTheBindingCap(t *testing.T) {
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	useCloud(t, cloud)
	ctx := t.Context()
	c := cloud.Connect(t)
	fl, err := c.FindFlavor(ctx, "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s, err := servers.Create(ctx, c.ComputeClient(), servers.CreateOpts{Name: fmt.Sprintf("d%d", i), FlavorRef: fl.ID,
			AvailabilityZone: "nova:h01"}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitServer(ctx, s.ID, 50*time.Millisecond, func(s client.Server) bool { return s.Status == "ACTIVE" || s.Status == "ERROR" }); err != nil {
			t.Fatal(err)
		}
	}
	// 3 moves of m1.small (2048 MiB) one at a time at the fake driver's
	// 1024 MiB/s: 6 s.
	out := mustRun(t, "host", "drain", "h01", "--wait")
	wantContains(t, out, "plan 1: draining h01: 3 moves (1 at once: max_concurrent_live_migrations = 1 per source host; expected 6s, order largest)")
}
