//go:build libvirt

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"keel/internal/compute/libvirt"
	"keel/internal/compute/libvirt/lvhost"
	"keel/internal/compute/qemu/guest"
)

// The libvirt tests (build tag libvirt; tests/libvirt.sh runs them) drive
// a server and agents as processes with --driver libvirt, each agent on a
// libvirt daemon of its own (lvhost: namespaces the test creates, torn
// down by PID). KEEL_LIBVIRT_FULL=1 (tests/libvirt.sh --full) adds the
// lifecycle actions through the API and an evacuation to the slice.

// libvirtCloud starts the daemons h1 and h2 and a server whose agents use
// them; it fails naming a missing prerequisite.
func libvirtCloud(t *testing.T, sets ...string) (*cloud, *lvhost.Cluster) {
	t.Helper()
	if err := lvhost.Check(); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "keel-lv-")
	if err != nil {
		t.Fatal(err)
	}
	lc, err := lvhost.Start(context.Background(), lvhost.Options{Dir: dir, Hosts: []string{"h1", "h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lc.Stop(); err != nil {
			t.Errorf("tearing down the libvirt daemons: %v", err)
		}
		os.RemoveAll(dir)
	})
	uri := "qemu+unix:///system?socket=" + filepath.Join(dir, "{host}", "run", "libvirt-sock")
	c := newCloud(t, append([]string{"keel.driver=libvirt", "libvirt.connection_uri=" + uri,
		"DEFAULT.update_resources_interval=2", "DEFAULT.report_interval=1"}, sets...)...)
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "q64", "ram": 64, "vcpus": 1, "disk": 0, "id": "q64"}}, nil)
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "q96", "ram": 96, "vcpus": 1, "disk": 0, "id": "q96"}}, nil)
	return c, lc
}

// lvHeartbeat reads the guest's heartbeat from its domain on host.
func lvHeartbeat(lc *lvhost.Cluster, host, id string) (uint32, error) {
	return libvirt.ReadHeartbeat(lc.Host(host).URI(), id)
}

// lvRising waits until the guest's heartbeat on host passes from.
func (c *cloud) lvRising(lc *lvhost.Cluster, host, id string, from uint32) uint32 {
	c.t.Helper()
	var hb uint32
	var err error
	c.waitFor(fmt.Sprintf("the heartbeat of %s on %s to pass %d", id, host, from), 30*time.Second, func() bool {
		hb, err = lvHeartbeat(lc, host, id)
		return err == nil && hb > from
	})
	return hb
}

// lvGone checks the guest has no domain on host.
func (c *cloud) lvGone(lc *lvhost.Cluster, host, id string) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("no domain of %s on %s", id, host), 30*time.Second, func() bool {
		_, err := lvHeartbeat(lc, host, id)
		return err != nil && strings.Contains(err.Error(), "no domain")
	})
}

// auditClean waits until the server's audit finds nothing.
func (c *cloud) auditClean(step string) {
	c.t.Helper()
	var v []string
	c.waitFor("the audit to be clean after "+step, 30*time.Second, func() bool {
		v = c.audit()
		return len(v) == 0
	})
}

var downtimeRE = regexp.MustCompile(`libvirt migration completed"? .*? migration=(\d+) .*downtime_ms=(\d+)`)

// downtime reads migration mid's downtime from the source agent's log
// (libvirt's job statistics, logged when the copy completes).
func (c *cloud) downtime(host string, mid int64) time.Duration {
	data, _ := os.ReadFile(c.agents[host].log)
	for _, m := range downtimeRE.FindAllStringSubmatch(string(data), -1) {
		if m[1] == strconv.FormatInt(mid, 10) {
			ms, _ := strconv.Atoi(m[2])
			return time.Duration(ms) * time.Millisecond
		}
	}
	return -1
}

// TestLibvirtSlice is the representative slice tests/libvirt.sh runs,
// ending with its one summary line: a guest live-migrated h1->h2 (its
// heartbeat rising there, its domain gone from h1), a copy aborted
// mid-way (the guest runs on at its source), one force-completed, a cold
// migration (the disk's content checked on the destination), the source
// agent killed mid-copy (the restarted agent follows the job libvirtd
// kept running), and a libvirtd restarted under a running guest (none
// lost), with the audit clean after every step.
func TestLibvirtSlice(t *testing.T) {
	c, lc := libvirtCloud(t)
	var summary []string
	c.startAgent("h1")
	id := c.bootGuest("vm", "q64", "fill-32")
	hb := c.lvRising(lc, "h1", id, 0)
	c.startAgent("h2")
	c.auditClean("boot")

	// Live h1 -> h2, unlimited bandwidth: wall time from the API's
	// request to completed, downtime from libvirt's job statistics.
	start := time.Now()
	mid := c.migrate(id, "")
	if st := c.waitMigration(mid, 120*time.Second); st != "completed" {
		t.Fatalf("live migration %d ended %s: %s", mid, st, c.migrationError(mid))
	}
	wall := time.Since(start)
	hb = c.lvRising(lc, "h2", id, hb)
	c.lvGone(lc, "h1", id)
	c.consistent(id, "h2")
	c.auditClean("live migration")
	down := c.downtime("h1", mid)
	summary = append(summary, fmt.Sprintf("live h1->h2 %.1f s downtime %d ms", wall.Seconds(), down.Milliseconds()))
	t.Logf("live h1->h2: %s wall, %s downtime", wall.Round(time.Millisecond), down)

	// Abort mid-copy: h2's copies are capped at 2 MiB/s.
	c.restartAgent("h2", "--set", "libvirt.live_migration_bandwidth=2")
	mid = c.migrate(id, "")
	c.waitFor("the copy to run", 60*time.Second, func() bool { return c.memoryProcessed(id, mid) > 0 })
	if st := c.call("DELETE", fmt.Sprintf("/compute/v2.1/servers/%s/migrations/%d", id, mid), nil, nil); st != 202 {
		t.Fatalf("abort: %d", st)
	}
	if st := c.waitMigration(mid, 60*time.Second); st != "cancelled" && st != "failed" && st != "error" {
		t.Fatalf("aborted migration %d ended %s", mid, st)
	}
	t.Logf("aborted: %s", c.migrationError(mid))
	hb = c.lvRising(lc, "h2", id, hb)
	c.lvGone(lc, "h1", id)
	c.consistent(id, "h2")
	c.auditClean("abort")
	summary = append(summary, "abort ok")

	// Force-complete: the source is paused so the copy completes.
	mid = c.migrate(id, "")
	c.waitFor("the copy to run", 60*time.Second, func() bool { return c.memoryProcessed(id, mid) > 0 })
	if st := c.call("POST", fmt.Sprintf("/compute/v2.1/servers/%s/migrations/%d/action", id, mid), map[string]any{"force_complete": nil}, nil); st != 202 {
		t.Fatalf("force_complete: %d", st)
	}
	if st := c.waitMigration(mid, 120*time.Second); st != "completed" {
		t.Fatalf("force-completed migration %d ended %s: %s", mid, st, c.migrationError(mid))
	}
	hb = c.lvRising(lc, "h1", id, hb) // arrived running, not paused
	c.lvGone(lc, "h2", id)
	c.consistent(id, "h1")
	c.auditClean("force-complete")
	summary = append(summary, "force-complete ok")

	// Cold migration with a resize to q96: powered off, the disk copied by
	// keel, started on h2 with 96 MiB.
	if st := c.rawCall("POST", "/compute/v2.1/servers/"+id+"/action", "compute 2.56", map[string]any{"resize": map[string]any{"flavorRef": "q96"}}, nil); st != 202 {
		t.Fatalf("resize: %d", st)
	}
	c.waitFor("VERIFY_RESIZE", 120*time.Second, func() bool { return c.server_(id)["status"] == "VERIFY_RESIZE" })
	if h := c.hostOf(id); h != "h2" {
		t.Fatalf("resized onto %s, want h2", h)
	}
	disk, err := os.ReadFile(filepath.Join(c.dataDir, "agents", "h2", "libvirt", id, "disk.img"))
	if want := (guest.Spec{Mode: guest.Fill, MiB: 32}).Image(); err != nil || !bytes.Equal(disk, want) {
		t.Fatalf("the disk on h2 (%d bytes, %v) is not the guest's", len(disk), err)
	}
	c.lvRising(lc, "h2", id, 0)
	if st := c.rawCall("POST", "/compute/v2.1/servers/"+id+"/action", "compute 2.30", map[string]any{"confirmResize": nil}, nil); st != 204 && st != 202 {
		t.Fatalf("confirm: %d", st)
	}
	c.waitFor("ACTIVE on h2", 60*time.Second, func() bool {
		s := c.server_(id)
		return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil
	})
	c.lvGone(lc, "h1", id)
	if fileExists(filepath.Join(c.dataDir, "agents", "h1", "libvirt", id)) {
		t.Fatal("the confirmed resize left the guest's directory on h1")
	}
	c.auditClean("cold migration")
	summary = append(summary, "cold ok")

	// Agent killed mid-copy: h2 copies at 2 MiB/s; its agent is killed
	// while libvirtd copies, and started again it follows the job to the
	// end.
	hb = c.lvRising(lc, "h2", id, 0)
	mid = c.migrate(id, "")
	c.waitFor("the copy to run", 60*time.Second, func() bool { return c.memoryProcessed(id, mid) > 0 })
	c.agents["h2"].kill()
	c.startAgent("h2", "--set", "libvirt.live_migration_bandwidth=2")
	if st := c.waitMigration(mid, 120*time.Second); st != "completed" {
		t.Fatalf("migration %d with its source agent killed ended %s: %s", mid, st, c.migrationError(mid))
	}
	if data, _ := os.ReadFile(c.agents["h2"].log); !strings.Contains(string(data), "re-attached") {
		t.Fatal("the restarted agent did not re-attach to the copy")
	}
	hb = c.lvRising(lc, "h1", id, hb)
	c.lvGone(lc, "h2", id)
	c.auditClean("agent kill")
	summary = append(summary, "agent-kill ok")

	// libvirtd restarted under a running guest: QEMU runs on, the daemon
	// finds it, the agent reconnects; two audits later nothing was lost.
	second := c.bootGuest("vm2", "q64", "idle")
	host2 := c.hostOf(second)
	hb2 := c.lvRising(lc, host2, second, 0)
	if err := lc.Restart(context.Background(), "h1"); err != nil {
		t.Fatal(err)
	}
	hb = c.lvRising(lc, "h1", id, hb)
	c.lvRising(lc, host2, second, hb2)
	time.Sleep(5 * time.Second) // two periodic audits (update_resources_interval=2)
	for _, s := range []string{id, second} {
		if st := c.server_(s)["status"]; st != "ACTIVE" {
			t.Fatalf("server %s is %v after libvirtd restarted", s, st)
		}
	}
	c.auditClean("libvirtd restart")
	summary = append(summary, "libvirtd-restart ok")

	if os.Getenv("KEEL_LIBVIRT_FULL") == "1" {
		summary = append(summary, c.libvirtFull(t, lc, second)...)
	}
	summary = append(summary, "audit clean")
	fmt.Println("libvirt: " + strings.Join(summary, " | "))
}

// libvirtFull is the rest of the full set: every lifecycle action through
// the API, and the evacuation of a host whose agent is killed.
func (c *cloud) libvirtFull(t *testing.T, lc *lvhost.Cluster, id string) []string {
	host := c.hostOf(id)
	for _, a := range []struct {
		body   map[string]any
		status string
	}{
		{map[string]any{"pause": nil}, "PAUSED"}, {map[string]any{"unpause": nil}, "ACTIVE"},
		{map[string]any{"suspend": nil}, "SUSPENDED"}, {map[string]any{"resume": nil}, "ACTIVE"},
		{map[string]any{"os-stop": nil}, "SHUTOFF"}, {map[string]any{"os-start": nil}, "ACTIVE"},
		{map[string]any{"reboot": map[string]any{"type": "SOFT"}}, "ACTIVE"}, {map[string]any{"reboot": map[string]any{"type": "HARD"}}, "ACTIVE"},
		{map[string]any{"rescue": map[string]any{}}, "RESCUE"}, {map[string]any{"unrescue": nil}, "ACTIVE"},
	} {
		if st := c.rawCall("POST", "/compute/v2.1/servers/"+id+"/action", "compute 2.30", a.body, nil); st != 202 && st != 200 {
			t.Fatalf("%v: %d", a.body, st)
		}
		c.waitFor(fmt.Sprintf("%v to end %s", a.body, a.status), 60*time.Second, func() bool {
			s := c.server_(id)
			return s["status"] == a.status && s["OS-EXT-STS:task_state"] == nil
		})
		c.auditClean(fmt.Sprint(a.body))
	}
	c.lvRising(lc, host, id, 0)
	// Evacuation: the host's agent is killed and the host forced down.
	other := map[string]string{"h1": "h2", "h2": "h1"}[host]
	c.agents[host].kill()
	c.waitFor(host+" down", 60*time.Second, func() bool {
		var out struct {
			Services []map[string]any `json:"services"`
		}
		c.rawCall("GET", "/compute/v2.1/os-services", "compute 2.30", nil, &out)
		for _, s := range out.Services {
			if s["host"] == host && s["state"] == "down" {
				return true
			}
		}
		return false
	})
	if st := c.rawCall("POST", "/compute/v2.1/servers/"+id+"/action", "compute 2.30", map[string]any{"evacuate": map[string]any{}}, nil); st != 200 && st != 202 {
		t.Fatalf("evacuate: %d", st)
	}
	c.waitFor("the evacuation", 120*time.Second, func() bool {
		s := c.server_(id)
		return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil && c.hostOf(id) == other
	})
	c.lvRising(lc, other, id, 0)
	c.startAgent(host)
	c.lvGone(lc, host, id) // the returning agent destroys the evacuated guest
	c.auditClean("evacuation")
	return []string{"lifecycle ok", "evacuate ok"}
}
