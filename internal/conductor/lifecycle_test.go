package conductor_test

import (
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/lifecycle"
	"keel/internal/records"
)

// act runs a lifecycle action and waits for its flow to stop.
func (c *cloud) act(uuid string, req lifecycle.Request) (records.Instance, error) {
	c.t.Helper()
	_, done, err := c.cond.Act(ctx, uuid, req)
	if err != nil {
		return records.Instance{}, err
	}
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("%s of %s did not stop", req.Action, uuid)
	}
	return c.instance(uuid), err
}

// TestLifecycleAgentAwayIsSweptAndTimedOut: an action whose agent cannot
// be reached stays in its step; the sweep asks again once the agent is
// back, and ends the action (the server as it was) when it never is.
func TestLifecycleAgentAwayIsSweptAndTimedOut(t *testing.T) {
	c := newCloud(t, sweeps(10*time.Minute, 0, 30*time.Second))
	c.runSweeps(t)
	a := c.seed("h1", "a", small)
	b := c.seed("h1", "b", small)
	m := c.agents["h1"]
	delete(c.agents, "h1")
	got, err := c.act(a.UUID, lifecycle.Request{Action: lifecycle.Stop})
	if err == nil || got.TaskState != records.TaskPoweringOff || got.ActionPhase != lifecycle.PhaseAgent {
		t.Fatalf("stop with the agent away: %s/%s phase %q (%v), want left in powering-off", got.VMState, got.TaskState, got.ActionPhase, err)
	}
	c.agents["h1"] = m
	c.advance(time.Minute)
	waitFor(t, func() bool { return c.instance(a.UUID).VMState == records.VMStopped }, "the sweep to finish the stop")
	if g := c.guest("h1", a.UUID); g != compute.GuestStopped {
		t.Fatalf("guest after the swept stop: %s", g)
	}

	delete(c.agents, "h1")
	if _, err := c.act(b.UUID, lifecycle.Request{Action: lifecycle.Pause}); err == nil {
		t.Fatal("pause with the agent away answered")
	}
	for i := 0; i < 12; i++ {
		c.advance(time.Minute)
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, func() bool { return c.instance(b.UUID).TaskState == "" }, "the action's time-out")
	got = c.instance(b.UUID)
	if got.VMState != records.VMActive || got.Action != "" || !strings.Contains(got.ActionError, "did not answer") {
		t.Fatalf("timed-out pause: %s/%s action %q error %q", got.VMState, got.TaskState, got.Action, got.ActionError)
	}
	c.agents["h1"] = m
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
