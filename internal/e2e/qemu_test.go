package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"keel/internal/compute/qemu"
	"keel/internal/store/sqlite"
	"keel/internal/testenv"
)

// The QEMU tests run real guests (keel's 512-byte guest under TCG) on
// agents started with --driver qemu, one migration at a time. Each cloud
// boots its guest while only h1 runs, then starts h2: the scheduler then
// has exactly one destination to choose.

// qemuCloud starts a server and agent h1 with the qemu driver, creates the
// 64 MiB flavor "q64", and kills every QEMU the test leaves behind. It
// fails (never skips) without qemu-system-x86_64.
func qemuCloud(t *testing.T, sets ...string) *cloud {
	t.Helper()
	testenv.External(t, "QEMU (Debian's qemu-system-x86)")
	if _, err := exec.LookPath(qemu.DefaultBinary); err != nil {
		t.Fatalf("%v", qemu.ErrNoQEMU)
	}
	c := newCloud(t, append([]string{"keel.driver=qemu", "DEFAULT.update_resources_interval=2", "DEFAULT.report_interval=1"}, sets...)...)
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join(c.dataDir, "agents", "*", "qemu"))
		for _, d := range dirs {
			qemu.KillAll(d)
		}
	})
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "q64", "ram": 64, "vcpus": 1, "disk": 0, "id": "q64"}}, nil)
	return c
}

// bootGuest boots a server running the guest program (keel_guest
// metadata: idle, fill-N, dirty-N) and waits until it is ACTIVE.
func (c *cloud) bootGuest(name, flavor, program string) string {
	c.t.Helper()
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	body := map[string]any{"server": map[string]any{"name": name, "flavorRef": flavor, "networks": "none",
		"metadata": map[string]string{"keel_guest": program}}}
	if st := c.call("POST", "/compute/v2.1/servers", body, &out); st != 202 {
		c.t.Fatalf("boot %s: %d", name, st)
	}
	c.waitFor("server "+name+" ACTIVE", 30*time.Second, func() bool { return c.server_(out.Server.ID)["status"] == "ACTIVE" })
	return out.Server.ID
}

// heartbeat reads the guest's heartbeat from its memory on host (through
// the observers' QMP socket of its QEMU there).
func (c *cloud) heartbeat(host, id string) (uint32, error) {
	sock, err := qemu.PeekSocket(filepath.Join(c.dataDir, "agents", host, "qemu"), id)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return qemu.ReadHeartbeat(ctx, sock)
}

// rising waits until the guest's heartbeat on host passes from, and
// returns it.
func (c *cloud) rising(host, id string, from uint32) uint32 {
	c.t.Helper()
	var hb uint32
	var err error
	c.waitFor(fmt.Sprintf("the heartbeat of %s on %s to pass %d", id, host, from), 15*time.Second, func() bool {
		hb, err = c.heartbeat(host, id)
		return err == nil && hb > from
	})
	return hb
}

// watchHeartbeat records the last heartbeat read on host until stop is
// closed or the guest is gone there.
func (c *cloud) watchHeartbeat(host, id string, stop <-chan struct{}) func() uint32 {
	var mu sync.Mutex
	var last uint32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			hb, err := c.heartbeat(host, id)
			if err != nil {
				return
			}
			mu.Lock()
			last = hb
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint32 {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// migrationError reads the migration record's error from the server's
// database.
func (c *cloud) migrationError(mid int64) string {
	c.t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(c.dataDir, "keel.db"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer st.Close()
	m, err := st.GetMigration(context.Background(), mid)
	if err != nil {
		c.t.Fatal(err)
	}
	return m.Error
}

// migrationShow returns GET /servers/{id}/migrations/{mid} (2.30), or nil
// once the migration has ended.
func (c *cloud) memoryProcessed(id string, mid int64) float64 {
	var out struct {
		Migration map[string]any `json:"migration"`
	}
	if c.tryCall("GET", fmt.Sprintf("/compute/v2.1/servers/%s/migrations/%d", id, mid), nil, &out) != 200 {
		return -1
	}
	v, _ := out.Migration["memory_processed_bytes"].(float64)
	return v
}

// consistent checks the instance settled ACTIVE on host with its 64 MiB
// counted there only, and that the audit finds nothing.
func (c *cloud) consistent(id, host string) {
	c.t.Helper()
	c.waitFor("the instance to settle on "+host, 20*time.Second, func() bool {
		s := c.server_(id)
		return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil && c.hostOf(id) == host
	})
	c.waitFor("memory to be counted on "+host+" only", 20*time.Second, func() bool {
		used := c.memUsed()
		for h, mb := range used {
			want := 512.0 // reserved_host_memory_mb
			if h == host {
				want += 64
			}
			if mb != want {
				return false
			}
		}
		return true
	})
	var v []string
	c.waitFor("the audit to find no violation", 20*time.Second, func() bool {
		v = c.audit()
		return len(v) == 0
	})
}

// TestQEMULiveMigration moves a running 64 MiB guest between two agents,
// the scheduler choosing the destination, and proves it is the same guest
// still running: the heartbeat read from the destination's memory goes on
// from the last value read on the source. Then a guest that filled 48 MiB
// migrates at 8 and 32 MiB/s (each agent's live_migration_bandwidth) and
// the copy time follows the cap (ideally 6 s and 1.5 s; the bounds leave
// room for a loaded machine).
func TestQEMULiveMigration(t *testing.T) {
	c := qemuCloud(t)
	c.startAgent("h1", "--set", "libvirt.live_migration_bandwidth=8")
	id := c.bootGuest("idle", "q64", "idle")
	before := c.rising("h1", id, 0)
	c.startAgent("h2", "--set", "libvirt.live_migration_bandwidth=32")

	stop := make(chan struct{})
	lastOnSource := c.watchHeartbeat("h1", id, stop)
	mid := c.migrate(id, "")
	if st := c.waitMigration(mid, 60*time.Second); st != "completed" {
		t.Fatalf("migration %d ended %s: %s", mid, st, c.migrationError(mid))
	}
	close(stop)
	last := lastOnSource()
	first, err := c.heartbeat("h2", id)
	if err != nil {
		t.Fatalf("reading the guest on the destination: %v", err)
	}
	if last < before || first < last {
		t.Fatalf("heartbeat went %d (before) → %d (last on h1) → %d (first on h2): not the same guest running on", before, last, first)
	}
	c.rising("h2", id, first)
	t.Logf("heartbeat %d before, %d last on h1, %d first on h2", before, last, first)
	c.consistent(id, "h2")
	c.call("DELETE", "/compute/v2.1/servers/"+id, nil, nil)
	c.waitFor("the guest's QEMU to go", 20*time.Second, func() bool { _, err := c.heartbeat("h2", id); return err != nil })

	// 48 MiB of non-zero pages, copied at each host's cap.
	fill := c.bootGuest("fill", "q64", "fill-48")
	host := c.hostOf(fill)
	c.rising(host, fill, 0)
	took := map[string]time.Duration{}
	for range 2 {
		start := time.Now()
		mid := c.migrate(fill, "")
		if st := c.waitMigration(mid, 60*time.Second); st != "completed" {
			t.Fatalf("migration %d from %s ended %s: %s", mid, host, st, c.migrationError(mid))
		}
		took[host] = time.Since(start)
		next := c.hostOf(fill)
		c.rising(next, fill, 0)
		host = next
	}
	ratio := took["h1"].Seconds() / took["h2"].Seconds()
	t.Logf("48 MiB: %s at 8 MiB/s, %s at 32 MiB/s (ratio %.2f)", took["h1"], took["h2"], ratio)
	if took["h1"] < 5*time.Second || ratio < 2 {
		t.Fatalf("copy times %v do not follow the caps 8 and 32 MiB/s", took)
	}
	c.consistent(fill, host)
}

// TestQEMUDestinationFails migrates to a host whose QEMU gets more RAM
// (qemu_args -m 80): the destination QEMU refuses the stream and exits,
// its stderr becomes the migration's error, and everything rolls back:
// the guest runs on at the source, counted there only.
func TestQEMUDestinationFails(t *testing.T) {
	c := qemuCloud(t)
	c.startAgent("h1")
	id := c.bootGuest("vm", "q64", "idle")
	hb := c.rising("h1", id, 0)
	c.startAgent("h2", "--set", "keel.qemu_args=-m 80")
	mid := c.migrate(id, "")
	st := c.waitMigration(mid, 60*time.Second)
	msg := c.migrationError(mid)
	t.Logf("migration %d: %s: %s", mid, st, msg)
	if st != "error" && st != "failed" {
		t.Fatalf("migration to a mismatched QEMU ended %s", st)
	}
	if !strings.Contains(msg, "mismatch") || !strings.Contains(msg, "qemu-system-x86_64") {
		t.Fatalf("the migration's error does not carry the destination QEMU's stderr: %q", msg)
	}
	c.rising("h1", id, hb)
	c.consistent(id, "h1")
	if n := qemu.KillAll(filepath.Join(c.dataDir, "agents", "h2", "qemu")); n != 0 {
		t.Fatalf("the rollback left %d QEMU on the destination", n)
	}
}

// restartAgent kills host's agent (SIGKILL, as the harness does) and
// starts it again with extra arguments.
func (c *cloud) restartAgent(host string, extra ...string) {
	c.t.Helper()
	c.agents[host].kill()
	c.startAgent(host, extra...)
}

// TestQEMUNeverConverges is the one test with a busy vCPU: a 64 MiB guest
// rewriting 48 MiB forever, copied at 16 MiB/s with a 500 ms downtime
// limit, never converges. The completion timeout (1 s per GiB, counting
// 2 GiB) cancels it: the migration fails, the guest runs on at the source.
// Then the API's force_complete completes one (the source is paused for
// the last pass), and finally live_migration_timeout_action =
// force_complete with post-copy permitted completes one on its own
// (post-copy where userfaultfd works, else the pause).
func TestQEMUNeverConverges(t *testing.T) {
	c := qemuCloud(t, "libvirt.live_migration_bandwidth=16", "libvirt.live_migration_completion_timeout=1")
	c.startAgent("h1")
	id := c.bootGuest("busy", "q64", "dirty-48")
	hb := c.rising("h1", id, 0)
	c.startAgent("h2")

	start := time.Now()
	mid := c.migrate(id, "")
	if st := c.waitMigration(mid, 60*time.Second); st != "failed" && st != "error" {
		t.Fatalf("a migration that cannot converge ended %s: %s", st, c.migrationError(mid))
	}
	msg := c.migrationError(mid)
	t.Logf("timed out after %s: %s", time.Since(start).Round(time.Millisecond), msg)
	if !strings.Contains(msg, "live_migration_completion_timeout") {
		t.Fatalf("the migration's error does not say the completion timeout cancelled it: %q", msg)
	}
	hb = c.rising("h1", id, hb)
	c.consistent(id, "h1")

	// No timeout on h1 now: the API's force_complete finishes the copy.
	c.restartAgent("h1", "--set", "libvirt.live_migration_completion_timeout=0")
	hb = c.rising("h1", id, hb) // adopted, still running
	mid = c.migrate(id, "")
	c.waitFor("the copy to run", 20*time.Second, func() bool { return c.memoryProcessed(id, mid) > 0 })
	if st := c.call("POST", fmt.Sprintf("/compute/v2.1/servers/%s/migrations/%d/action", id, mid), map[string]any{"force_complete": nil}, nil); st != 202 {
		t.Fatalf("force_complete: %d", st)
	}
	if st := c.waitMigration(mid, 60*time.Second); st != "completed" {
		t.Fatalf("force-completed migration ended %s: %s", st, c.migrationError(mid))
	}
	hb = c.rising("h2", id, hb)
	c.consistent(id, "h2")

	// Back to h1, completed by the timeout's force_complete action.
	post := []string{"--set", "libvirt.live_migration_timeout_action=force_complete", "--set", "libvirt.live_migration_permit_post_copy=true"}
	c.restartAgent("h1", post...)
	c.restartAgent("h2", post...)
	mid = c.migrate(id, "")
	if st := c.waitMigration(mid, 60*time.Second); st != "completed" {
		t.Fatalf("migration force-completed by the timeout ended %s: %s", st, c.migrationError(mid))
	}
	c.rising("h1", id, hb)
	c.consistent(id, "h1")
	data, _ := os.ReadFile(c.agents["h2"].log)
	t.Logf("the timeout's force_complete switched to post-copy: %v", strings.Contains(string(data), "forcing completion") && strings.Contains(string(data), "post_copy=true"))
}

// TestQEMUKillSourceAgentMidCopy kills the source agent with SIGKILL while
// QEMU copies a guest (48 MiB filled, 8 MiB/s: about 6 s). QEMU runs on in
// its own session; the restarted agent adopts it, re-attaches to the copy
// and reports its end, and the migration completes consistently.
func TestQEMUKillSourceAgentMidCopy(t *testing.T) {
	c := qemuCloud(t, "libvirt.live_migration_bandwidth=8")
	c.startAgent("h1")
	id := c.bootGuest("vm", "q64", "fill-48")
	hb := c.rising("h1", id, 0)
	c.startAgent("h2")
	mid := c.migrate(id, "")
	c.waitFor("the copy to run", 20*time.Second, func() bool { return c.memoryProcessed(id, mid) > 0 })
	c.agents["h1"].kill()
	time.Sleep(500 * time.Millisecond)
	if st := c.migrationStatus(mid); st != "running" {
		t.Fatalf("migration %d is %s with its source agent dead, want running", mid, st)
	}
	c.startAgent("h1")
	if st := c.waitMigration(mid, 60*time.Second); st != "completed" {
		t.Fatalf("migration %d ended %s: %s", mid, st, c.migrationError(mid))
	}
	data, _ := os.ReadFile(c.agents["h1"].log)
	if !strings.Contains(string(data), "re-attached") {
		t.Errorf("the restarted agent did not say it re-attached to the copy")
	}
	c.rising("h2", id, hb)
	c.consistent(id, "h2")
	if n := qemu.KillAll(filepath.Join(c.dataDir, "agents", "h1", "qemu")); n != 0 {
		t.Fatalf("%d QEMU left on the source after the move", n)
	}
}

// TestQEMUKillDestinationAgentMidCopy kills the destination's agent while
// QEMU copies. The copy itself completes (QEMU runs on), but the source
// cannot confirm the destination holds the guest, so the migration rolls
// back: the source resumes its (postmigrate) guest, and the destination's
// agent, back later, finds the QEMU nobody wants there and its audit
// removes it. One guest runs, counted once. (The source waits 10 s for
// the dead destination's answer, the conductor rpc_timeout for its
// rollback: 5 s here.)
func TestQEMUKillDestinationAgentMidCopy(t *testing.T) {
	c := qemuCloud(t, "libvirt.live_migration_bandwidth=8", "keel.rpc_timeout=5")
	c.startAgent("h1")
	id := c.bootGuest("vm", "q64", "fill-48")
	hb := c.rising("h1", id, 0)
	c.startAgent("h2")
	mid := c.migrate(id, "")
	c.waitFor("the copy to run", 20*time.Second, func() bool { return c.memoryProcessed(id, mid) > 0 })
	c.agents["h2"].kill()
	if st := c.waitMigration(mid, 60*time.Second); st != "failed" && st != "error" {
		t.Fatalf("migration %d to a dead agent ended %s", mid, st)
	}
	t.Logf("migration %d: %s", mid, c.migrationError(mid))
	c.rising("h1", id, hb) // resumed at the source
	c.startAgent("h2")
	c.consistent(id, "h1")
	c.waitFor("the destination's audit to remove the stray QEMU", 30*time.Second, func() bool {
		_, err := c.heartbeat("h2", id)
		return err != nil
	})
	c.rising("h1", id, hb)
}
