package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/compute"
	"keel/internal/records"
	"keel/internal/testenv"
)

// useCloud points t's client commands at cloud's clouds.yaml.
func useCloud(t *testing.T, cloud *clienttest.Cloud) {
	t.Helper()
	setenv(t, "OS_CLIENT_CONFIG_FILE", cloud.CloudsYAML)
	setenv(t, "OS_CLOUD", "")
}

// mustRun runs the command line and fails the test on an error.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(t, args...)
	if err != nil {
		t.Fatalf("keel %s: %v\noutput:\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func wantContains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func showServer(t *testing.T, ref string) client.Server {
	t.Helper()
	var s client.Server
	if err := json.Unmarshal([]byte(mustRun(t, "server", "show", ref, "--format", "json")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClientCommands drives a real keel (server and three fake-driver
// agents in-process) through the client commands, in the order an
// operator would.
func TestClientCommands(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	useCloud(t, cloud)

	// Every host, with its bars.
	out := mustRun(t, "host", "list")
	wantContains(t, out, "HOST", "STATE", "h01", "h02", "h03", "RAM ▕", "VCPU ▕", "DISK ▕", "up", "enabled")
	var hosts []client.Host
	if err := json.Unmarshal([]byte(mustRun(t, "host", "list", "-f", "json")), &hosts); err != nil || len(hosts) != 3 {
		t.Fatalf("host list --format json: %v, %d hosts", err, len(hosts))
	}

	// Boot and wait.
	out = mustRun(t, "server", "create", "web1", "--flavor", "m1.small", "--wait")
	wantContains(t, out, "web1", "ACTIVE", "m1.small")
	web1 := showServer(t, "web1")
	if web1.Status != "ACTIVE" || web1.Host == "" {
		t.Fatalf("web1 after create --wait: %+v", web1)
	}
	out = mustRun(t, "server", "create", "db1", "--flavor", "1") // by id, no wait
	wantContains(t, out, "db1", "m1.tiny")
	out = mustRun(t, "server", "list")
	wantContains(t, out, "NAME", "web1", "db1", web1.ID, web1.Host)

	// Live migration, followed to the end.
	out = mustRun(t, "server", "migrate", "--live", "web1", "--wait")
	wantContains(t, out, "migration 1 of web1: running", "memory", "completed", "now runs on")
	if !regexp.MustCompile(`running .*memory \d+% of 2\.0 GiB`).MatchString(out) {
		t.Errorf("no progress line with memory processed:\n%s", out)
	}
	moved := showServer(t, web1.ID)
	if moved.Host == web1.Host || moved.Host == "" || moved.Status != "ACTIVE" {
		t.Fatalf("after migrate: on %q (%s), was on %s", moved.Host, moved.Status, web1.Host)
	}
	wantContains(t, out, "now runs on "+moved.Host, web1.Host+" → "+moved.Host)

	out = mustRun(t, "migration", "list")
	wantContains(t, out, "SOURCE", "DEST", "web1", web1.ID, web1.Host, moved.Host, "completed", "live-migration")
	out = mustRun(t, "migration", "list", "--host", moved.Host, "--status", "completed")
	wantContains(t, out, web1.ID)
	out = mustRun(t, "migration", "list", "--status", "failed")
	wantContains(t, out, "no migrations")

	// To a named host; the scheduler's view and the audit stay right.
	db1 := showServer(t, "db1")
	target := "h01"
	if db1.Host == target {
		target = "h02"
	}
	out = mustRun(t, "server", "migrate", "--live", "db1", "--host", target, "--wait")
	wantContains(t, out, "completed", "now runs on "+target)
	if got := showServer(t, "db1").Host; got != target {
		t.Fatalf("db1 on %s after migrate --host %s", got, target)
	}

	out = mustRun(t, "schedule", "explain", "--flavor", "m1.small")
	wantContains(t, out, "flavor m1.small (id 2)", "3 of 3 hosts pass the filters", "picks at random among the first",
		"RANK", "WEIGHT", "RAM", "h01", "h02", "h03", "1*")
	out = mustRun(t, "schedule", "explain", "--flavor", "m1.small", "--ignore-host", "h01", "--ignore-host", "h02")
	wantContains(t, out, "1 of 3 hosts pass", "rejected (2)", "ignored (2)", "h01", "h02", "h03")
	var e client.Explanation
	if err := json.Unmarshal([]byte(mustRun(t, "schedule", "explain", "--flavor", "2", "-f", "json")), &e); err != nil || len(e.Hosts) != 3 || e.Candidates != 3 {
		t.Fatalf("explain --format json: %v %+v", err, e)
	}
	// host_subset_size 1: any seed picks the best candidate.
	out = mustRun(t, "schedule", "explain", "--flavor", "m1.small", "--pick-seed", "7")
	wantContains(t, out, "pick seed 7 picks "+e.Picked)

	out = mustRun(t, "audit")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); lines[0] != "0 violations" || strings.Contains(out, "not checked: guests") {
		t.Fatalf("audit: %q", out)
	}

	out = mustRun(t, "server", "delete", "db1", "--wait")
	wantContains(t, out, "deleted server db1")
	if _, err := run(t, "server", "show", "db1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("show after delete: %v", err)
	}
	wantContains(t, mustRun(t, "audit"), "0 violations")
}

// TestClientCommandsFailures checks that failures end non-zero with the
// reason: a spawn that fails everywhere, a copy that fails, a wait that
// times out.
func TestClientCommandsFailures(t *testing.T) {
	t.Parallel()
	huge := records.Flavor{ID: "99", Name: "m1.huge", VCPUs: 8, RAMMB: 1 << 30, DiskGB: 10} // more RAM than any host
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2, Flavors: append(slices.Clone(clienttest.Flavors), huge)})
	useCloud(t, cloud)

	out, err := run(t, "server", "create", "bad", "--flavor", "m1.huge", "--wait")
	if err == nil || !strings.Contains(err.Error(), "is ERROR: No valid host") || !strings.Contains(out, "fault") {
		t.Fatalf("create of a server that fits nowhere: %v\n%s", err, out)
	}
	t.Log(err)

	mustRun(t, "server", "create", "vm", "--flavor", "m1.tiny", "--wait")
	vm := showServer(t, "vm")
	cloud.FailNext(t, vm.Host, compute.StepLiveMigration, vm.ID, "connection reset")
	out, err = run(t, "server", "migrate", "--live", "vm", "--wait")
	if err == nil || !regexp.MustCompile(`migration \d+ of server vm (failed|error)`).MatchString(err.Error()) {
		t.Fatalf("migrate with a failing copy: %v\n%s", err, out)
	}
	wantContains(t, err.Error(), "the server is ACTIVE on "+vm.Host)
	t.Log(err)

	// A wait that gives up leaves the migration going.
	_, err = run(t, "server", "migrate", "--live", "vm", "--wait", "--timeout", "1ms")
	if err == nil || !strings.Contains(err.Error(), "gave up waiting after 1ms") {
		t.Fatalf("migrate --timeout 1ms: %v", err)
	}
	c := cloud.Connect(t)
	ctx := testenv.Context(t)
	for {
		ms, err := c.Migrations(context.Background(), client.MigrationFilter{InstanceUUID: vm.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) > 0 && client.Terminal(ms[0].Status) {
			if ms[0].Status != client.MigrationCompleted {
				t.Fatalf("migration after the wait gave up: %+v", ms[0])
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("migration still not done: %+v", ms)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantContains(t, mustRun(t, "audit"), "0 violations")

	// Pre-check failures come back at once (microversion 2.30).
	now := showServer(t, "vm").Host
	if _, err := run(t, "server", "migrate", "--live", "vm", "--host", now); err == nil || !strings.Contains(err.Error(), "to current host ("+now+")") {
		t.Errorf("migrate to its own host: %v", err)
	}
	if _, err := run(t, "server", "migrate", "--live", "vm", "--host", "h99"); err == nil || !strings.Contains(err.Error(), "h99") {
		t.Errorf("migrate to an unknown host: %v", err)
	}
}

// TestClientCommandErrors checks the messages of mistakes.
func TestClientCommandErrors(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	useCloud(t, cloud)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"server", "show", "nope"}, `no server with id or name "nope"`},
		{[]string{"server", "delete", "nope"}, `no server with id or name "nope"`},
		{[]string{"server", "migrate", "--live", "nope"}, `no server with id or name "nope"`},
		{[]string{"server", "create", "x"}, "create needs --flavor"},
		{[]string{"server", "create", "x", "--flavor", "m9.huge"}, `flavor "m9.huge": not found (flavors: m1.large, m1.medium, m1.small, m1.tiny)`},
		{[]string{"server", "create", "--flavor", "m1.tiny"}, "create needs exactly one NAME"},
		{[]string{"server", "migrate", "x"}, "pass --live"},
		{[]string{"server", "list", "--format", "yaml"}, "--format must be table or json"},
		{[]string{"schedule", "explain"}, "explain needs --flavor"},
		{[]string{"schedule", "explain", "--flavor", "m9.huge"}, "flavor m9.huge not found"},
		{[]string{"host", "list", "--os-cloud", "prod"}, `cloud "prod" is not in ` + cloud.CloudsYAML},
	}
	for _, tc := range cases {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("keel %s: %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}

	// Two servers with one name: ask for an id.
	mustRun(t, "server", "create", "twin", "--flavor", "m1.tiny")
	mustRun(t, "server", "create", "twin", "--flavor", "m1.tiny")
	if _, err := run(t, "server", "show", "twin"); err == nil || !strings.Contains(err.Error(), `2 servers are named "twin"; give an id`) {
		t.Errorf("ambiguous name: %v", err)
	}

	// A cloud nobody serves.
	stopped := filepath.Join(t.TempDir(), "clouds.yaml")
	if err := client.WriteCloudsYAML(stopped, "http://127.0.0.1:1", "pw"); err != nil {
		t.Fatal(err)
	}
	setenv(t, "OS_CLIENT_CONFIG_FILE", stopped)
	if _, err := run(t, "host", "list"); err == nil || !strings.Contains(err.Error(), "is keel running?") {
		t.Errorf("unreachable cloud: %v", err)
	}

	// No clouds.yaml at all.
	setenv(t, "OS_CLIENT_CONFIG_FILE", filepath.Join(t.TempDir(), "missing.yaml"))
	_, err := run(t, "audit")
	if !errors.Is(err, client.ErrNoCloudsYAML) || !strings.Contains(err.Error(), "run `keel dev` and `export OS_CLIENT_CONFIG_FILE=") {
		t.Errorf("missing clouds.yaml: %v", err)
	}
}

func TestBar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		used, total float64
		want        string
	}{
		{0, 10, "▕░░░░░░░░░░▏   0%"},
		{6.2, 10, "▕██████░░░░▏  62%"},
		{10, 10, "▕██████████▏ 100%"},
		{12, 10, "▕██████████▏ 120%"}, // the bar stops at full, the share does not
		{0.01, 10, "▕█░░░░░░░░░▏  <1%"},
		{1, 0, "▕░░░░░░░░░░▏    -"},
	} {
		if got := bar(tc.used, tc.total); got != tc.want {
			t.Errorf("bar(%v, %v) = %q, want %q", tc.used, tc.total, got, tc.want)
		}
	}
}

func TestClientHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"host", "list"}, {"server", "list"}, {"server", "show"}, {"server", "create"}, {"server", "delete"},
		{"server", "migrate"}, {"migration", "list"}, {"schedule", "explain"}, {"audit"},
	} {
		out := mustRun(t, append(args, "--help")...)
		wantContains(t, out, "Examples:", "--os-cloud", "--format", "clouds.yaml")
	}
	// keel server alone still runs the control plane.
	wantContains(t, mustRun(t, "server", "--help"), "runs keel's control plane", "Available Commands:", "migrate")
}
