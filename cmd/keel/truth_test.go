package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/rebalance"
	"keel/internal/records"
)

// TestCommandsTellTheTruth (issue 24, items 5, 8, 10 and 11): capacity as
// Placement counts it, refused flags, errors that name what the user typed
// and what to run, no stutters, servers in natural order.
func TestCommandsTellTheTruth(t *testing.T) {
	t.Parallel()
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
	chdir(t, dir)
	setenv(t, "OS_CLIENT_CONFIG_FILE", "")
	setenv(t, "XDG_CONFIG_HOME", t.TempDir())
	wantContains(t, mustRun(t, "host", "list"), "h01", "h02")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func asAPI(err error, ae **client.APIError) bool { return errors.As(err, ae) }

// TestPlanShowWaitFollows (issue 24, item 9): keel plan show N --wait
// follows a plan to its end, a line per move; a wait stopped (Ctrl-C)
// says the plan goes on and how to follow it again.
func TestPlanShowWaitFollows(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	useCloud(t, cloud)
	ctx := t.Context()
	c := cloud.Connect(t)
	fl, err := c.FindFlavor(ctx, "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	create := func(name, host string) {
		s, err := servers.Create(ctx, c.ComputeClient(), servers.CreateOpts{Name: name, FlavorRef: fl.ID,
			AvailabilityZone: "nova:" + host}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitServer(ctx, s.ID, 50*time.Millisecond, func(s client.Server) bool { return s.Status == "ACTIVE" || s.Status == "ERROR" }); err != nil {
			t.Fatal(err)
		}
	}
	// One move (item 11: not "1 moves") of m1.small (2048 MiB) at the
	// fake driver's 1024 MiB/s: 2 s.
	create("solo", "h02")
	out := mustRun(t, "host", "drain", "h02", "--wait")
	wantContains(t, out, "plan 1: draining h02: 1 move (1 at once: a single move; expected 2s, order largest)")
	mustRun(t, "host", "undrain", "h02")
	// 4 moves one at a time: 8 s.
	for i := range 3 {
		create(fmt.Sprintf("d%d", i), "h01")
	}
	out = mustRun(t, "host", "drain", "h01", "--wait")
	wantContains(t, out, "plan 2: draining h01: 4 moves (1 at once: max_concurrent_live_migrations = 1 per source host; expected 8s, order largest)")

	// Item 11: plan list labels a return plan a return, with its host
	// (was "rebalance" with HOSTS -).
	out = mustRun(t, "host", "undrain", "h01", "--return", "--wait")
	wantContains(t, out, "plan 3: returning 4 instances to h01")
	if !regexp.MustCompile(`(?m)^3\s+return\s+done\s+h01\s+4\s`).MatchString(mustRun(t, "plan", "list")) {
		t.Errorf("plan list does not show plan 3 as the return to h01 it is:\n%s", mustRun(t, "plan", "list"))
	}
}

// TestSetSuggests (issue 24, item 10): keel dev's, keel server's and
// keel agent's --set with a misspelt option says what it may have meant,
// as the scenario loader does.
func TestSetSuggests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ set, want string }{
		{"filter_scheduler.host_subset_sise=3", "--set filter_scheduler.host_subset_sise=3: [filter_scheduler] host_subset_sise: unknown option; did you mean host_subset_size?"},
		{"DEFAULT.cpu_alocation_ratio=4", "did you mean cpu_allocation_ratio?"},
		{"DEFAULT.Host=x", "did you mean host? (option names are case-sensitive)"},
	} {
		_, err := run(t, "dev", "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("keel dev --set %s: got %v, want %q", tc.set, err, tc.want)
		}
	}
}

// syncBuffer is a strings.Builder safe to read while a command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDevSaysWhatItLeaves (issue 24, item 11): keel dev stopped (Ctrl-C
// cancels its context) says the state is kept and how to start it again,
// instead of exiting silently.
func TestDevSaysWhatItLeaves(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root := rootCommand()
	var out syncBuffer
	root.SetOut(&out)
	root.SetErr(&syncBuffer{})
	root.SetArgs([]string{"dev", "--hosts", "1", "--data-dir", dir, "--listen", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	for !strings.Contains(out.String(), "server list\n") {
		select {
		case err := <-done:
			t.Fatalf("keel dev ended before it started: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("keel dev: %v", err)
	}
	wantContains(t, out.String(), "keel dev: stopped; state kept in "+dir+": no instances. keel dev --data-dir "+dir+" starts it again.")
}

// TestRebalanceLineCounts (issue 24, item 11): the rebalance planner's
// line, on keel's cloud and Nova's, says "1 move" and "1 enabled host".
func TestRebalanceLineCounts(t *testing.T) {
	t.Parallel()
	rp := rebalance.Plan{Metric: "ram", Before: 0.2, After: 0.1, Hosts: 1, Moves: make([]rebalance.Move, 1), Stopped: "done"}
	if got, want := rebalanceLine(rp), "ram CV over 1 enabled host: 0.2000 → 0.1000 in 1 move (done)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	rp.Hosts, rp.Moves = 6, make([]rebalance.Move, 3)
	if got, want := rebalanceLine(rp), "ram CV over 6 enabled hosts: 0.2000 → 0.1000 in 3 moves (done)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
