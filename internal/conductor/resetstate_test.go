package conductor_test

import (
	"testing"

	"keel/internal/lifecycle"
	"keel/internal/records"
)

// TestResetEndsTheActionInFlight: os-resetState while a lifecycle action's
// agent operation is in flight ends the action; the operation's answer,
// when it comes, is dropped and the server keeps the reset's state, as
// Nova's action fails at its next save on expected_task_state. Before,
// the rebuild, the stop, the shelve and the hard reboot ended as if no
// reset had come (ACTIVE, SHUTOFF, SHELVED…) and overwrote it.
func TestResetEndsTheActionInFlight(t *testing.T) {
	for _, tc := range []struct {
		req lifecycle.Request
		op  string
		to  records.VMState
	}{
		{lifecycle.Request{Action: lifecycle.Rebuild}, lifecycle.OpRebuild, records.VMError},
		{lifecycle.Request{Action: lifecycle.Stop}, lifecycle.OpStop, records.VMError},
		{lifecycle.Request{Action: lifecycle.Shelve}, lifecycle.OpShelve, records.VMError},
		{lifecycle.Request{Action: lifecycle.Reboot, RebootType: "HARD"}, lifecycle.OpRebootHard, records.VMError},
		{lifecycle.Request{Action: lifecycle.Pause}, lifecycle.OpPause, records.VMActive},
	} {
		t.Run(tc.req.Action+"/"+string(tc.to), func(t *testing.T) {
			c := newCloud(t)
			in := c.seed("h1", "vm", small)
			release := c.drivers["h1"].Hold(tc.op)
			_, done, err := c.cond.Act(ctx, in.UUID, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.cond.ResetState(ctx, in.UUID, tc.to); err != nil {
				t.Fatalf("reset during the %s: %v", tc.req.Action, err)
			}
			release()
			if err := <-done; err != nil {
				t.Errorf("the %s's flow after the reset: %v", tc.req.Action, err)
			}
			got := c.instance(in.UUID)
			if got.VMState != tc.to || got.TaskState != records.TaskNone || got.Action != "" {
				t.Errorf("after the %s ended: vm_state %s, task %q, action %q; want the reset's %s, no task, no action",
					tc.req.Action, got.VMState, got.TaskState, got.Action, tc.to)
			}
			if want := "the server's state was reset during its " + tc.req.Action; got.ActionError != want {
				t.Errorf("action error %q, want %q", got.ActionError, want)
			}
			if tc.req.Action == lifecycle.Shelve && got.Host != "h1" {
				t.Errorf("the reset shelve still offloaded the server: host %q", got.Host)
			}
		})
	}
}
