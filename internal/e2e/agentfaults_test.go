package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"keel/internal/testdisk"
)

// The agent's side of issue 10's fault matrix, with real `keel server` and
// `keel agent` processes: reports kept on disk through kills, an abort
// whose source dies, a full disk on an agent, an agent stopped (SIGSTOP)
// or partitioned (in a network namespace, iptables DROP: netns_test.go)
// for longer than the RPC timeout, and corrupt files. Each row ends with settled():
// nothing in a non-final state, every ACTIVE instance's guest on its host
// exactly once and its allocation there only, no guest without its
// instance, no migration-consumer allocation left, and the server's audit
// finds nothing.
//
// The clouds run audits and heartbeats every second, take an agent for
// gone after 4 s without an answer (keel.rpc_timeout), and copy at
// 400 MiB/s (m1.tiny, 512 MiB: 1.3 s; m1.small, 2048 MiB: 5 s).

func faultCloud(t *testing.T, hosts int, extra ...string) *cloud {
	t.Helper()
	c := newCloud(t, faultSets(extra)...)
	c.startFaultHosts(hosts)
	return c
}

// faultSets are the fault clouds' options, then extra.
func faultSets(extra []string) []string {
	return append([]string{"libvirt.live_migration_bandwidth=400", "keel.rpc_timeout=4",
		"DEFAULT.update_resources_interval=1", "DEFAULT.report_interval=1"}, extra...)
}

// startFaultHosts starts the agents h1…hN and makes the fault clouds'
// flavors.
func (c *cloud) startFaultHosts(hosts int) {
	c.t.Helper()
	for i := 1; i <= hosts; i++ {
		c.startAgent(fmt.Sprintf("h%d", i))
	}
	for _, f := range []map[string]any{
		{"name": "m1.tiny", "ram": 512, "vcpus": 1, "disk": 1, "id": "1"},
		{"name": "m1.small", "ram": 2048, "vcpus": 1, "disk": 20, "id": "2"},
	} {
		c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": f}, nil)
	}
}

// agentDir is host's agent data dir.
func (c *cloud) agentDir(host string) string { return filepath.Join(c.dataDir, "agents", host) }

// startBoot asks for a server (on host if not empty) and returns its id
// without waiting for it to be built.
func (c *cloud) startBoot(name, flavor, host string) string {
	c.t.Helper()
	srv := map[string]any{"name": name, "flavorRef": flavor, "networks": "none"}
	if host != "" {
		srv["availability_zone"] = "nova:" + host
	}
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	if st := c.call("POST", "/compute/v2.1/servers", map[string]any{"server": srv}, &out); st != 202 {
		c.t.Fatalf("boot %s: %d", name, st)
	}
	return out.Server.ID
}

// bootAt boots and waits for the server to be ACTIVE.
func (c *cloud) bootAt(name, flavor, host string) string {
	c.t.Helper()
	id := c.startBoot(name, flavor, host)
	c.waitFor(name+" ACTIVE", 20*time.Second, func() bool { return c.server_(id)["status"] == "ACTIVE" })
	return id
}

// signal sends sig to host's agent (SIGSTOP / SIGCONT).
func (c *cloud) signal(host string, sig syscall.Signal) {
	c.t.Helper()
	if err := c.agents[host].cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signalling agent %s: %v", host, err)
	}
}

// guests reads host's fake driver state file: guest UUID → state.
func (c *cloud) guests(host string) map[string]string {
	out := map[string]string{}
	data, err := os.ReadFile(filepath.Join(c.agentDir(host), "guests.json"))
	if err != nil {
		return out
	}
	var st struct {
		Guests []struct{ UUID, State string } `json:"guests"`
	}
	_ = json.Unmarshal(data, &st)
	for _, g := range st.Guests {
		out[g.UUID] = g.State
	}
	return out
}

// reports lists the reports host's agent keeps on disk.
func (c *cloud) reports(host string) []string {
	es, _ := os.ReadDir(filepath.Join(c.agentDir(host), "reports"))
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// rawCall is tryCall with a service and microversion of its own
// ("compute 2.59", "placement 1.28"); an answer that is not JSON leaves
// out as it was.
func (c *cloud) rawCall(method, path, version string, body, out any) int {
	status, data := c.send(method, path, version, body)
	if out != nil && len(data) > 0 {
		_ = json.Unmarshal(data, out)
	}
	return status
}

// allocations returns the providers (by host name) a consumer holds
// resources on.
func (c *cloud) allocations(consumer string, names map[string]string) ([]string, bool) {
	var out struct {
		Allocations map[string]any `json:"allocations"`
	}
	if c.rawCall("GET", "/placement/allocations/"+consumer, "placement 1.28", nil, &out) != 200 {
		return nil, false
	}
	var hosts []string
	for rp := range out.Allocations {
		hosts = append(hosts, names[rp])
	}
	sort.Strings(hosts)
	return hosts, true
}

// problem returns the first way the cloud is not settled, or "".
func (c *cloud) problem(hosts []string) string {
	var rps struct {
		Providers []struct{ UUID, Name string } `json:"resource_providers"`
	}
	if c.rawCall("GET", "/placement/resource_providers", "placement 1.28", nil, &rps) != 200 {
		return "placement did not answer"
	}
	names := map[string]string{}
	for _, p := range rps.Providers {
		names[p.UUID] = p.Name
	}
	var srv struct {
		Servers []map[string]any `json:"servers"`
	}
	if c.tryCall("GET", "/compute/v2.1/servers/detail", nil, &srv) != 200 {
		return "the compute API did not answer"
	}
	where := map[string][]string{} // guest → hosts holding it
	for _, h := range hosts {
		for u := range c.guests(h) {
			where[u] = append(where[u], h)
		}
	}
	known := map[string]bool{}
	for _, s := range srv.Servers {
		id, _ := s["id"].(string)
		known[id] = true
		status, _ := s["status"].(string)
		host, _ := s["OS-EXT-SRV-ATTR:host"].(string)
		if task := s["OS-EXT-STS:task_state"]; task != nil || (status != "ACTIVE" && status != "ERROR") {
			return fmt.Sprintf("server %s is %s (task %v)", id, status, task)
		}
		on, ok := c.allocations(id, names)
		if !ok {
			return "placement did not answer for " + id
		}
		switch status {
		case "ACTIVE":
			if len(where[id]) != 1 || where[id][0] != host {
				return fmt.Sprintf("ACTIVE server %s on %s has its guest on %v", id, host, where[id])
			}
			if st := c.guests(host)[id]; st != "running" {
				return fmt.Sprintf("ACTIVE server %s's guest on %s is %s", id, host, st)
			}
			if len(on) != 1 || on[0] != host {
				return fmt.Sprintf("ACTIVE server %s on %s holds allocations on %v", id, host, on)
			}
		case "ERROR":
			if len(where[id]) != 0 || len(on) != 0 {
				return fmt.Sprintf("ERROR server %s has guests on %v and allocations on %v", id, where[id], on)
			}
		}
	}
	for u, hs := range where {
		if !known[u] {
			return fmt.Sprintf("guest %s on %v belongs to no server", u, hs)
		}
	}
	var migs struct {
		Migrations []struct {
			ID     int64  `json:"id"`
			UUID   string `json:"uuid"`
			Status string `json:"status"`
		} `json:"migrations"`
	}
	if c.rawCall("GET", "/compute/v2.1/os-migrations", "compute 2.59", nil, &migs) != 200 {
		return "os-migrations did not answer"
	}
	for _, m := range migs.Migrations {
		switch m.Status {
		case "completed", "error", "failed", "cancelled", "confirmed", "reverted":
		default:
			return fmt.Sprintf("migration %d is %s", m.ID, m.Status)
		}
		if on, _ := c.allocations(m.UUID, names); len(on) != 0 {
			return fmt.Sprintf("migration %d's consumer still holds %v", m.ID, on)
		}
	}
	for _, h := range hosts {
		if rs := c.reports(h); len(rs) != 0 {
			return fmt.Sprintf("agent %s still keeps reports %v", h, rs)
		}
	}
	if v := c.audit(); len(v) != 0 {
		return fmt.Sprintf("audit: %v", v)
	}
	return ""
}

// settledAll waits until problem finds nothing.
func (c *cloud) settledAll(hosts ...string) {
	c.t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if last = c.problem(hosts); last == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not settled after 30 s: %s", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *cloud) abort(id string, mid int64) {
	c.t.Helper()
	if st := c.call("DELETE", fmt.Sprintf("/compute/v2.1/servers/%s/migrations/%d", id, mid), nil, nil); st != 202 {
		c.t.Fatalf("abort of migration %d: %d", mid, st)
	}
}

// logHas waits for a line containing s in a process's log.
func logHas(p *proc, s string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if data, _ := os.ReadFile(p.log); bytes.Contains(data, []byte(s)) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// exits starts a keel process that must refuse to start and returns its
// log.
func (c *cloud) exits(name string, args ...string) string {
	c.t.Helper()
	p := start(c.t, name, args...)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		c.t.Fatalf("%s started on a corrupt file; want it to refuse", name)
	}
	if p.cmd.ProcessState.ExitCode() == 0 {
		c.t.Fatalf("%s exited 0 on a corrupt file", name)
	}
	data, _ := os.ReadFile(p.log)
	return string(data)
}

// Row 3 (and 5's agent side): the server is killed while spawns run, the
// spawns end with nobody to report to, then every agent is killed too.
// The reports wait on the agents' disks; the restarted agents send them.
// One agent's reports are removed as well (a report lost before it was
// kept): its restart reports the builds from the store, its guests
// running. Every boot ends ACTIVE, nothing held twice.
func TestAgentFaultReportsSurviveKills(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 2, "keel.fake_spawn_seconds=2")
	var ids []string
	for i := 0; i < 6; i++ {
		ids = append(ids, c.startBoot(fmt.Sprintf("vm%d", i), "1", fmt.Sprintf("h%d", 1+i%2)))
	}
	// Every build has reached its agent (its guest is building there)
	// before the server goes: what happens to a boot the server had not
	// cast yet is the conductor's recovery, not this row.
	c.waitFor("every boot cast to its host", 10*time.Second, func() bool {
		h1, h2 := c.guests("h1"), c.guests("h2")
		for _, id := range ids {
			if _, ok := h1[id]; !ok {
				if _, ok := h2[id]; !ok {
					return false
				}
			}
		}
		return true
	})
	c.server.kill()
	c.waitFor("the six reports kept on the agents' disks", 10*time.Second, func() bool {
		return len(c.reports("h1"))+len(c.reports("h2")) == 6
	})
	c.agents["h1"].kill()
	c.agents["h2"].kill()
	if err := os.RemoveAll(filepath.Join(c.agentDir("h2"), "reports")); err != nil {
		t.Fatal(err)
	}
	c.startServer()
	c.startAgent("h1")
	c.startAgent("h2")
	for _, id := range ids {
		c.waitFor("server "+id+" ACTIVE", 20*time.Second, func() bool { return c.server_(id)["status"] == "ACTIVE" })
	}
	c.settledAll("h1", "h2")
}

// Row 4: a copy runs, its source stops answering, the abort is accepted
// (202) but cannot reach it, and the source is killed and restarted: its
// restart reports the copy it no longer runs, the migration ends
// cancelled with the instance on the source, the destination's incoming
// guest is gone and the source's slot is free for the next move.
func TestAgentFaultAbortThenSourceCrash(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 3, "DEFAULT.max_concurrent_live_migrations=1")
	id := c.bootAt("vm", "2", "h1")
	mid := c.migrate(id, "")
	c.waitRunning(mid)
	c.signal("h1", syscall.SIGSTOP)
	c.abort(id, mid)
	time.Sleep(5 * time.Second) // past keel.rpc_timeout: the abort's call to h1 gave up
	if st := c.migrationStatus(mid); st != "running" {
		t.Fatalf("migration %d is %s while its source is stopped, want running", mid, st)
	}
	c.restart("h1") // kill -9 of the stopped agent, then a fresh start
	if st := c.waitMigration(mid, 30*time.Second); st != "cancelled" {
		t.Fatalf("aborted migration %d ended %s, want cancelled", mid, st)
	}
	if host := c.hostOf(id); host != "h1" {
		t.Fatalf("instance on %s after the aborted move, want h1", host)
	}
	c.settledAll("h1", "h2", "h3")
	next := c.migrate(id, "")
	if st := c.waitMigration(next, 30*time.Second); st != "completed" {
		t.Fatalf("the next migration from h1 ended %s, want completed", st)
	}
	c.settledAll("h1", "h2", "h3")
}

// Row 6: an agent's data dir is full. Its spawns fail (ERROR, saying why),
// a move to it fails and one from it cannot start (both rolled back, the
// instance where it was); it is killed, the disk freed, restarted: every
// ACTIVE instance has its guest, nothing is held for the failed ones.
// Needs root (a tmpfs is mounted on the agent's data dir).
func TestAgentFaultFullDisk(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 0)
	disk := testdisk.Mount(t, 256)
	if err := os.MkdirAll(filepath.Dir(c.agentDir("h1")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(disk.Dir, c.agentDir("h1")); err != nil {
		t.Fatal(err)
	}
	c.startAgent("h1")
	c.startAgent("h2")
	a := c.bootAt("a", "1", "h1")
	b := c.bootAt("b", "1", "h2")
	disk.Fill()

	x := c.startBoot("x", "1", "h1")
	c.waitFor("the boot on the full disk to fail", 20*time.Second, func() bool { return c.server_(x)["status"] == "ERROR" })
	if f, _ := c.server_(x)["fault"].(map[string]any); !strings.Contains(fmt.Sprint(f["message"]), "no space left") {
		t.Fatalf("the failed boot's fault %v does not say the disk is full", f)
	}
	for _, m := range []struct{ id, src string }{{b, "h2"}, {a, "h1"}} {
		dest := "h1"
		if m.src == "h1" {
			dest = "h2"
		}
		mid := c.migrate(m.id, dest)
		if st := c.waitMigration(mid, 30*time.Second); st == "completed" {
			t.Fatalf("a move %s→%s with h1's disk full completed", m.src, dest)
		}
		c.waitFor("the instance back on its source", 10*time.Second, func() bool {
			s := c.server_(m.id)
			return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil && c.hostOf(m.id) == m.src
		})
	}
	c.agents["h1"].kill()
	disk.Free()
	c.startAgent("h1")
	c.settledAll("h1", "h2")
	if st := c.server_(a)["status"]; st != "ACTIVE" {
		t.Fatalf("a is %v after the restart", st)
	}
}

// Row 7, the source: it is cut off while the destination prepares, so
// the conductor's live_migration call times out and the migration rolls
// back. Back, the source may receive the late call and refuses it (its
// fence reads the record): no zombie copy, no incoming guest left, and the
// instance moves again. Run with SIGSTOP (the process silent) and with a
// real partition (netns_test.go: iptables DROP on a veth pair, the process
// running on).
func TestAgentFaultSourceStoppedPastRPCTimeout(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 2, "keel.fake_step_seconds=3")
	sourceCutPastRPCTimeout(t, c, func(cut bool) {
		c.signal("h1", map[bool]syscall.Signal{true: syscall.SIGSTOP, false: syscall.SIGCONT}[cut])
	}, true)
}

func TestAgentFaultSourcePartitionedPastRPCTimeout(t *testing.T) {
	t.Parallel()
	c, ns := partitionCloud(t, 2, "h1", "keel.fake_step_seconds=3")
	sourceCutPastRPCTimeout(t, c, func(cut bool) { ns.partition(t, cut) }, false)
}

// sourceCutPastRPCTimeout is row 7's source side; lateCall: the late
// live_migration call must reach the source once it is back (a stopped
// process's socket buffers it; a partitioned connection may be dropped
// by the bus meanwhile, and the call with it).
func sourceCutPastRPCTimeout(t *testing.T, c *cloud, cut func(bool), lateCall bool) {
	id := c.bootAt("vm", "1", "h1")
	mid := c.migrate(id, "h2")
	c.waitStatus(mid, "preparing")
	cut(true)
	if st := c.waitMigration(mid, 30*time.Second); st != "failed" && st != "error" {
		t.Fatalf("migration %d ended %s with its source cut off, want failed", mid, st)
	}
	cut(false)
	refused := logHas(c.agents["h1"], "refusing a copy the migration no longer asks for", 15*time.Second)
	if lateCall && !refused {
		t.Fatal("the source, back, never refused the late live_migration call")
	}
	t.Logf("the late live_migration call reached the source and was refused: %v", refused)
	c.settledAll("h1", "h2")
	if g := c.guests("h1")[id]; g != "running" {
		t.Fatalf("the source guest is %q after the late call, want running (no zombie copy)", g)
	}
	next := c.migrate(id, "h2")
	if st := c.waitMigration(next, 30*time.Second); st != "completed" {
		t.Fatalf("migrating again ended %s, want completed", st)
	}
	c.settledAll("h1", "h2")
}

// Row 7, the destination: it is cut off during pre_live_migration, so the
// prepare and the rollback both time out and the migration fails. Back,
// it finishes the prepare nobody waits for; its incoming guest and busy
// mark go (the late rollback, or the audit), and the instance can move to
// it again. Run with SIGSTOP and with a real partition.
func TestAgentFaultDestinationStoppedPastRPCTimeout(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 2, "keel.fake_step_seconds=3")
	destinationCutPastRPCTimeout(t, c, func(cut bool) {
		c.signal("h2", map[bool]syscall.Signal{true: syscall.SIGSTOP, false: syscall.SIGCONT}[cut])
	})
}

func TestAgentFaultDestinationPartitionedPastRPCTimeout(t *testing.T) {
	t.Parallel()
	c, ns := partitionCloud(t, 2, "h2", "keel.fake_step_seconds=3")
	destinationCutPastRPCTimeout(t, c, func(cut bool) { ns.partition(t, cut) })
}

func destinationCutPastRPCTimeout(t *testing.T, c *cloud, cut func(bool)) {
	id := c.bootAt("vm", "1", "h1")
	mid := c.migrate(id, "h2")
	c.waitStatus(mid, "preparing")
	cut(true)
	if st := c.waitMigration(mid, 30*time.Second); st != "failed" && st != "error" {
		t.Fatalf("migration %d ended %s with its destination cut off, want failed", mid, st)
	}
	cut(false)
	// The agent, back, finishes the prepare it was in (keel.fake_step_seconds)
	// before anything else reaches its guests.
	time.Sleep(4 * time.Second)
	c.waitFor("the destination's incoming guest to go", 30*time.Second, func() bool { _, ok := c.guests("h2")[id]; return !ok })
	c.settledAll("h1", "h2")
	next := c.migrate(id, "h2")
	if st := c.waitMigration(next, 30*time.Second); st != "completed" {
		t.Fatalf("migrating to the destination again ended %s, want completed", st)
	}
	c.settledAll("h1", "h2")
}

// Row 8: guests.json that is valid JSON but no guest state stops the
// agent with an error naming the file and what to do; a guests.json that
// lost a guest starts, the audits report the guest missing for
// lost_guest_timeout, then put its instance in ERROR with a fault and
// release its allocation; the file restored with the guest, the next
// audit makes the instance ACTIVE again with its claim (issue 24 item 4:
// before, the guest came back to an ERROR instance holding nothing);
// identity.json with nobody in it stops the server.
func TestAgentFaultCorruptFiles(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 1, "keel.lost_guest_timeout=3")
	keep := c.bootAt("keep", "1", "h1")
	lost := c.bootAt("lost", "1", "h1")
	c.agents["h1"].kill()
	state := filepath.Join(c.agentDir("h1"), "guests.json")
	saved, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"agent", "--host", "h1", "--data-dir", c.agentDir("h1"),
		"--nats-url", fmt.Sprintf("nats://127.0.0.1:%d", c.natsPort),
		"--nats-credentials", filepath.Join(c.dataDir, "bus-credentials.json")}
	out := c.exits("agent-h1-corrupt", append(args, c.setArgs()...)...)
	for _, want := range []string{state, `no "guests" list`, "move it away"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the agent's refusal does not say %q:\n%s", want, out)
		}
	}

	// The same file without one guest: valid, so the agent starts.
	var st struct {
		Guests []map[string]any `json:"guests"`
	}
	if err := json.Unmarshal(saved, &st); err != nil {
		t.Fatal(err)
	}
	var rest []map[string]any
	for _, g := range st.Guests {
		if g["uuid"] != lost {
			rest = append(rest, g)
		}
	}
	data, _ := json.Marshal(map[string]any{"guests": rest})
	if err := os.WriteFile(state, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c.startAgent("h1")
	c.waitFor("the lost guest's instance in ERROR", 30*time.Second, func() bool { return c.server_(lost)["status"] == "ERROR" })
	f, _ := c.server_(lost)["fault"].(map[string]any)
	msg := fmt.Sprint(f["message"])
	if !strings.Contains(msg, "gone from its host h1") {
		t.Fatalf("the lost instance's fault %v does not say its guest is gone", f)
	}
	// The audits (one a second) missed the guest for lost_guest_timeout
	// (3 s) before anything was released.
	var since, at string
	if _, err := fmt.Sscanf(msg[strings.Index(msg, "since "):], "since %s lost at %s", &since, &at); err != nil {
		t.Fatalf("the lost fault %q does not say since when the guest was missing: %v", msg, err)
	}
	t0, err0 := time.Parse(time.RFC3339, strings.TrimSuffix(since, ","))
	t1, err1 := time.Parse(time.RFC3339, strings.TrimSuffix(at, ");"))
	if err0 != nil || err1 != nil || t1.Sub(t0) < 3*time.Second {
		t.Fatalf("the lost fault %q: missing since %s, lost at %s (%v %v); want lost no sooner than 3 s after the first miss", msg, since, at, err0, err1)
	}
	c.settledAll("h1")
	if s := c.server_(keep)["status"]; s != "ACTIVE" {
		t.Fatalf("the instance that kept its guest is %v", s)
	}

	// The guest shows again (the state file restored): the instance is
	// ACTIVE again and holds its claim (settledAll checks it).
	c.agents["h1"].kill()
	if err := os.WriteFile(state, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	c.startAgent("h1")
	c.waitFor("the found guest's instance ACTIVE again", 30*time.Second, func() bool { return c.server_(lost)["status"] == "ACTIVE" })
	c.settledAll("h1")

	c.server.kill()
	idFile := filepath.Join(c.dataDir, "identity.json")
	if err := os.WriteFile(idFile, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	out = c.exits("server-corrupt", append([]string{"server", "--data-dir", c.dataDir, "--listen", "127.0.0.1:0",
		"--set", "keel.nats_listen=127.0.0.1:0"}, c.setArgs()...)...)
	for _, want := range []string{idFile, "nobody could log in"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the server's refusal does not say %q:\n%s", want, out)
		}
	}
}
