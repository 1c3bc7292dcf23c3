package e2e

import (
	"fmt"
	"testing"
	"time"
)

// lifecycleStep is one lifecycle action and where it ends: the server's
// status and its guest's state in the fake driver's file.
type lifecycleStep struct {
	body   map[string]any
	status string
	guest  string
}

var lifecycleSteps = []lifecycleStep{
	{map[string]any{"os-stop": nil}, "SHUTOFF", "stopped"},
	{map[string]any{"os-start": nil}, "ACTIVE", "running"},
	{map[string]any{"pause": nil}, "PAUSED", "paused"},
	{map[string]any{"unpause": nil}, "ACTIVE", "running"},
	{map[string]any{"suspend": nil}, "SUSPENDED", "suspended"},
	{map[string]any{"resume": nil}, "ACTIVE", "running"},
	{map[string]any{"reboot": map[string]any{"type": "HARD"}}, "ACTIVE", "running"},
}

// waitEnded waits until the server's action ended in status.
func (c *cloud) waitEnded(id, status string, timeout time.Duration) {
	c.t.Helper()
	c.waitFor(id+" "+status+" with no task", timeout, func() bool {
		s := c.server_(id)
		return s["status"] == status && s["OS-EXT-STS:task_state"] == nil
	})
}

// TestLifecycleAgentKilledMidAction: the agent is killed (kill -9) while
// each lifecycle operation is in flight on it (the fake driver takes
// fake_step_seconds, its change landing at the end) and started again:
// the conductor asks again (the sweep, after the call's time-out) and
// every action ends where it should, the guest's saved state with it;
// nothing is left in a task, nothing held twice.
func TestLifecycleAgentKilledMidAction(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 1, "keel.fake_step_seconds=2", "DEFAULT.service_down_time=5")
	id := c.bootAt("vm", "1", "h1")
	for _, s := range lifecycleSteps[:4] { // stop, start, pause, unpause
		if st := c.call("POST", "/compute/v2.1/servers/"+id+"/action", s.body, nil); st != 202 {
			t.Fatalf("%v: %d, want 202", s.body, st)
		}
		c.waitFor("the action in flight", 5*time.Second, func() bool { return c.server_(id)["OS-EXT-STS:task_state"] != nil })
		time.Sleep(500 * time.Millisecond) // inside the driver's 2 s
		c.agents["h1"].kill()
		c.startAgent("h1")
		c.waitEnded(id, s.status, 40*time.Second)
		if g := c.guests("h1")[id]; g != s.guest {
			t.Fatalf("after %v with the agent killed: guest %q, want %s", s.body, g, s.guest)
		}
	}
	c.settledAll("h1")
}

// TestLifecycleHangUps: clients hang up right after sending each action
// (and a shelve and unshelve); every action runs to its end as if they
// had waited, and the cloud is settled.
func TestLifecycleHangUps(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 2, "keel.fake_step_seconds=1")
	a := c.bootAt("a", "1", "h1")
	b := c.bootAt("b", "1", "h2")
	steps := append(append([]lifecycleStep{}, lifecycleSteps...),
		lifecycleStep{map[string]any{"shelve": nil}, "SHELVED_OFFLOADED", ""},
		lifecycleStep{map[string]any{"unshelve": nil}, "ACTIVE", "running"})
	for _, s := range steps {
		for _, id := range []string{a, b} {
			if err := c.hangUp("POST", "/compute/v2.1/servers/"+id+"/action", s.body, 0); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{a, b} {
			c.waitEnded(id, s.status, 30*time.Second)
			if host := c.hostOf(id); s.guest != "" && c.guests(host)[id] != s.guest {
				t.Fatalf("after %v: guest on %q is %q, want %s", s.body, host, c.guests(host)[id], s.guest)
			}
		}
	}
	c.settledAll("h1", "h2")
}

// allLifecycleSteps is every lifecycle operation in an order each is
// allowed in, ending ACTIVE: the basic ones, then rescue, rebuild and a
// shelve and unshelve.
var allLifecycleSteps = append(append([]lifecycleStep{}, lifecycleSteps...),
	lifecycleStep{map[string]any{"rescue": map[string]any{}}, "RESCUE", "rescued"},
	lifecycleStep{map[string]any{"unrescue": nil}, "ACTIVE", "running"},
	lifecycleStep{map[string]any{"rebuild": map[string]any{"imageRef": "7f3b0d5e-6a2c-4c1e-9a55-000000000001"}}, "ACTIVE", "running"},
	lifecycleStep{map[string]any{"reboot": map[string]any{"type": "SOFT"}}, "ACTIVE", "running"},
	lifecycleStep{map[string]any{"shelve": nil}, "SHELVED_OFFLOADED", ""},
	lifecycleStep{map[string]any{"unshelve": nil}, "ACTIVE", "running"})

// TestLifecycleKilledAtEachAction: the server, or the agent, is killed
// (kill -9) while each lifecycle operation is in flight and started again
// at once; every action ends where it should, the guest's saved state
// with it, and the cloud is settled. The default run kills the server
// during the basic operations (the agent's row is
// TestLifecycleAgentKilledMidAction); the faults build tag kills each
// process during every operation.
func TestLifecycleKilledAtEachAction(t *testing.T) {
	t.Parallel()
	type row struct {
		who   string
		steps []lifecycleStep
	}
	rows := []row{{"server", lifecycleSteps}}
	if faultRounds > 1 {
		rows = []row{{"server", allLifecycleSteps}, {"agent", allLifecycleSteps}}
	}
	for _, r := range rows {
		t.Run(r.who, func(t *testing.T) {
			t.Parallel()
			c := faultCloud(t, 1, "keel.fake_step_seconds=2", "keel.fake_spawn_seconds=2", "DEFAULT.service_down_time=5")
			id := c.bootAt("vm", "1", "h1")
			for _, s := range r.steps {
				answered := c.actionAsync(id, s.body, "compute 2.30", 202, 200)
				c.waitFor(fmt.Sprintf("%v in flight", s.body), 10*time.Second, func() bool {
					return c.server_(id)["OS-EXT-STS:task_state"] != nil
				})
				time.Sleep(300 * time.Millisecond) // inside the driver's 2 s
				who := r.who
				if who == "agent" {
					who = "h1"
				}
				c.restart(who)
				if err := <-answered; err != nil && r.who != "server" {
					t.Fatal(err)
				}
				c.waitEnded(id, s.status, 60*time.Second)
				if host := c.hostOf(id); s.guest != "" && c.guests(host)[id] != s.guest {
					t.Fatalf("after %v with the %s killed: guest %q on %q, want %s", s.body, r.who, c.guests(host)[id], host, s.guest)
				}
			}
			c.settledAll("h1")
		})
	}
}
