package e2e

import (
	"fmt"
	"testing"
	"time"
)

// The kill -9 matrix: the server, the source agent or the destination
// agent killed while a live migration is queued, preparing, copying
// (crash_test.go) or in its post step, then restarted. Every migration
// ends completed or rolled back, the instance runs on exactly one host
// with its allocation there only, and the audit finds nothing.
//
// The fake hypervisor takes 3 s for pre_live_migration and for
// post_live_migration_at_destination and copies at 400 MiB/s (an
// m1.small in about 5 s); the conductor takes an agent for gone after 8 s
// without an answer; one migration at a time per source.

func matrixCloud(t *testing.T) *cloud {
	if testing.Short() {
		t.Skip("kill -9 matrix skipped in -short mode")
	}
	c := newCloud(t, "libvirt.live_migration_bandwidth=400", "keel.fake_step_seconds=3", "keel.rpc_timeout=8",
		"DEFAULT.max_concurrent_live_migrations=1", "DEFAULT.update_resources_interval=2", "DEFAULT.report_interval=1")
	for i := 1; i <= 3; i++ {
		c.startAgent(fmt.Sprintf("h%d", i))
	}
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.small", "ram": 2048, "vcpus": 1, "disk": 20, "id": "2"}}, nil)
	return c
}

// bootOn boots an m1.small on a named host (admin's zone:host).
func (c *cloud) bootOn(name, host string) string {
	c.t.Helper()
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	if st := c.call("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": name, "flavorRef": "2", "networks": "none", "availability_zone": "nova:" + host}}, &out); st != 202 {
		c.t.Fatalf("boot %s on %s: %d", name, host, st)
	}
	c.waitFor(name+" ACTIVE", 20*time.Second, func() bool { return c.server_(out.Server.ID)["status"] == "ACTIVE" })
	return out.Server.ID
}

// migrationOf returns a migration's status and destination.
func (c *cloud) migrationOf(mid int64) (status, dest string) {
	var out struct {
		Migrations []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
			Dest   string `json:"dest_compute"`
		} `json:"migrations"`
	}
	c.tryCall("GET", "/compute/v2.1/os-migrations", nil, &out)
	for _, m := range out.Migrations {
		if m.ID == mid {
			return m.Status, m.Dest
		}
	}
	return "", ""
}

func (c *cloud) waitStatus(mid int64, status string) string {
	c.t.Helper()
	var dest string
	c.waitFor(fmt.Sprintf("migration %d %s", mid, status), 30*time.Second, func() bool {
		var st string
		st, dest = c.migrationOf(mid)
		return st == status
	})
	return dest
}

// waitPost waits until the copy is over and the post steps run: the
// migration's phase (GET /keel/v1/ui/state) is past the copy. The copy's
// last progress report (nothing remaining) comes before the source has
// checked the destination and reported the copy done: a kill in between
// is a kill during the copy, which rolls the move back.
func (c *cloud) waitPost(mid int64) {
	c.t.Helper()
	var phase string
	c.waitFor(fmt.Sprintf("migration %d to reach its post step", mid), 30*time.Second, func() bool {
		var out struct {
			Moves []struct {
				ID    int64  `json:"id"`
				Phase string `json:"phase"`
			} `json:"moves"`
		}
		if c.tryCall("GET", "/keel/v1/ui/state", nil, &out) != 200 {
			return false
		}
		for _, m := range out.Moves {
			if m.ID == mid {
				phase = m.Phase
			}
		}
		switch phase {
		case "post-source", "post-dest":
			return true
		case "finish", "done", "rollback-dest", "revert":
			c.t.Fatalf("migration %d is in phase %s: its post steps were missed", mid, phase)
		}
		return false
	})
}

// restart kills a process (server, or an agent by host) and starts it
// again.
func (c *cloud) restart(who string) {
	c.t.Helper()
	if who == "server" {
		c.server.kill()
		c.startServer()
		return
	}
	c.agents[who].kill()
	c.startAgent(who)
}

// killAndLater kills now and restarts after the migration had time to
// notice, which is what happens when a process stays down for a while.
func (c *cloud) killAndLater(who string, after time.Duration) {
	c.t.Helper()
	if who == "server" {
		c.server.kill()
		time.Sleep(after)
		c.startServer()
		return
	}
	c.agents[who].kill()
	time.Sleep(after)
	c.startAgent(who)
}

func TestKillMatrixQueued(t *testing.T) {
	t.Parallel()
	for _, who := range []string{"server", "source", "destination"} {
		t.Run(who, func(t *testing.T) {
			t.Parallel() // separate processes, ports and data dirs; mostly waiting
			c := matrixCloud(t)
			a, b := c.bootOn("a", "h1"), c.bootOn("b", "h1")
			ma := c.migrate(a, "")
			c.waitStatus(ma, "running")
			mb := c.migrate(b, "")
			destB := c.waitStatus(mb, "queued")
			switch who {
			case "server":
				c.restart("server")
				c.settled(b, mb, "error") // the queue died with the server
				c.settled(a, ma, "completed")
			case "source":
				c.restart("h1") // a's copy is lost: a fails, b runs
				c.settled(a, ma, "failed")
				c.settled(b, mb, "completed")
			case "destination":
				c.killAndLater(destB, 12*time.Second) // b reaches its dead destination
				c.settled(a, ma, "completed failed")
				if host := c.settled(b, mb, "failed error"); host != "h1" {
					t.Fatalf("b on %s, want h1", host)
				}
			}
		})
	}
}

func TestKillMatrixPreparing(t *testing.T) {
	t.Parallel()
	for _, who := range []string{"server", "source", "destination"} {
		t.Run(who, func(t *testing.T) {
			t.Parallel() // separate processes, ports and data dirs; mostly waiting
			c := matrixCloud(t)
			a := c.bootOn("a", "h1")
			ma := c.migrate(a, "")
			dest := c.waitStatus(ma, "preparing")
			time.Sleep(time.Second) // inside the 3 s pre_live_migration
			// On a loaded machine the kill may land just after the 3 s
			// step: then the copy has begun and the move may complete. The
			// guarantee holds either way: completed on the destination, or
			// rolled back on the source.
			var status string
			switch who {
			case "server":
				c.restart("server")
				status = "error completed"
			case "source":
				// Down longer than rpc_timeout: the copy cannot start.
				c.killAndLater("h1", 12*time.Second)
				status = "failed"
			case "destination":
				c.killAndLater(dest, 10*time.Second)
				status = "failed"
			}
			host := c.settled(a, ma, status)
			if st, _ := c.migrationOf(ma); (st == "completed") != (host == dest) || (st != "completed" && host != "h1") {
				t.Fatalf("migration %s with the instance on %s (source h1, destination %s)", st, host, dest)
			}
		})
	}
}

func TestKillMatrixPost(t *testing.T) {
	t.Parallel()
	for _, who := range []string{"server", "source", "destination"} {
		t.Run(who, func(t *testing.T) {
			t.Parallel() // separate processes, ports and data dirs; mostly waiting
			c := matrixCloud(t)
			a := c.bootOn("a", "h1")
			ma := c.migrate(a, "")
			_, dest := c.migrationOf(ma)
			c.waitPost(ma)
			var host string
			switch who {
			case "server":
				c.restart("server")
				host = c.settled(a, ma, "completed")
			case "source":
				// Killed after the copy: either its post step was done (the
				// migration completes) or it never answers (error, with the
				// instance on the destination); its audit then removes the
				// copy it still holds.
				c.restart("h1")
				host = c.settled(a, ma, "completed error")
			case "destination":
				// The post step never answers: the migration ends in error
				// with the instance settled on the destination, whose
				// audit finishes the arrival when it is back.
				c.killAndLater(dest, 10*time.Second)
				host = c.settled(a, ma, "error completed")
			}
			if host != dest {
				t.Fatalf("instance on %s after the copy completed, want the destination %s", host, dest)
			}
		})
	}
}
