package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// kill -9 at each step of the cold moves (issue 11), with real processes:
// a resize or cold migration from h1 to h2 whose server, source agent or
// destination agent is killed while the move is at one step, then started
// again (at once, or after the conductor took it for gone). Every row ends
// with the move either done (confirmed: the server on h2 with its new
// flavor) or undone (reverted or rolled back: on h1 with its old one), the
// migration in a final status, and the cloud settled (settledAll: nothing
// in a non-final state, each guest once on its host, allocations there
// only, no migration consumer left, audit clean).
//
// The fake driver takes fake_step_seconds (2 s) for prep_resize,
// finish_resize, confirm_resize and finish_revert_resize, and moves a
// 1 GB disk in about 5 s, so each step is a window a kill can hit.

// moveKill is one row: which move, the os-migrations status at which the
// process is killed, what the user answers at VERIFY_RESIZE, who is
// killed, and how long it stays down.
type moveKill struct {
	move   string // "resize" or "migrate"
	at     string // pre-migrating, migrating, post-migrating, finished, confirming, reverting
	answer string // "confirm" or "revert"
	who    string // "server", "source" or "dest"
	down   time.Duration
}

func (k moveKill) name() string {
	return fmt.Sprintf("%s/%s/%s/%s/down%s", k.move, k.at, k.answer, k.who, k.down)
}

// moveKillRows is the full matrix: every step × every process, resizes
// answered as the step needs (confirming needs a confirm, reverting a
// revert), cold migrations for the disk move, and a long outage for each
// agent step.
func moveKillRows() []moveKill {
	var rows []moveKill
	for _, at := range []string{"pre-migrating", "migrating", "post-migrating", "finished", "confirming", "reverting"} {
		answer := "confirm"
		if at == "reverting" {
			answer = "revert"
		}
		for _, who := range []string{"server", "source", "dest"} {
			rows = append(rows, moveKill{"resize", at, answer, who, 0})
		}
	}
	for _, who := range []string{"server", "source", "dest"} {
		rows = append(rows, moveKill{"migrate", "migrating", "revert", who, 0})
	}
	for _, at := range []string{"pre-migrating", "post-migrating", "confirming"} {
		rows = append(rows, moveKill{"resize", at, "confirm", "dest", 6 * time.Second})
		rows = append(rows, moveKill{"resize", at, "confirm", "source", 6 * time.Second})
	}
	return rows
}

// moveKillDefault is the default run's slice: one row per process, each
// at a different step.
var moveKillDefault = []moveKill{
	{"resize", "pre-migrating", "confirm", "dest", 0},
	{"migrate", "migrating", "revert", "server", 0},
	{"resize", "post-migrating", "confirm", "server", 0},
	{"resize", "confirming", "confirm", "source", 0},
	{"resize", "reverting", "revert", "dest", 0},
}

func TestMovesKilledAtEachStep(t *testing.T) {
	t.Parallel()
	rows := moveKillDefault
	if faultRounds > 1 {
		rows = moveKillRows()
	}
	for _, k := range rows {
		t.Run(k.name(), func(t *testing.T) {
			t.Parallel()
			runMoveKill(t, k)
		})
	}
}

// coldMigration returns the status of the instance's newest migration
// of a cold-move type, and its id (0 if none).
func (c *cloud) coldMigration(id string) (int64, string) {
	return c.instanceMigration(id, "resize", "migration")
}

// instanceMigration returns the id and status of the instance's newest
// migration of one of the types (0 and "" if none).
func (c *cloud) instanceMigration(id string, types ...string) (int64, string) {
	var out struct {
		Migrations []struct {
			ID       int64  `json:"id"`
			Instance string `json:"instance_uuid"`
			Status   string `json:"status"`
			Type     string `json:"migration_type"`
		} `json:"migrations"`
	}
	c.rawCall("GET", "/compute/v2.1/os-migrations", "compute 2.59", nil, &out)
	var mid int64
	var status string
	for _, m := range out.Migrations {
		if m.Instance == id && slices.Contains(types, m.Type) && m.ID > mid {
			mid, status = m.ID, m.Status
		}
	}
	return mid, status
}

// actionAsync sends a server action and reports on the channel whether it
// was answered with one of the statuses (a server killed meanwhile may
// not answer). The request is built here, so a restart meanwhile (a new
// URL, a new token) does not race with it.
func (c *cloud) actionAsync(id string, body map[string]any, version string, want ...int) <-chan error {
	c.t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", c.url+"/compute/v2.1/servers/"+id+"/action", bytes.NewReader(data))
	req.Header.Set("X-Auth-Token", c.login())
	req.Header.Set("OpenStack-API-Version", version)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		client := http.Client{Timeout: 30 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			done <- fmt.Errorf("action %v: %w", body, err)
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		for _, w := range want {
			if resp.StatusCode == w {
				done <- nil
				return
			}
		}
		done <- fmt.Errorf("action %v: %d %s, want %v", body, resp.StatusCode, answer, want)
	}()
	return done
}

func runMoveKill(t *testing.T, k moveKill) {
	c := faultCloud(t, 2, "keel.fake_step_seconds=2", "libvirt.live_migration_bandwidth=200",
		"DEFAULT.service_down_time=5", "DEFAULT.allow_resize_to_same_host=false")
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.tiny2", "ram": 1024, "vcpus": 2, "disk": 1, "id": "3"}}, nil)
	id := c.bootAt("vm", "1", "h1")
	body := map[string]any{"resize": map[string]any{"flavorRef": "3"}}
	if k.move == "migrate" {
		body = map[string]any{"migrate": nil}
	}
	// The API may answer only after the move's first step (the
	// destination's prep_resize): send it beside the watch for that step.
	sent := c.actionAsync(id, body, "compute 2.56", 202)
	kill := func() {
		procs := map[string]string{"source": "h1", "dest": "h2"}
		if k.who == "server" {
			c.killAndLater("server", k.down)
			return
		}
		c.killAndLater(procs[k.who], k.down)
	}
	waitAt := func(status string) {
		c.waitFor("the move "+status, 30*time.Second, func() bool {
			_, st := c.coldMigration(id)
			return st == status
		})
	}
	// Before VERIFY_RESIZE: kill at the step, then see where it ends.
	if k.at != "confirming" && k.at != "reverting" {
		waitAt(k.at)
		kill()
	}
	if err := <-sent; err != nil && k.who != "server" {
		t.Fatal(err)
	}
	var s map[string]any
	c.waitFor("the move to wait for an answer or be undone", 60*time.Second, func() bool {
		s = c.server_(id)
		st := s["status"]
		return s["OS-EXT-STS:task_state"] == nil && (st == "VERIFY_RESIZE" || st == "ACTIVE" || st == "ERROR")
	})
	want := "h1"
	if s["status"] == "VERIFY_RESIZE" {
		answer := map[string]any{"confirmResize": nil}
		if k.answer == "revert" {
			answer = map[string]any{"revertResize": nil}
		}
		answered := c.actionAsync(id, answer, "compute 2.30", 204, 202)
		if k.at == "confirming" || k.at == "reverting" {
			waitAt(k.at)
			kill()
		}
		if err := <-answered; err != nil && k.who != "server" {
			t.Fatalf("%s: %v", k.answer, err)
		}
		if k.answer == "confirm" {
			want = "h2"
		}
	} else if k.at == "confirming" || k.at == "reverting" || k.at == "finished" {
		t.Fatalf("the move never reached VERIFY_RESIZE: %v", s["status"])
	}
	c.waitServer(id, "ACTIVE", 60*time.Second)
	c.waitMoves(60 * time.Second)
	c.settledAll("h1", "h2")
	s = c.server_(id)
	flavor := "1"
	if want == "h2" && k.move == "resize" {
		flavor = "3"
	}
	if host := c.hostOf(id); host != want {
		t.Fatalf("the server ended on %s, want %s (the move %s)", host, want, map[bool]string{true: "done", false: "undone"}[want == "h2"])
	}
	names := map[string]string{"1": "m1.tiny", "3": "m1.tiny2"}
	if f, _ := s["flavor"].(map[string]any); f == nil || (f["id"] != flavor && f["original_name"] != names[flavor]) {
		t.Fatalf("the server ended with flavor %v, want %s", s["flavor"], names[flavor])
	}
	mid, status := c.coldMigration(id)
	t.Logf("migration %d ended %s; server on %s", mid, status, want)
}

// TestMovesHangUps: clients hang up right after sending each cold move's
// action (resize, confirmResize, migrate, revertResize, and an evacuate of
// a fenced host's server); every one runs to its end as if they had
// waited, and the cloud is settled.
func TestMovesHangUps(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 3, "DEFAULT.allow_resize_to_same_host=false")
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.tiny2", "ram": 1024, "vcpus": 2, "disk": 1, "id": "3"}}, nil)
	a := c.bootAt("a", "1", "h1")
	b := c.bootAt("b", "1", "h3")
	hangUp := func(id string, body map[string]any) {
		t.Helper()
		if err := c.hangUp("POST", "/compute/v2.1/servers/"+id+"/action", body, 0); err != nil {
			t.Fatal(err)
		}
	}
	hangUp(a, map[string]any{"resize": map[string]any{"flavorRef": "3"}})
	c.waitServer(a, "VERIFY_RESIZE", 30*time.Second)
	hangUp(a, map[string]any{"confirmResize": nil})
	c.waitServer(a, "ACTIVE", 30*time.Second)
	if s := c.server_(a); c.hostOf(a) == "h1" || s["flavor"].(map[string]any)["id"] != "3" && s["flavor"].(map[string]any)["original_name"] != "m1.tiny2" {
		t.Fatalf("after the hung-up resize and confirm: on %s with %v", c.hostOf(a), s["flavor"])
	}
	from := c.hostOf(a)
	hangUp(a, map[string]any{"migrate": nil})
	c.waitServer(a, "VERIFY_RESIZE", 30*time.Second)
	hangUp(a, map[string]any{"revertResize": nil})
	c.waitFor("a back on "+from, 30*time.Second, func() bool { return c.server_(a)["status"] == "ACTIVE" && c.hostOf(a) == from })
	c.waitMoves(30 * time.Second)

	c.agents["h3"].kill()
	c.forceDown("h3", true)
	hangUp(b, map[string]any{"evacuate": map[string]any{}})
	c.waitFor("b evacuated", 30*time.Second, func() bool {
		s := c.server_(b)
		return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil && c.hostOf(b) != "h3"
	})
	c.forceDown("h3", false)
	c.startAgent("h3")
	c.waitMoves(40 * time.Second)
	c.settledAll("h1", "h2", "h3")
}

// TestEvacuationKilledAtEachStep: a fenced host's server is evacuated and
// the server process or the destination agent is killed (kill -9) while
// the rebuild runs (pre-migrating), or the server while the evacuation
// waits for its source to come back (done); restarted at once, then the
// source's agent comes back. Every row ends with the server ACTIVE on
// another host, the evacuation completed or ended in error with the
// server back on its allocation, and the cloud settled.
func TestEvacuationKilledAtEachStep(t *testing.T) {
	t.Parallel()
	rows := []struct{ at, who string }{{"pre-migrating", "dest"}, {"done", "server"}}
	if faultRounds > 1 {
		rows = []struct{ at, who string }{{"pre-migrating", "server"}, {"pre-migrating", "dest"}, {"done", "server"}, {"done", "dest"}}
	}
	for _, r := range rows {
		t.Run(r.at+"/"+r.who, func(t *testing.T) {
			t.Parallel()
			c := faultCloud(t, 2, "keel.fake_spawn_seconds=2", "DEFAULT.service_down_time=5")
			id := c.bootAt("vm", "1", "h1")
			c.agents["h1"].kill()
			c.forceDown("h1", true)
			sent := c.actionAsync(id, map[string]any{"evacuate": map[string]any{}}, "compute 2.30", 200)
			c.waitFor("the evacuation "+r.at, 30*time.Second, func() bool {
				_, st := c.instanceMigration(id, "evacuation")
				return st == r.at
			})
			if r.who == "server" {
				c.restart("server")
			} else {
				c.restart("h2")
			}
			if err := <-sent; err != nil && r.who != "server" {
				t.Fatal(err)
			}
			c.forceDown("h1", false)
			c.startAgent("h1")
			c.waitMoves(60 * time.Second)
			c.waitFor("the server ACTIVE with no task", 60*time.Second, func() bool {
				s := c.server_(id)
				return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil
			})
			c.settledAll("h1", "h2")
			t.Logf("ended on %s", c.hostOf(id))
		})
	}
}
