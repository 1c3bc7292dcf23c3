package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// crashCloud is a server and three agents whose copies take long enough
// to kill a process mid-copy: live_migration_bandwidth 400 MiB/s, so an
// m1.small (2048 MiB) copies in about 5 s. Audits run every 2 s so an agent
// reconciles soon after a restart; the conductor takes an agent for gone
// after 8 s without an answer (rpc_timeout, 30 s by default: the
// rollback at a killed destination waited that long).
func crashCloud(t *testing.T) (*cloud, string) {
	t.Parallel() // separate processes, ports and data dirs; mostly waiting
	c := newCloud(t, "libvirt.live_migration_bandwidth=400", "DEFAULT.update_resources_interval=2", "DEFAULT.report_interval=1",
		"keel.rpc_timeout=8")
	for i := 1; i <= 3; i++ {
		c.startAgent(fmt.Sprintf("h%d", i))
	}
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.small", "ram": 2048, "vcpus": 1, "disk": 20, "id": "2"}}, nil)
	return c, c.boot("vm", "2")
}

// waitRunning waits until the migration is copying: running, with bytes
// copied and some left.
func (c *cloud) waitRunning(mid int64) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("migration %d to be copying", mid), 20*time.Second, func() bool {
		var out struct {
			Moves []struct {
				ID        int64  `json:"id"`
				Status    string `json:"status"`
				Processed int64  `json:"memory_processed_bytes"`
				Remaining int64  `json:"memory_remaining_bytes"`
			} `json:"moves"`
		}
		if c.tryCall("GET", "/keel/v1/ui/state", nil, &out) != 200 {
			return false
		}
		for _, m := range out.Moves {
			if m.ID == mid {
				return m.Status == "running" && m.Processed > 0 && m.Remaining > 0
			}
		}
		return false
	})
}

// settled checks the guarantees after a crash: the migration ended, the
// instance is ACTIVE on exactly one host which holds its allocation, and
// the audit (after the agents' own audits ran) finds nothing.
func (c *cloud) settled(id string, mid int64, wantStatus string) string {
	c.t.Helper()
	st := c.waitMigration(mid, 60*time.Second)
	if !strings.Contains(wantStatus, st) {
		c.t.Fatalf("migration %d ended %s, want %s", mid, st, wantStatus)
	}
	c.waitFor("the instance to settle", 20*time.Second, func() bool {
		s := c.server_(id)
		return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil
	})
	var v []string
	c.waitFor("the audit to find no violation", 20*time.Second, func() bool {
		v = c.audit()
		return len(v) == 0
	})
	return c.hostOf(id)
}

func TestKillSourceAgentMidCopy(t *testing.T) {
	c, id := crashCloud(t)
	src := c.hostOf(id)
	mid := c.migrate(id, "")
	c.waitRunning(mid)
	c.agents[src].kill()
	c.startAgent(src) // its restart reports the copy it lost
	if host := c.settled(id, mid, "failed"); host != src {
		t.Fatalf("after the failed move the instance is on %s, want the source %s", host, src)
	}
}

func TestKillDestinationAgentMidCopy(t *testing.T) {
	c, id := crashCloud(t)
	src := c.hostOf(id)
	mid := c.migrate(id, "")
	c.waitRunning(mid)
	var dst string
	var out struct {
		Migrations []struct {
			ID   int64  `json:"id"`
			Dest string `json:"dest_compute"`
		} `json:"migrations"`
	}
	c.call("GET", "/compute/v2.1/os-migrations", nil, &out)
	for _, m := range out.Migrations {
		if m.ID == mid {
			dst = m.Dest
		}
	}
	c.agents[dst].kill()
	// The copy ends without a destination: the migration rolls back. The
	// destination comes back later and its audit removes the incoming
	// guest nobody brings any more.
	if host := c.settled(id, mid, "failed error"); host != src {
		t.Fatalf("instance on %s after the destination died, want the source %s", host, src)
	}
	c.startAgent(dst)
	c.waitFor("the audit to find no violation after the destination's return", 20*time.Second, func() bool { return len(c.audit()) == 0 })
	// The returning destination's audit removed the incoming guest nobody
	// brings any more, and said so.
	c.waitFor("the stray guest in keel_audit_drift_total", 20*time.Second, func() bool {
		return c.metric(`keel_audit_drift_total{kind="stray"}`) >= 1
	})
}

func TestKillServerMidCopy(t *testing.T) {
	c, id := crashCloud(t)
	src := c.hostOf(id)
	mid := c.migrate(id, "")
	c.waitRunning(mid)
	c.server.kill()
	c.startServer() // recovery waits for the copy; the source's report reaches the new server
	if host := c.settled(id, mid, "completed"); host == src {
		t.Fatalf("instance still on the source %s after the server's restart", host)
	}
}
