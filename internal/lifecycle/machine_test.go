package lifecycle

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/records"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func inst(vm records.VMState, task records.TaskState) records.Instance {
	return records.Instance{UUID: "u1", Host: "h1", VMState: vm, TaskState: task}
}

// TestBeginAsData: each action from each state it may or may not start
// from, with the task state it shows and its first operation, or Nova's
// 409 text.
func TestBeginAsData(t *testing.T) {
	rows := []struct {
		req      Request
		vm       records.VMState
		task     records.TaskState
		wantTask records.TaskState
		wantOp   string
		wantErr  string
	}{
		{Request{Action: Stop}, records.VMActive, "", records.TaskPoweringOff, OpStop, ""},
		{Request{Action: Stop}, records.VMError, "", records.TaskPoweringOff, OpStop, ""},
		{Request{Action: Stop}, records.VMStopped, "", "", "", "Cannot 'stop' instance u1 while it is in vm_state stopped"},
		{Request{Action: Stop}, records.VMActive, records.TaskPausing, "", "", "Cannot 'stop' instance u1 while it is in task_state pausing"},
		{Request{Action: Start}, records.VMStopped, "", records.TaskPoweringOn, OpStart, ""},
		{Request{Action: Start}, records.VMActive, "", "", "", "Cannot 'start' instance u1 while it is in vm_state active"},
		{Request{Action: Reboot, RebootType: "SOFT"}, records.VMActive, "", records.TaskRebooting, OpReboot, ""},
		{Request{Action: Reboot, RebootType: "SOFT"}, records.VMStopped, "", "", "", "Cannot 'reboot' instance u1 while it is in vm_state stopped"},
		{Request{Action: Reboot, RebootType: "HARD"}, records.VMStopped, "", records.TaskRebootingHard, OpRebootHard, ""},
		{Request{Action: Reboot, RebootType: "HARD"}, records.VMActive, records.TaskRebooting, records.TaskRebootingHard, OpRebootHard, ""},
		{Request{Action: Reboot, RebootType: "HARD"}, records.VMShelved, "", "", "", "Cannot 'reboot' instance u1 while it is in vm_state shelved"},
		{Request{Action: Pause}, records.VMActive, "", records.TaskPausing, OpPause, ""},
		{Request{Action: Pause}, records.VMPaused, "", "", "", "Cannot 'pause' instance u1 while it is in vm_state paused"},
		{Request{Action: Unpause}, records.VMActive, "", "", "", "Cannot 'unpause' instance u1 while it is in vm_state active"},
		{Request{Action: Unpause}, records.VMPaused, "", records.TaskUnpausing, OpUnpause, ""},
		{Request{Action: Suspend}, records.VMActive, "", records.TaskSuspending, OpSuspend, ""},
		{Request{Action: Suspend}, records.VMSuspended, "", "", "", "Cannot 'suspend' instance u1 while it is in vm_state suspended"},
		{Request{Action: Resume}, records.VMSuspended, "", records.TaskResuming, OpResume, ""},
		{Request{Action: Resume}, records.VMActive, "", "", "", "Cannot 'resume' instance u1 while it is in vm_state active"},
		{Request{Action: Rescue}, records.VMStopped, "", records.TaskRescuing, OpRescue, ""},
		{Request{Action: Rescue}, records.VMRescued, "", "", "", "Cannot 'rescue' instance u1 while it is in vm_state rescued"},
		{Request{Action: Unrescue}, records.VMRescued, "", records.TaskUnrescuing, OpUnrescue, ""},
		{Request{Action: Unrescue}, records.VMActive, "", "", "", "Cannot 'unrescue' instance u1 while it is in vm_state active"},
		{Request{Action: Rebuild}, records.VMError, "", records.TaskRebuilding, OpRebuild, ""},
		{Request{Action: Rebuild}, records.VMPaused, "", "", "", "Cannot 'rebuild' instance u1 while it is in vm_state paused"},
		{Request{Action: Shelve}, records.VMSuspended, "", records.TaskShelving, OpShelve, ""},
		{Request{Action: Shelve}, records.VMShelved, "", "", "", "Cannot 'shelve' instance u1 while it is in vm_state shelved"},
		{Request{Action: ShelveOffload}, records.VMShelved, "", records.TaskShelvingOffloading, OpShelveUnplug, ""},
		{Request{Action: ShelveOffload}, records.VMActive, "", "", "", "Cannot 'shelveOffload' instance u1 while it is in vm_state active"},
		{Request{Action: Unshelve}, records.VMShelved, "", records.TaskUnshelving, OpStart, ""},
		{Request{Action: Unshelve}, records.VMActive, "", "", "", "Cannot 'unshelve' instance u1 while it is in vm_state active"},
		{Request{Action: Unshelve}, records.VMBuilding, "", "", "", "Cannot 'unshelve' instance u1 while it is in vm_state building"},
	}
	for _, r := range rows {
		next, acts, err := Machine{}.Begin(inst(r.vm, r.task), r.req, t0)
		name := r.req.Action + "/" + r.req.RebootType + " from " + string(r.vm) + "/" + string(r.task)
		if r.wantErr != "" {
			var ise *InvalidStateError
			if !errors.As(err, &ise) || ise.Msg != r.wantErr {
				t.Errorf("%s: got %v, want %q", name, err, r.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if next.TaskState != r.wantTask || next.VMState != r.vm || next.Action != r.req.Action || next.ActionPhase != PhaseAgent {
			t.Errorf("%s: record %s/%s action %s phase %s, want %s/%s", name, next.VMState, next.TaskState, next.Action, next.ActionPhase, r.vm, r.wantTask)
		}
		if len(acts) != 1 || acts[0].Kind != CallAgent || acts[0].Op != r.wantOp || acts[0].Host != "h1" {
			t.Errorf("%s: actions %+v, want call %s on h1", name, acts, r.wantOp)
		}
	}
}

// run drives an action to its end, answering every agent call with
// answer(op).
func run(t *testing.T, mc Machine, in records.Instance, req Request, answer func(op string) Event) (records.Instance, []string) {
	t.Helper()
	next, acts, err := mc.Begin(in, req, t0)
	if err != nil {
		t.Fatalf("begin %s: %v", req.Action, err)
	}
	var seen []string
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		var ev Event
		switch a.Kind {
		case CallAgent:
			seen = append(seen, a.Op)
			ev = answer(a.Op)
		case ReleaseClaim:
			seen = append(seen, "release")
			ev = Event{Kind: Released}
		case StartBoot:
			seen = append(seen, "boot")
			return next, seen
		}
		var more []Action
		if next, more, err = mc.Step(next, ev, t0.Add(time.Second)); err != nil {
			t.Fatalf("%s: step %s: %v", req.Action, ev.Kind, err)
		}
		acts = append(acts, more...)
	}
	return next, seen
}

func ok(string) Event { return Event{Kind: Done} }

// TestEndsAsData: where each action ends, the operations it ran, and
// the power state shown.
func TestEndsAsData(t *testing.T) {
	rows := []struct {
		mc      Machine
		req     Request
		from    records.VMState
		wantVM  records.VMState
		wantOps []string
		power   int
		host    string
	}{
		{Machine{}, Request{Action: Stop}, records.VMActive, records.VMStopped, []string{OpStop}, records.PowerShutdown, "h1"},
		{Machine{}, Request{Action: Start}, records.VMStopped, records.VMActive, []string{OpStart}, records.PowerRunning, "h1"},
		{Machine{}, Request{Action: Pause}, records.VMActive, records.VMPaused, []string{OpPause}, records.PowerPaused, "h1"},
		{Machine{}, Request{Action: Suspend}, records.VMActive, records.VMSuspended, []string{OpSuspend}, records.PowerSuspended, "h1"},
		{Machine{}, Request{Action: Reboot, RebootType: "HARD"}, records.VMPaused, records.VMActive, []string{OpRebootHard}, records.PowerRunning, "h1"},
		{Machine{}, Request{Action: Rescue}, records.VMActive, records.VMRescued, []string{OpRescue}, records.PowerRunning, "h1"},
		{Machine{}, Request{Action: Rebuild}, records.VMActive, records.VMActive, []string{OpRebuild}, records.PowerRunning, "h1"},
		// A stopped server is rebuilt and stays stopped.
		{Machine{}, Request{Action: Rebuild}, records.VMStopped, records.VMStopped, []string{OpRebuild, OpStop}, records.PowerShutdown, "h1"},
		// shelved_offload_time 0: shelve goes on to offload at once.
		{Machine{}, Request{Action: Shelve}, records.VMActive, records.VMShelvedOffloaded, []string{OpShelve, OpShelveUnplug, "release"}, records.PowerNoState, ""},
		{Machine{ShelvedOffloadTime: -1}, Request{Action: Shelve}, records.VMPaused, records.VMShelved, []string{OpShelve}, records.PowerShutdown, "h1"},
		{Machine{}, Request{Action: ShelveOffload}, records.VMShelved, records.VMShelvedOffloaded, []string{OpShelveUnplug, "release"}, records.PowerNoState, ""},
		{Machine{}, Request{Action: Unshelve}, records.VMShelved, records.VMActive, []string{OpStart}, records.PowerRunning, "h1"},
	}
	for _, r := range rows {
		end, ops := run(t, r.mc, inst(r.from, ""), r.req, ok)
		name := r.req.Action + " from " + string(r.from)
		if end.VMState != r.wantVM || end.TaskState != "" || end.Action != "" || end.ActionPhase != "" || end.Host != r.host {
			t.Errorf("%s: ended %s/%s action %q phase %q host %q, want %s on %q", name, end.VMState, end.TaskState, end.Action, end.ActionPhase, end.Host, r.wantVM, r.host)
		}
		if !slices.Equal(ops, r.wantOps) {
			t.Errorf("%s: ops %v, want %v", name, ops, r.wantOps)
		}
		if got := records.PowerStateOf(end); got != r.power {
			t.Errorf("%s: power state %d, want %d", name, got, r.power)
		}
	}
}

// TestFailureKeepsState: an agent's refusal clears the task and keeps
// the vm_state (a rebuild ends in ERROR); a time-out does the same.
func TestFailureKeepsState(t *testing.T) {
	fail := func(string) Event { return Event{Kind: Failed, Err: "injected"} }
	end, _ := run(t, Machine{}, inst(records.VMActive, ""), Request{Action: Pause}, fail)
	if end.VMState != records.VMActive || end.TaskState != "" || end.ActionError != "injected" || end.Action != "" {
		t.Errorf("failed pause: %s/%s error %q action %q", end.VMState, end.TaskState, end.ActionError, end.Action)
	}
	end, _ = run(t, Machine{}, inst(records.VMStopped, ""), Request{Action: Rebuild}, fail)
	if end.VMState != records.VMError || !strings.Contains(end.Fault, "injected") {
		t.Errorf("failed rebuild: %s fault %q, want error with the reason", end.VMState, end.Fault)
	}
	next, _, _ := Machine{}.Begin(inst(records.VMActive, ""), Request{Action: Stop}, t0)
	next, acts, err := Machine{}.Step(next, Event{Kind: ResumeEv}, t0)
	if err != nil || len(acts) != 1 || acts[0].Op != OpStop {
		t.Errorf("resume of a stop: %+v %v, want the stop asked again", acts, err)
	}
	end, _, err = Machine{}.Step(next, Event{Kind: TimedOut, Err: "no answer"}, t0)
	if err != nil || end.VMState != records.VMActive || end.TaskState != "" || end.ActionError != "no answer" {
		t.Errorf("timed-out stop: %s/%s %q %v", end.VMState, end.TaskState, end.ActionError, err)
	}
	if _, _, err := (Machine{}).Step(end, Event{Kind: Done}, t0); err == nil {
		t.Error("a late answer after the action ended was taken")
	}
}

// TestUnshelveOffloadedBoots: an offloaded server unshelves through a
// boot; its failure leaves it offloaded.
func TestUnshelveOffloadedBoots(t *testing.T) {
	in := inst(records.VMShelvedOffloaded, "")
	in.Host = ""
	next, acts, err := Machine{}.Begin(in, Request{Action: Unshelve}, t0)
	if err != nil || len(acts) != 1 || acts[0].Kind != StartBoot || next.ActionPhase != PhaseBoot || next.TaskState != records.TaskUnshelving {
		t.Fatalf("unshelve: %+v %+v %v", next, acts, err)
	}
	booted, _, _ := Machine{}.Step(next, Event{Kind: Booted}, t0)
	if booted.VMState != records.VMActive || booted.Action != "" {
		t.Errorf("booted: %s action %q", booted.VMState, booted.Action)
	}
	next.Host = "h2"
	failed, _, _ := Machine{}.Step(next, Event{Kind: BootFailed, Err: "No valid host"}, t0)
	if failed.VMState != records.VMShelvedOffloaded || failed.Host != "" || failed.ActionError != "No valid host" {
		t.Errorf("boot failed: %s host %q error %q", failed.VMState, failed.Host, failed.ActionError)
	}
}

// TestLock: a lock refuses the owner's actions, not an admin's; an
// admin's lock cannot be lifted by the owner.
func TestLock(t *testing.T) {
	in := inst(records.VMActive, "")
	locked, acts, err := Machine{}.Begin(in, Request{Action: Lock, Reason: "maintenance", Admin: true}, t0)
	if err != nil || len(acts) != 0 || !locked.Locked || locked.LockedBy != "admin" || locked.LockedReason != "maintenance" {
		t.Fatalf("lock: %+v %v", locked.Lifecycle, err)
	}
	var le *LockedError
	if _, _, err := (Machine{}).Begin(locked, Request{Action: Stop}, t0); !errors.As(err, &le) || err.Error() != "Instance u1 is locked" {
		t.Errorf("owner's stop of a locked server: %v", err)
	}
	if _, _, err := (Machine{}).Begin(locked, Request{Action: Stop, Admin: true}, t0); err != nil {
		t.Errorf("admin's stop of a locked server: %v", err)
	}
	var fe *ForbiddenError
	if _, _, err := (Machine{}).Begin(locked, Request{Action: Unlock}, t0); !errors.As(err, &fe) {
		t.Errorf("owner's unlock of an admin's lock: %v", err)
	}
	open, _, err := Machine{}.Begin(locked, Request{Action: Unlock, Admin: true}, t0)
	if err != nil || open.Locked || open.LockedReason != "" {
		t.Errorf("admin's unlock: %+v %v", open.Lifecycle, err)
	}
}

// TestDeadline: the lifecycle machine owns its timeouts.
func TestDeadline(t *testing.T) {
	mc := Machine{ShelvedOffloadTime: time.Hour, StallAfter: time.Minute, ActionTimeout: 10 * time.Minute}
	inst := func(vm records.VMState, task records.TaskState, action string, phase records.ActionPhase, updated time.Duration) records.Instance {
		i := records.Instance{UUID: "i", Host: "h1", VMState: vm, TaskState: task, UpdatedAt: t0.Add(updated)}
		i.Action, i.ActionPhase, i.ActionStarted = action, phase, t0
		if phase == PhaseAgent {
			i.ActionOps = []string{OpPause}
		}
		return i
	}
	shelved := inst(records.VMShelved, records.TaskNone, "", "", 0)
	shelved.ShelvedAt = t0
	for _, tc := range []struct {
		name string
		inst records.Instance
		now  time.Time // when the sweep looks; t0 when unset
		when time.Time
		ev   EventKind
		none bool
	}{
		{name: "agent not answering: asked again", inst: inst(records.VMActive, records.TaskPausing, Pause, PhaseAgent, 0), when: t0.Add(time.Minute), ev: ResumeEv},
		{name: "agent not answering past the timeout: ends", inst: inst(records.VMActive, records.TaskPausing, Pause, PhaseAgent, 9*time.Minute),
			now: t0.Add(11 * time.Minute), when: t0.Add(10 * time.Minute), ev: TimedOut},
		{name: "stalled long, past the timeout: ends, not asked again", inst: inst(records.VMActive, records.TaskPausing, Pause, PhaseAgent, 0),
			now: t0.Add(11 * time.Minute), when: t0.Add(10 * time.Minute), ev: TimedOut},
		{name: "step in flight past the timeout: waits for its stall", inst: inst(records.VMActive, records.TaskPausing, Pause, PhaseAgent, 10*time.Minute+30*time.Second),
			now: t0.Add(11 * time.Minute), when: t0.Add(11*time.Minute + 30*time.Second), ev: TimedOut},
		{name: "shelved: offloaded later", inst: shelved, when: t0.Add(time.Hour), ev: OffloadDue},
		{name: "reset by an admin: nothing", inst: inst(records.VMActive, records.TaskNone, Pause, PhaseAgent, 0), none: true},
		{name: "unshelve booting: the boot's", inst: inst(records.VMBuilding, records.TaskSpawning, Unshelve, PhaseBoot, 0), none: true},
		{name: "unshelve booted unseen: finished", inst: inst(records.VMActive, records.TaskUnshelving, Unshelve, PhaseBoot, 0),
			when: t0.Add(time.Minute), ev: Booted},
		{name: "no action: nothing", inst: inst(records.VMActive, records.TaskNone, "", "", 0), none: true},
		{name: "a move's task: checked for its migration", inst: inst(records.VMActive, records.TaskMigrating, "", "", 5*time.Second),
			when: t0.Add(time.Minute + 5*time.Second), ev: MoveLost},
		{name: "a resize's task: checked for its migration", inst: inst(records.VMActive, records.TaskResizePrep, "", "", 0),
			when: t0.Add(time.Minute), ev: MoveLost},
		{name: "a rebuild action's task: the action's", inst: inst(records.VMActive, records.TaskRebuilding, "rebuild", PhaseAgent, 0),
			when: t0.Add(time.Minute), ev: ResumeEv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = t0
			}
			when, ev, ok := mc.Deadline(tc.inst, now)
			if tc.none {
				if ok {
					t.Fatalf("deadline %s %s, want none", when, ev.Kind)
				}
				return
			}
			if !ok || !when.Equal(tc.when) || ev.Kind != tc.ev {
				t.Fatalf("deadline %v %s %s, want %s %s", ok, when, ev.Kind, tc.when, tc.ev)
			}
			if _, _, err := mc.Step(tc.inst, ev, when); err != nil {
				t.Fatalf("the deadline's event is refused: %v", err)
			}
		})
	}
}

// TestMoveLost: a move task with no migration is cleared and the server
// stays as it was; a server with no move task refuses the event.
func TestMoveLost(t *testing.T) {
	mc := Machine{StallAfter: time.Minute}
	in := records.Instance{UUID: "i", Host: "h1", VMState: records.VMPaused, TaskState: records.TaskMigrating}
	got, acts, err := mc.Step(in, Event{Kind: MoveLost}, t0)
	if err != nil || len(acts) != 0 {
		t.Fatalf("MoveLost: %v, actions %v", err, acts)
	}
	if got.TaskState != records.TaskNone || got.VMState != records.VMPaused || got.Host != "h1" {
		t.Fatalf("after MoveLost: %s/%q on %s, want paused with no task on h1", got.VMState, got.TaskState, got.Host)
	}
	if in.TaskState != records.TaskMigrating {
		t.Fatal("Step mutated its input")
	}
	// A resize lost after its new flavor was saved for the quotas' count
	// (before its migration was recorded) counts the old flavor again.
	resizing := records.Instance{UUID: "i", Host: "h1", VMState: records.VMActive, TaskState: records.TaskResizePrep,
		Flavor: records.Flavor{ID: "small"}, ResizeFlavor: &records.Flavor{ID: "large"}}
	if got, _, err := mc.Step(resizing, Event{Kind: MoveLost}, t0); err != nil || got.TaskState != records.TaskNone || got.ResizeFlavor != nil {
		t.Fatalf("MoveLost of a resize: %v; task %q, resize flavor %v, want no task, no resize flavor", err, got.TaskState, got.ResizeFlavor)
	}
	for _, task := range []records.TaskState{records.TaskNone, records.TaskRebooting} {
		in.TaskState = task
		if _, _, err := mc.Step(in, Event{Kind: MoveLost}, t0); err == nil {
			t.Fatalf("MoveLost accepted for task %q", task)
		}
	}
}

// TestSnapshotAsScript walks a snapshot through its task states (Nova's:
// image_snapshot, image_pending_upload, image_uploading) back to the
// vm_state it started from; a shelve given an image writes it after its
// stop and keeps it as the shelved image, which the unshelve drops; a
// failure at any step drops the snapshot's image.
func TestSnapshotAsScript(t *testing.T) {
	mc := Machine{ShelvedOffloadTime: -1}
	sn := &records.Snapshot{ImageID: "im1"}
	type step struct {
		ev       EventKind
		task     records.TaskState
		vm       records.VMState
		want     ActionKind
		wantOp   string
		wantDrop string
	}
	run := func(name string, in records.Instance, req Request, steps []step) records.Instance {
		t.Helper()
		cur, acts, err := mc.Begin(in, req, t0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, s := range steps {
			if i > 0 {
				if cur, acts, err = mc.Step(cur, Event{Kind: s.ev, Err: "boom"}, t0); err != nil {
					t.Fatalf("%s step %d (%s): %v", name, i, s.ev, err)
				}
			}
			var kinds []ActionKind
			for _, a := range acts {
				kinds = append(kinds, a.Kind)
			}
			if cur.TaskState != s.task || cur.VMState != s.vm {
				t.Errorf("%s step %d (%s): %s/%s, want %s/%s", name, i, s.ev, cur.VMState, cur.TaskState, s.vm, s.task)
			}
			switch {
			case s.want == "" && len(acts) != 0:
				t.Errorf("%s step %d (%s): actions %v, want none", name, i, s.ev, kinds)
			case s.want != "" && (len(acts) != 1 || acts[0].Kind != s.want || acts[0].Op != s.wantOp || s.wantDrop != "" && acts[0].Image != s.wantDrop):
				t.Errorf("%s step %d (%s): actions %+v, want %s %s %s", name, i, s.ev, acts, s.want, s.wantOp, s.wantDrop)
			}
		}
		return cur
	}
	end := run("createImage", inst(records.VMPaused, ""), Request{Action: CreateImage, Snapshot: sn}, []step{
		{"", records.TaskImageSnapshot, records.VMPaused, CallAgent, OpSnapshot, ""},
		{Done, records.TaskImagePendingUpload, records.VMPaused, PrepareUpload, "", ""},
		{Prepared, records.TaskImageUploading, records.VMPaused, UploadImage, "", ""},
		{ResumeEv, records.TaskImageUploading, records.VMPaused, UploadImage, "", ""},
		{Done, records.TaskNone, records.VMPaused, "", "", ""},
	})
	if end.Snapshot != nil || end.Action != "" {
		t.Errorf("after the snapshot: %+v", end.Lifecycle)
	}
	run("createBackup failing at the capture", inst(records.VMActive, ""), Request{Action: CreateBackup, Snapshot: sn}, []step{
		{"", records.TaskImageSnapshot, records.VMActive, CallAgent, OpSnapshot, ""},
		{Failed, records.TaskNone, records.VMActive, DropImage, "", "im1"},
	})
	run("createImage failing at the upload", inst(records.VMStopped, ""), Request{Action: CreateImage, Snapshot: sn}, []step{
		{"", records.TaskImageSnapshot, records.VMStopped, CallAgent, OpSnapshot, ""},
		{Done, records.TaskImagePendingUpload, records.VMStopped, PrepareUpload, "", ""},
		{Failed, records.TaskNone, records.VMStopped, DropImage, "", "im1"},
	})
	lost := inst(records.VMActive, records.TaskImageUploading)
	lost.Action, lost.ActionPhase, lost.ActionFrom = CreateImage, PhaseUpload, records.VMActive
	if next, acts, err := mc.Step(lost, Event{Kind: ResumeEv}, t0); err != nil || len(acts) != 0 || next.TaskState != records.TaskNone || next.ActionError == "" {
		t.Errorf("an upload phase with no image: %+v %v %v, want it failed", next.Lifecycle, acts, err)
	}
	if _, _, err := mc.Begin(inst(records.VMActive, ""), Request{Action: CreateImage}, t0); err == nil {
		t.Error("a createImage without an image began")
	}
	shelved := run("shelve", inst(records.VMActive, ""), Request{Action: Shelve, Snapshot: sn}, []step{
		{"", records.TaskShelving, records.VMActive, CallAgent, OpShelve, ""},
		{Done, records.TaskShelving, records.VMActive, CallAgent, OpSnapshot, ""},
		{Done, records.TaskShelvingImagePendingUpload, records.VMActive, PrepareUpload, "", ""},
		{Prepared, records.TaskShelvingImageUploading, records.VMActive, UploadImage, "", ""},
		{Done, records.TaskNone, records.VMShelved, "", "", ""},
	})
	if shelved.ShelvedImage != "im1" || shelved.Snapshot != nil {
		t.Errorf("shelved: %+v", shelved.Lifecycle)
	}
	run("unshelve", shelved, Request{Action: Unshelve}, []step{
		{"", records.TaskUnshelving, records.VMShelved, CallAgent, OpStart, ""},
		{Done, records.TaskNone, records.VMActive, DropImage, "", "im1"},
	})
	shelved.VMState, shelved.Host = records.VMShelvedOffloaded, ""
	run("unshelve offloaded, no host", shelved, Request{Action: Unshelve}, []step{
		{"", records.TaskUnshelving, records.VMShelvedOffloaded, StartBoot, "", ""},
		{BootFailed, records.TaskNone, records.VMShelvedOffloaded, "", "", ""},
	})
	run("unshelve offloaded", shelved, Request{Action: Unshelve}, []step{
		{"", records.TaskUnshelving, records.VMShelvedOffloaded, StartBoot, "", ""},
		{Booted, records.TaskNone, records.VMActive, DropImage, "", "im1"},
	})
}

// TestRescueKeepsItsDisk: a rescue records what the guest boots while
// rescued (the request's image, bus and device; the server's own image
// without one), the record keeps it while RESCUE for the agent, and it
// goes when the server leaves RESCUE (unrescued) or the rescue fails.
func TestRescueKeepsItsDisk(t *testing.T) {
	in := inst(records.VMActive, "")
	in.ImageRef = "img-own"
	stable := &records.Rescue{ImageID: "img-rescue", Bus: "virtio", Device: "disk"}
	next, _, err := Machine{}.Begin(in, Request{Action: Rescue, Rescue: stable}, t0)
	if err != nil || next.Rescue == nil || *next.Rescue != *stable || !next.Rescue.Stable() {
		t.Fatalf("rescue begun: %+v, %v; want %+v recorded", next.Rescue, err, stable)
	}
	rescued, _ := run(t, Machine{}, in, Request{Action: Rescue, Rescue: stable}, ok)
	if rescued.VMState != records.VMRescued || rescued.Rescue == nil || rescued.Rescue.ImageID != "img-rescue" {
		t.Fatalf("rescued: %s with %+v, want rescued keeping the rescue disk", rescued.VMState, rescued.Rescue)
	}
	if legacy, _ := run(t, Machine{}, in, Request{Action: Rescue}, ok); legacy.Rescue == nil || legacy.Rescue.ImageID != "img-own" || legacy.Rescue.Stable() {
		t.Errorf("rescue without an image: %+v, want the server's own image, legacy", legacy.Rescue)
	}
	if back, _ := run(t, Machine{}, rescued, Request{Action: Unrescue}, ok); back.VMState != records.VMActive || back.Rescue != nil {
		t.Errorf("unrescued: %s with %+v, want active and no rescue disk", back.VMState, back.Rescue)
	}
	fail := func(string) Event { return Event{Kind: Failed, Err: "no such bus"} }
	if failed, _ := run(t, Machine{}, in, Request{Action: Rescue, Rescue: stable}, fail); failed.VMState != records.VMActive || failed.Rescue != nil {
		t.Errorf("failed rescue: %s with %+v, want active and no rescue disk", failed.VMState, failed.Rescue)
	}
}
