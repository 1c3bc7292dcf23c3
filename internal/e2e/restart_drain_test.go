package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDrainSurvivesDevRestarts is issue 24's item 2 with real processes:
// keel dev with 3 hosts, h02 nearly full, so h03 is the only host with
// room for h01's instance; `keel host drain h01`, and during the copy
// keel dev gets SIGINT (Ctrl-C) and is started again on the same data
// dir — twice, one more time than the move has retries. Each interrupted
// copy is rolled back without counting against the move and without
// excluding h03: the plan ends done, the instance on h03 after one
// attempt, moved exactly once, and the audit is clean. keel dev says, as
// it stops, that the state is kept and the drain goes on.
func TestDrainSurvivesDevRestarts(t *testing.T) {
	t.Parallel()
	c := &cloud{t: t, dataDir: t.TempDir(), agents: map[string]*proc{}}
	sets := []string{
		"--set", "keel.memory_mb=16384", "--set", "DEFAULT.reserved_host_memory_mb=0",
		"--set", "DEFAULT.ram_allocation_ratio=1.0",
		// 8 GiB at 512 MiB/s: a copy of 16 s, long enough to interrupt.
		"--set", "libvirt.live_migration_bandwidth=512",
	}
	startDev := func(round int) {
		t.Helper()
		_ = os.Remove(filepath.Join(c.dataDir, "endpoints.json"))
		c.server = start(t, fmt.Sprintf("dev-%d", round), append([]string{"dev", "--hosts", "3", "--data-dir", c.dataDir,
			"--listen", "127.0.0.1:0"}, sets...)...)
		c.readEndpoints()
		c.waitFor("keel dev's API", 60*time.Second, func() bool {
			c.server.mustRun(t)
			resp, err := http.Get(c.url + "/compute/v2.1/")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == 200
		})
		c.mu.Lock()
		c.token = ""
		c.mu.Unlock()
		c.waitFor("keel dev's 3 hosts up", 60*time.Second, func() bool {
			for _, h := range []string{"h01", "h02", "h03"} {
				if c.hypervisorState(h) != "up" {
					return false
				}
			}
			return true
		})
	}
	startDev(0)

	// h01: one m1.large (8 GiB); h02: 14 of its 16 GiB used; h03 empty.
	big := c.startBoot("big", "4", "h01")
	fill := []string{c.startBoot("f1", "4", "h02"), c.startBoot("f2", "3", "h02"), c.startBoot("f3", "2", "h02")}
	for _, id := range append([]string{big}, fill...) {
		c.waitFor(id+" ACTIVE", 60*time.Second, func() bool { return c.server_(id)["status"] == "ACTIVE" })
	}
	var out struct {
		Plan struct{ ID int64 } `json:"plan"`
	}
	if st := c.call("POST", "/keel/v1/plans", map[string]any{"drain": map[string]any{"hosts": []string{"h01"}}}, &out); st != 202 {
		t.Fatalf("drain h01: %d", st)
	}
	id := out.Plan.ID

	interrupted := map[int64]bool{}
	for round := 1; round <= 2; round++ {
		// The move's copy under way (bytes copied), on a migration not
		// interrupted before.
		var mid int64
		c.waitFor(fmt.Sprintf("copy %d under way", round), 90*time.Second, func() bool {
			c.server.mustRun(t)
			p := c.plan(id)
			// Approved until the executor's first tick saves it running
			// (its first move may start before that save is read).
			if p.State != "" && p.State != "approved" && p.State != "running" {
				t.Fatalf("plan %d is %s (%s) before restart %d: %+v", id, p.State, p.Reason, round, p.Moves)
			}
			for _, mv := range p.Moves {
				if mv.State == "running" && mv.Migration != 0 && !interrupted[mv.Migration] && mv.BytesCopied > 0 {
					mid = mv.Migration
					return true
				}
			}
			return false
		})
		interrupted[mid] = true
		c.server.interrupt(t, 60*time.Second)
		data, _ := os.ReadFile(c.server.log)
		want := fmt.Sprintf("plan %d (drain) running", id)
		if !strings.Contains(string(data), "keel dev: stopped; state kept in "+c.dataDir) || !strings.Contains(string(data), want) {
			t.Errorf("keel dev stopped mid-drain without saying the state is kept and %q is left:\n%s", want, lastLines(string(data), 5))
		}
		t.Logf("restart %d: SIGINT to keel dev while migration %d copied", round, mid)
		startDev(round)
	}

	p := c.waitPlan(id, 180*time.Second)
	if p.State != "done" || len(p.Moves) != 1 {
		t.Fatalf("plan %d ended %s (%s): %+v", id, p.State, p.Reason, p.Moves)
	}
	mv := p.Moves[0]
	if mv.State != "done" || mv.Result != "h03" || mv.Attempts != 1 {
		t.Errorf("move %+v: want done on h03 after 1 attempt (the interrupted ones not counted)", mv)
	}
	if h := c.hostOf(big); h != "h03" {
		t.Errorf("big is on %q, want h03", h)
	}
	if n, _ := c.completedMoves(); n[big] != 1 {
		t.Errorf("big completed %d migrations, want 1", n[big])
	}
	for m := range interrupted {
		if st := c.migrationStatus(m); st == "completed" || st == "running" {
			t.Errorf("interrupted migration %d is %s", m, st)
		}
	}
	c.waitFor("a clean audit", 30*time.Second, func() bool { return len(c.audit()) == 0 })
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
