package conductor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/conductor"
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

// TestLifecycleOnTheFakeDriver: the guest follows each action; a stop
// keeps the claim, a shelve (offloaded at once) gives it back, and an
// unshelve claims a host again through the scheduler; the instance and
// allocations stay exact throughout.
func TestLifecycleOnTheFakeDriver(t *testing.T) {
	c := newCloud(t)
	in := c.seed("h1", "a", medium)
	for _, s := range []struct {
		req   lifecycle.Request
		vm    records.VMState
		guest compute.GuestState
	}{
		{lifecycle.Request{Action: lifecycle.Stop}, records.VMStopped, compute.GuestStopped},
		{lifecycle.Request{Action: lifecycle.Start}, records.VMActive, compute.GuestRunning},
		{lifecycle.Request{Action: lifecycle.Pause}, records.VMPaused, compute.GuestPaused},
		{lifecycle.Request{Action: lifecycle.Reboot, RebootType: "HARD"}, records.VMActive, compute.GuestRunning},
		{lifecycle.Request{Action: lifecycle.Suspend}, records.VMSuspended, compute.GuestSuspended},
		{lifecycle.Request{Action: lifecycle.Resume}, records.VMActive, compute.GuestRunning},
		{lifecycle.Request{Action: lifecycle.Rescue}, records.VMRescued, compute.GuestRescued},
		{lifecycle.Request{Action: lifecycle.Unrescue}, records.VMActive, compute.GuestRunning},
	} {
		got, err := c.act(in.UUID, s.req)
		if err != nil || got.VMState != s.vm || got.TaskState != "" || got.Action != "" {
			t.Fatalf("%s: %s/%s action %q (%v), want %s", s.req.Action, got.VMState, got.TaskState, got.Action, err, s.vm)
		}
		if g := c.guest("h1", in.UUID); g != s.guest {
			t.Fatalf("%s: guest %s, want %s", s.req.Action, g, s.guest)
		}
		if a := c.allocations(in.UUID); !sameAllocations(a, only("h1", medium)) {
			t.Fatalf("%s: allocations %v, want h1's only", s.req.Action, a)
		}
	}
	got, err := c.act(in.UUID, lifecycle.Request{Action: lifecycle.Shelve})
	if err != nil || got.VMState != records.VMShelvedOffloaded || got.Host != "" || c.guest("h1", in.UUID) != "" || len(c.allocations(in.UUID)) != 0 {
		t.Fatalf("shelve: %s on %q guest %q allocations %v (%v)", got.VMState, got.Host, c.guest("h1", in.UUID), c.allocations(in.UUID), err)
	}
	if used := c.hostRecord("h1").MemoryMBUsed; used != 512 {
		t.Errorf("h1's record after the offload: memory_mb_used %d, want 512 (reserved only)", used)
	}
	if _, err := c.act(in.UUID, lifecycle.Request{Action: lifecycle.Unshelve}); err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime + time.Second)
	got = c.instance(in.UUID)
	if got.VMState != records.VMActive || got.Host == "" || got.Action != "" || c.guest(got.Host, in.UUID) != compute.GuestRunning {
		t.Fatalf("unshelve: %s/%s on %q action %q", got.VMState, got.TaskState, got.Host, got.Action)
	}
	if a := c.allocations(in.UUID); !sameAllocations(a, only(got.Host, medium)) {
		t.Fatalf("unshelved allocations %v, want %s's only", a, got.Host)
	}
	c.checkInvariants()
}

// TestLifecycleFaultKeepsState: an operation the driver fails ends the
// action with the server as it was; a rebuild that fails ends in ERROR.
func TestLifecycleFaultKeepsState(t *testing.T) {
	c := newCloud(t)
	in := c.seed("h1", "a", small)
	c.drivers["h1"].FailNext(lifecycle.OpPause, in.UUID, "the hypervisor refused")
	got, err := c.act(in.UUID, lifecycle.Request{Action: lifecycle.Pause})
	if err != nil || got.VMState != records.VMActive || got.TaskState != "" || !strings.Contains(got.ActionError, "the hypervisor refused") {
		t.Fatalf("failed pause: %s/%s %q (%v)", got.VMState, got.TaskState, got.ActionError, err)
	}
	if g := c.guest("h1", in.UUID); g != compute.GuestRunning {
		t.Fatalf("guest after the failed pause: %s", g)
	}
	c.drivers["h1"].FailNext(lifecycle.OpRebuild, in.UUID, "disk gone")
	got, _ = c.act(in.UUID, lifecycle.Request{Action: lifecycle.Rebuild})
	if got.VMState != records.VMError || !strings.Contains(got.Fault, "disk gone") {
		t.Fatalf("failed rebuild: %s %q", got.VMState, got.Fault)
	}
	var ise *conductor.InvalidStateError
	if _, _, err := c.cond.Act(ctx, in.UUID, lifecycle.Request{Action: lifecycle.Pause}); !errors.As(err, &ise) ||
		err.Error() != fmt.Sprintf("Cannot 'pause' instance %s while it is in vm_state error", in.UUID) {
		t.Fatalf("pause of an errored server: %v", err)
	}
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

// TestRecoverResumesALifecycleAction: a server restarted while an agent
// operation was in flight asks it again (the agent answers from the
// guest it has) and the action ends.
func TestRecoverResumesALifecycleAction(t *testing.T) {
	c := newCloud(t)
	in := c.seed("h2", "a", small)
	// What a crash right after the first save leaves.
	cur := c.instance(in.UUID)
	cur.TaskState, cur.Action, cur.ActionPhase, cur.ActionOps, cur.ActionFrom, cur.ActionStarted =
		records.TaskSuspending, lifecycle.Suspend, lifecycle.PhaseAgent, []string{lifecycle.OpSuspend}, records.VMActive, c.clk.Now()
	if _, err := c.st.UpdateInstance(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	fresh := c.replica("", c.st)
	n, err := fresh.Recover(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Recover resumed %d (%v), want 1", n, err)
	}
	got := c.instance(in.UUID)
	if got.VMState != records.VMSuspended || got.TaskState != "" || c.guest("h2", in.UUID) != compute.GuestSuspended {
		t.Fatalf("after recovery: %s/%s guest %s", got.VMState, got.TaskState, c.guest("h2", in.UUID))
	}
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
