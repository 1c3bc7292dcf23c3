package e2e

import (
	"fmt"
	"testing"
	"time"
)

// The cold moves with real processes: a resize confirmed, a cold
// migration reverted, a resize whose source agent is killed while the disk
// moves, and a host evacuated while down whose agent, back, destroys its
// stale guests. Each ends settled (see settledAll).

func (c *cloud) action(id string, body map[string]any, version string) int {
	c.t.Helper()
	return c.rawCall("POST", "/compute/v2.1/servers/"+id+"/action", version, body, nil)
}

func (c *cloud) waitServer(id, status string, timeout time.Duration) map[string]any {
	c.t.Helper()
	var s map[string]any
	c.waitFor(fmt.Sprintf("server %s %s", id, status), timeout, func() bool {
		s = c.server_(id)
		return s["status"] == status
	})
	return s
}

// forceDown marks host's compute service forced down (the fence).
func (c *cloud) forceDown(host string, down bool) {
	c.t.Helper()
	var out struct {
		Services []struct{ ID, Host, Binary string } `json:"services"`
	}
	c.rawCall("GET", "/compute/v2.1/os-services", "compute 2.53", nil, &out)
	for _, s := range out.Services {
		if s.Host == host && s.Binary == "nova-compute" {
			if st := c.rawCall("PUT", "/compute/v2.1/os-services/"+s.ID, "compute 2.53", map[string]any{"forced_down": down}, nil); st != 200 {
				c.t.Fatalf("forcing %s down=%v: %d", host, down, st)
			}
			return
		}
	}
	c.t.Fatalf("no compute service for %s", host)
}

func TestMovesResizeAndColdMigration(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 3)
	a := c.bootAt("a", "1", "h1")
	if st := c.action(a, map[string]any{"resize": map[string]any{"flavorRef": "2"}}, "compute 2.30"); st != 202 {
		t.Fatalf("resize: %d", st)
	}
	s := c.waitServer(a, "VERIFY_RESIZE", 30*time.Second)
	if host, _ := s["OS-EXT-SRV-ATTR:host"].(string); host == "h1" || host == "" {
		t.Fatalf("resized onto %q", host)
	}
	if st := c.action(a, map[string]any{"confirmResize": nil}, "compute 2.30"); st != 204 {
		t.Fatalf("confirmResize: %d", st)
	}
	c.waitServer(a, "ACTIVE", 20*time.Second)
	c.waitMoves(30 * time.Second)
	c.settledAll("h1", "h2", "h3")

	b := c.bootAt("b", "1", "h1")
	if st := c.action(b, map[string]any{"migrate": map[string]any{"host": "h3"}}, "compute 2.56"); st != 202 {
		t.Fatalf("migrate: %d", st)
	}
	c.waitServer(b, "VERIFY_RESIZE", 30*time.Second)
	if st := c.action(b, map[string]any{"revertResize": nil}, "compute 2.30"); st != 202 {
		t.Fatalf("revertResize: %d", st)
	}
	c.waitFor("b back on h1", 20*time.Second, func() bool {
		s := c.server_(b)
		return s["status"] == "ACTIVE" && c.hostOf(b) == "h1"
	})
	c.waitMoves(30 * time.Second)
	c.settledAll("h1", "h2", "h3")
}

// A resize whose source agent is killed while the disk moves: the
// restarted agent reports the move interrupted, the resize rolls back and
// the server runs on its source with its flavor.
func TestMovesResizeSourceKilled(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 2, "libvirt.live_migration_bandwidth=100") // small's 20 GB disk: 200 s
	a := c.bootAt("a", "2", "h1")
	if st := c.action(a, map[string]any{"migrate": nil}, "compute 2.30"); st != 202 {
		t.Fatalf("migrate: %d", st)
	}
	c.waitFor("the disk move", 20*time.Second, func() bool { return c.guests("h1")[a] == "resizing" })
	c.agents["h1"].kill()
	c.startAgent("h1")
	c.waitServer(a, "ACTIVE", 40*time.Second)
	if h := c.hostOf(a); h != "h1" {
		t.Fatalf("after the interrupted move the server is on %s, want h1", h)
	}
	c.waitMoves(30 * time.Second)
	c.settledAll("h1", "h2")
}

// A host is killed and fenced; its servers are evacuated and spread; when
// its agent comes back it destroys the evacuated guests first, and the
// evacuations complete.
func TestMovesEvacuate(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 3)
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, c.bootAt(fmt.Sprintf("e%d", i), "1", "h1"))
	}
	if st := c.action(ids[0], map[string]any{"evacuate": map[string]any{}}, "compute 2.30"); st != 400 {
		t.Fatalf("evacuating from a live host: %d, want 400", st)
	}
	c.agents["h1"].kill()
	c.forceDown("h1", true)
	for _, id := range ids {
		if st := c.action(id, map[string]any{"evacuate": map[string]any{}}, "compute 2.30"); st != 200 {
			t.Fatalf("evacuate %s: %d", id, st)
		}
	}
	per := map[string]int{}
	for _, id := range ids {
		c.waitFor("evacuated "+id, 30*time.Second, func() bool {
			s := c.server_(id)
			return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil && c.hostOf(id) != "h1"
		})
		per[c.hostOf(id)]++
	}
	if per["h2"] != 2 || per["h3"] != 2 {
		t.Fatalf("evacuated 4 servers as %v, want 2 and 2", per)
	}
	for _, id := range ids {
		if g := c.guests("h1")[id]; g != "running" {
			t.Fatalf("the dead host's state file lost guest %s (%q) before its agent came back", id, g)
		}
	}
	c.forceDown("h1", false)
	c.startAgent("h1")
	c.waitMoves(40 * time.Second)
	for _, id := range ids {
		if g, ok := c.guests("h1")[id]; ok {
			t.Fatalf("the returned host still has evacuated guest %s (%s)", id, g)
		}
	}
	c.settledAll("h1", "h2", "h3")
}
