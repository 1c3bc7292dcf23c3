package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestReplicaOwnershipOnPostgres: two replicas on one PostgreSQL and one
// nats-server, each driving a live migration through a 6 s
// pre_live_migration. Replica A is killed with SIGKILL while its
// migration prepares; replica C starts meanwhile. B keeps driving its own
// migration to completion (C, starting, leaves it alone though it is still
// preparing), and once A's heartbeat is older than service_down_time (6 s)
// one of B and C takes A's migration over and rolls it back: it ends in error with the
// instance back on its source, and the audit is clean on B and C.
func TestReplicaOwnershipOnPostgres(t *testing.T) {
	t.Parallel()
	sets := []string{"DEFAULT.update_resources_interval=3600", "keel.fake_step_seconds=6", "keel.fake_spawn_seconds=0",
		"DEFAULT.service_down_time=6", "DEFAULT.report_interval=1"}
	sc := startScaleCloud(t, 2, 1, 2, sets...)
	a, b := sc.replicas[0], sc.replicas[1]
	a.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "one", "ram": 512, "vcpus": 1, "disk": 1, "id": "1"}}, nil)
	vm1, vm2 := a.boot("vm1", "1"), b.boot("vm2", "1")
	src1, src2 := b.hostOf(vm1), b.hostOf(vm2)

	mB := b.migrate(vm1, "")
	mA := a.migrate(vm2, "")
	time.Sleep(time.Second) // both are in their pre_live_migration step
	a.proc.kill()
	killed := time.Now()
	common := []string{"--nats-url", sc.nats.URLs(), "--nats-credentials", sc.nats.credsFile, "--set", "keel.db=" + sc.dbURL}
	for _, s := range sets {
		common = append(common, "--set", s)
	}
	c := startReplica(t, "replica3", a.dataDir, common...)
	if st := b.migrationStatus(mB); st != "preparing" {
		t.Logf("B's migration is %q once C serves (the check below still holds; it is sharpest while preparing)", st)
	}

	var stA, stB string
	var tookA time.Duration
	b.waitFor("both migrations to end", 60*time.Second, func() bool {
		if stA == "" {
			if st := b.migrationStatus(mA); st == "error" || st == "completed" || st == "failed" || st == "cancelled" {
				stA, tookA = st, time.Since(killed)
			}
		}
		if st := b.migrationStatus(mB); st == "error" || st == "completed" || st == "failed" || st == "cancelled" {
			stB = st
		}
		return stA != "" && stB != ""
	})
	if stB != "completed" {
		t.Fatalf("migration %d driven by the live replica B ended %s, want completed (C must leave it alone)", mB, stB)
	}
	if stA != "error" {
		t.Fatalf("migration %d of the killed replica A ended %s, want error (rolled back by the replica taking it over)", mA, stA)
	}
	t.Logf("A's migration rolled back %.1f s after A was killed (service_down_time 6 s)", tookA.Seconds())
	b.waitSettled(vm1)
	b.waitSettled(vm2)
	if h := c.hostOf(vm1); h == src1 {
		t.Fatalf("vm1 still on %s after its completed migration", h)
	}
	if h := c.hostOf(vm2); h != src2 {
		t.Fatalf("vm2 on %s after its rolled-back migration, want its source %s", h, src2)
	}
	// A's migration is taken over by exactly one of the live replicas (B or
	// C, whichever sweeps first); B's own is resumed by nobody.
	overA := fmt.Sprintf("\"took flow over\" flow=migration key=migration/%d ", mA)
	if n := countInLogs(overA, b.proc, c.proc); n != 1 {
		t.Fatalf("A's migration taken over %d times by B and C, want exactly 1", n)
	}
	for _, text := range []string{fmt.Sprintf("\"took flow over\" flow=migration key=migration/%d ", mB), fmt.Sprintf("msg=resuming flow=migration key=migration/%d ", mB)} {
		if n := countInLogs(text, b.proc, c.proc); n != 0 {
			t.Fatalf("B's migration: %d log lines %s, want none (B is alive and drives it)", n, text)
		}
	}
	for _, r := range []*replica{b, c} {
		if v := r.audit(); len(v) != 0 {
			t.Fatalf("audit on %s: %s", r.proc.name, strings.Join(v, "\n"))
		}
	}
}
