// Package lifecycle is the state machine of a server's lifecycle actions
// (stop, start, reboot, pause, suspend, rescue, rebuild, shelve,
// shelveOffload, unshelve, lock), pure: the instance record and a request
// or an event go in, the next record and the actions to perform come out.
// The conductor performs the actions (an agent operation, giving a
// shelved instance's claim back, an unshelve's boot) and feeds their
// outcomes back; the record, saved after every step, is what recovery
// resumes from. It mirrors packages boot and migration.
//
// Each action is one row of a table (Rules): the vm_states and task
// states it may start from (Nova's check_instance_state, whose 409 text
// Begin returns), the task state it shows while in flight, the agent
// operations it runs in order and the vm_state it ends in:
//
//	accepted ─▶ agent(op₁) ─Done─▶ agent(op₂) … ─Done─▶ [end vm_state]
//	               │ Failed                                   (shelve, offloading:)
//	               ▼                                  release ─Released─▶ [shelved_offloaded]
//	        [vm_state as before, task cleared, the error kept]  (rebuild: [error])
//	unshelve of a shelved_offloaded server: boot (package boot schedules
//	and spawns it again through the claim-time view, from the shelved
//	image) ─Booted─▶ [active], the shelved image dropped
//	                                                  BootFailed ─▶ [shelved_offloaded]
//
// A snapshot (createImage, createBackup; a shelve given an image) ends
// its agent operations with snapshot_instance, which captures the
// guest's disk on its host, then uploads it — task image_snapshot, then
// image_pending_upload and image_uploading (a shelve's
// shelving_image_*):
//
//	agent(snapshot_instance) ─Done─▶ prepare-upload ─Prepared─▶ upload-image ─Done─▶ [as before]
//	          Failed, TimedOut (any step) ─▶ [as before, the error kept], drop-image
//
// Resume repeats the phase's action (every agent operation is idempotent:
// an agent asked for a state its guest is already in answers at once);
// TimedOut (the agent never answered) ends the action as Failed does.
package lifecycle

import (
	"fmt"
	"slices"
	"time"

	"keel/internal/records"
)

// Actions (Nova's instance action names).
const (
	Stop          = "stop"
	Start         = "start"
	Reboot        = "reboot"
	Pause         = "pause"
	Unpause       = "unpause"
	Suspend       = "suspend"
	Resume        = "resume"
	Rescue        = "rescue"
	Unrescue      = "unrescue"
	Rebuild       = "rebuild"
	Shelve        = "shelve"
	ShelveOffload = "shelveOffload"
	Unshelve      = "unshelve"
	Lock          = "lock"
	Unlock        = "unlock"
	CreateImage   = "createImage"
	CreateBackup  = "createBackup"
)

// Agent operations (Nova's compute RPC names); the agent's driver makes
// its guest's state the operation's target state.
const (
	OpStop         = "stop_instance"
	OpStart        = "start_instance"
	OpReboot       = "reboot_instance"
	OpRebootHard   = "reboot_instance_hard"
	OpPause        = "pause_instance"
	OpUnpause      = "unpause_instance"
	OpSuspend      = "suspend_instance"
	OpResume       = "resume_instance"
	OpRescue       = "rescue_instance"
	OpUnrescue     = "unrescue_instance"
	OpRebuild      = "rebuild_instance"
	OpShelve       = "shelve_instance"
	OpShelveUnplug = "shelve_offload_instance" // the guest is removed
	// OpSnapshot captures the guest's disk on its host, which keeps it
	// until the upload phase has read it.
	OpSnapshot = "snapshot_instance"
)

// Phases (records.Lifecycle.ActionPhase).
const (
	PhaseAgent   records.ActionPhase = "agent"
	PhaseRelease records.ActionPhase = "release"
	PhaseBoot    records.ActionPhase = "boot"
	// PhaseUpload: a snapshot's captured disk is stored in its image
	// (PrepareUpload, then UploadImage).
	PhaseUpload records.ActionPhase = "upload"
)

// Rule is one action's row.
type Rule struct {
	// VMStates and TaskStates are the states the action may start from
	// (TaskStates nil: only no task).
	VMStates   []records.VMState
	TaskStates []records.TaskState
	// Task is the task state shown while the action runs.
	Task records.TaskState
	// Ops are the agent operations, in order.
	Ops []string
	// End is the vm_state the action ends in ("" : the one it started
	// from).
	End records.VMState
}

// Rules are the actions' rows (reboot's is chosen by its type).
var Rules = map[string]Rule{
	Stop:    {VMStates: []records.VMState{records.VMActive, records.VMError}, Task: records.TaskPoweringOff, Ops: []string{OpStop}, End: records.VMStopped},
	Start:   {VMStates: []records.VMState{records.VMStopped}, Task: records.TaskPoweringOn, Ops: []string{OpStart}, End: records.VMActive},
	Pause:   {VMStates: []records.VMState{records.VMActive}, Task: records.TaskPausing, Ops: []string{OpPause}, End: records.VMPaused},
	Unpause: {VMStates: []records.VMState{records.VMPaused}, Task: records.TaskUnpausing, Ops: []string{OpUnpause}, End: records.VMActive},
	Suspend: {VMStates: []records.VMState{records.VMActive}, Task: records.TaskSuspending, Ops: []string{OpSuspend}, End: records.VMSuspended},
	Resume:  {VMStates: []records.VMState{records.VMSuspended}, Task: records.TaskResuming, Ops: []string{OpResume}, End: records.VMActive},
	Rescue: {VMStates: []records.VMState{records.VMActive, records.VMStopped, records.VMError}, Task: records.TaskRescuing,
		Ops: []string{OpRescue}, End: records.VMRescued},
	Unrescue: {VMStates: []records.VMState{records.VMRescued}, Task: records.TaskUnrescuing, Ops: []string{OpUnrescue}, End: records.VMActive},
	// A stopped server is rebuilt and stays stopped (Begin adds the stop).
	Rebuild: {VMStates: []records.VMState{records.VMActive, records.VMStopped, records.VMError}, Task: records.TaskRebuilding,
		Ops: []string{OpRebuild}, End: records.VMActive},
	Shelve: {VMStates: []records.VMState{records.VMActive, records.VMStopped, records.VMPaused, records.VMSuspended}, Task: records.TaskShelving,
		Ops: []string{OpShelve}, End: records.VMShelved},
	ShelveOffload: {VMStates: []records.VMState{records.VMShelved}, Task: records.TaskShelvingOffloading, Ops: []string{OpShelveUnplug},
		End: records.VMShelvedOffloaded},
	Unshelve: {VMStates: []records.VMState{records.VMShelved, records.VMShelvedOffloaded}, Task: records.TaskUnshelving,
		Ops: []string{OpStart}, End: records.VMActive},
	// A snapshot leaves the server in the state it was in.
	CreateImage:  {VMStates: snapshotStates, Task: records.TaskImageSnapshot, Ops: []string{OpSnapshot}},
	CreateBackup: {VMStates: snapshotStates, Task: records.TaskImageSnapshot, Ops: []string{OpSnapshot}},
}

// snapshotStates are the vm_states Nova snapshots a server in.
var snapshotStates = []records.VMState{records.VMActive, records.VMStopped, records.VMPaused, records.VMSuspended}

// softReboot and hardReboot are reboot's rows: a hard reboot may also
// take over a soft one in flight, and starts a server stopped, paused or
// suspended.
var (
	softReboot = Rule{VMStates: []records.VMState{records.VMActive}, Task: records.TaskRebooting, Ops: []string{OpReboot}, End: records.VMActive}
	hardReboot = Rule{VMStates: []records.VMState{records.VMActive, records.VMStopped, records.VMPaused, records.VMSuspended, records.VMError},
		TaskStates: []records.TaskState{records.TaskNone, records.TaskRebooting, records.TaskRebootingHard},
		Task:       records.TaskRebootingHard, Ops: []string{OpRebootHard}, End: records.VMActive}
)

// Request is what the API asked.
type Request struct {
	Action string
	// RebootType is SOFT or HARD, for reboot.
	RebootType string
	// Reason is the lock's locked_reason.
	Reason string
	// Admin is whether an admin asked (a lock they set binds the owner;
	// a locked server refuses everyone else's actions).
	Admin bool
	// Snapshot is the image a createImage or createBackup writes (one is
	// required), or a shelve (nil: the shelve writes none).
	Snapshot *records.Snapshot
	// Rescue is what a rescue boots (nil: the server's own image, a
	// legacy rescue).
	Rescue *records.Rescue
}

// Machine holds the rules' parameters.
type Machine struct {
	// ShelvedOffloadTime is Nova's shelved_offload_time: 0 offloads a
	// server as soon as it is shelved, a negative value never, a
	// positive one after that long (the conductor's sweep does it).
	ShelvedOffloadTime time.Duration
	// StallAfter is how long a step may stay with nothing in flight (its
	// agent could not be reached) before it is asked again.
	StallAfter time.Duration
	// ActionTimeout is how long an action may wait for its agent before
	// it ends as failed (TimedOut).
	ActionTimeout time.Duration
}

// Deadline is when inst's action must be fed an event if nothing else
// happens, and which, as seen at now: a shelved server past
// ShelvedOffloadTime is offloaded (OffloadDue); a step with nothing in
// flight for StallAfter is asked again (ResumeEv), or ends (TimedOut)
// when by then the action has also waited ActionTimeout for its agent;
// an unshelve whose boot ended unseen is finished (Booted or
// BootFailed); a move task StallAfter old is checked for its migration
// (MoveLost). A building unshelve waits for its boot, and an action an
// admin reset has nothing to resume.
func (mc Machine) Deadline(inst records.Instance, now time.Time) (time.Time, Event, bool) {
	switch {
	case inst.TaskState == records.TaskDeleting:
		return time.Time{}, Event{}, false
	case inst.Action == "":
		if inst.VMState == records.VMShelved && inst.TaskState == records.TaskNone && mc.ShelvedOffloadTime > 0 {
			return inst.ShelvedAt.Add(mc.ShelvedOffloadTime), Event{Kind: OffloadDue}, true
		}
		if records.MoveTask(inst.TaskState) {
			return inst.UpdatedAt.Add(mc.StallAfter), Event{Kind: MoveLost}, true
		}
		return time.Time{}, Event{}, false
	}
	ev, ok := mc.Resume(inst)
	if !ok {
		return time.Time{}, Event{}, false
	}
	stall := inst.UpdatedAt.Add(mc.StallAfter)
	if end := inst.ActionStarted.Add(mc.ActionTimeout); ev.Kind == ResumeEv && now.After(end) {
		if end.Before(stall) {
			end = stall // a step in flight is not timed out
		}
		return end, Event{Kind: TimedOut, Err: fmt.Sprintf("the agent of %s did not answer for %s", inst.Host, mc.ActionTimeout)}, true
	}
	return stall, ev, true
}

// Resume is the event that resumes inst's action after a restart, or
// when another replica takes it over: the phase's action is asked again
// (ResumeEv), or an unshelve whose boot ended is finished (Booted or
// BootFailed); a move's task is checked for its migration (MoveLost, if
// the flow's Due finds none). None for no action, a delete, a boot in
// flight (the boot resumes itself) or an action an admin reset
// (os-resetState).
func (mc Machine) Resume(inst records.Instance) (Event, bool) {
	switch {
	case inst.Action == "" && records.MoveTask(inst.TaskState):
		return Event{Kind: MoveLost}, true
	case inst.Action == "" || inst.TaskState == records.TaskDeleting || inst.VMState == records.VMBuilding,
		inst.TaskState == records.TaskNone && inst.ActionPhase != PhaseBoot:
		return Event{}, false
	case inst.ActionPhase == PhaseBoot && inst.VMState == records.VMActive:
		return Event{Kind: Booted}, true
	case inst.ActionPhase == PhaseBoot:
		return Event{Kind: BootFailed, Err: inst.Fault}, true
	}
	return Event{Kind: ResumeEv}, true
}

// InvalidStateError is a request the server's state does not allow
// (HTTP 409); its text is Nova's.
type InvalidStateError struct{ Msg string }

func (e *InvalidStateError) Error() string { return e.Msg }

// LockedError is a request on a server locked by someone else (HTTP 409,
// Nova's InstanceIsLocked).
type LockedError struct{ UUID string }

func (e *LockedError) Error() string { return fmt.Sprintf("Instance %s is locked", e.UUID) }

// ForbiddenError is an unlock the caller may not do (HTTP 403: the server
// was locked by an admin).
type ForbiddenError struct{ Msg string }

func (e *ForbiddenError) Error() string { return e.Msg }

// RuleFor returns the row of req's action.
func RuleFor(req Request) (Rule, bool) {
	if req.Action == Reboot {
		if req.RebootType == "HARD" {
			return hardReboot, true
		}
		return softReboot, true
	}
	r, ok := Rules[req.Action]
	return r, ok
}

// CheckLock refuses an action on a server locked by someone who is not
// the caller: Nova lets only an admin act on a locked server.
func CheckLock(inst records.Instance, admin bool) error {
	if inst.Locked && !admin {
		return &LockedError{UUID: inst.UUID}
	}
	return nil
}

// CheckState is Nova's check_instance_state for rule r.
func CheckState(inst records.Instance, action string, r Rule) error {
	if !slices.Contains(r.VMStates, inst.VMState) {
		return &InvalidStateError{Msg: fmt.Sprintf("Cannot '%s' instance %s while it is in vm_state %s", action, inst.UUID, inst.VMState)}
	}
	tasks := r.TaskStates
	if tasks == nil {
		tasks = []records.TaskState{records.TaskNone}
	}
	if !slices.Contains(tasks, inst.TaskState) {
		return &InvalidStateError{Msg: fmt.Sprintf("Cannot '%s' instance %s while it is in task_state %s", action, inst.UUID, inst.TaskState)}
	}
	return nil
}

// Action is one thing the conductor must do.
type Action struct {
	Kind ActionKind
	// Op and Host, for CallAgent.
	Op, Host string
	// Image is the snapshot's image, for PrepareUpload, UploadImage and
	// DropImage.
	Image string
}

// ActionKind names an action.
type ActionKind string

// Actions for the conductor.
const (
	// CallAgent: run Op on Host's agent. Answer: Done, or Failed when the
	// agent refused; no answer while it cannot be reached.
	CallAgent ActionKind = "call-agent"
	// ReleaseClaim: delete the instance's allocations (it leaves its
	// host). Answer: Released.
	ReleaseClaim ActionKind = "release-claim"
	// StartBoot: boot the instance again through package boot (an
	// unshelve of an offloaded server); the boot's end is fed back as
	// Booted or BootFailed.
	StartBoot ActionKind = "start-boot"
	// PrepareUpload: check that the snapshot's image still waits for its
	// data (queued) and give it the captured disk's format. Answer:
	// Prepared, or Failed when the image is gone.
	PrepareUpload ActionKind = "prepare-upload"
	// UploadImage: store the disk the host captured (OpSnapshot) as the
	// image's data, read from the host's agent, then rotate a backup's
	// older backups. Answer: Done, or Failed.
	UploadImage ActionKind = "upload-image"
	// DropImage: delete an image the action no longer needs: the one a
	// failed snapshot was writing, or an unshelved server's shelved
	// image. No answer: the action has ended.
	DropImage ActionKind = "drop-image"
)

// EventKind names what happened.
type EventKind string

// Events.
const (
	Done       EventKind = "done"
	Failed     EventKind = "failed"
	Released   EventKind = "released"
	Booted     EventKind = "booted"
	BootFailed EventKind = "boot-failed"
	// Prepared: the snapshot's image is ready for its data.
	Prepared EventKind = "prepared"
	// ResumeEv is fed by recovery and the sweep: repeat the phase's
	// action.
	ResumeEv EventKind = "resume"
	// TimedOut is fed by the sweep for an action whose agent never
	// answered: it ends as Failed.
	TimedOut EventKind = "timed-out"
	// OffloadDue is fed by the sweep for a shelved server past
	// shelved_offload_time.
	OffloadDue EventKind = "offload-due"
	// MoveLost is fed by the sweep for a server whose move task has had
	// no migration for StallAfter (the flow's Due checks there is none):
	// the server that set the task died before it recorded the move. As
	// Nova's compute does at start for an interrupted migration, the
	// task is cleared; the server stays as and where it is.
	MoveLost EventKind = "move-lost"
)

// Event is something that happened to an action.
type Event struct {
	Kind EventKind
	Err  string
}

// Busy reports whether inst has a lifecycle action in flight.
func Busy(inst records.Instance) bool { return inst.Action != "" }

// Begin starts req on inst: it checks the lock and the state, and returns
// the record to save and the first actions. Lock and unlock change only
// the record (no actions).
func (mc Machine) Begin(inst records.Instance, req Request, now time.Time) (records.Instance, []Action, error) {
	switch req.Action {
	case Lock:
		// Nova locks a server in any state; locking a locked one
		// changes nothing but the reason.
		inst.Locked, inst.LockedReason = true, req.Reason
		inst.LockedBy = "owner"
		if req.Admin {
			inst.LockedBy = "admin"
		}
		return inst, nil, nil
	case Unlock:
		if inst.Locked && inst.LockedBy == "admin" && !req.Admin {
			return inst, nil, &ForbiddenError{Msg: "Policy doesn't allow os_compute_api:os-lock-server:unlock:unlock_override to be performed."}
		}
		inst.Locked, inst.LockedBy, inst.LockedReason = false, "", ""
		return inst, nil, nil
	}
	r, ok := RuleFor(req)
	if !ok {
		return inst, nil, fmt.Errorf("unknown lifecycle action %q", req.Action)
	}
	if err := CheckLock(inst, req.Admin); err != nil {
		return inst, nil, err
	}
	if err := CheckState(inst, req.Action, r); err != nil {
		return inst, nil, err
	}
	ops := slices.Clone(r.Ops)
	if req.Action == Rebuild && inst.VMState == records.VMStopped {
		ops = append(ops, OpStop)
	}
	if (req.Action == CreateImage || req.Action == CreateBackup) && req.Snapshot == nil {
		return inst, nil, fmt.Errorf("%s of %s: no image to write", req.Action, inst.UUID)
	}
	inst.Snapshot = nil
	if req.Snapshot != nil && (req.Action == CreateImage || req.Action == CreateBackup || req.Action == Shelve) {
		sn := *req.Snapshot
		inst.Snapshot = &sn
		if req.Action == Shelve {
			ops = append(ops, OpSnapshot)
		}
	}
	if req.Action == Rescue {
		rs := records.Rescue{ImageID: inst.ImageRef}
		if req.Rescue != nil {
			rs = *req.Rescue
		}
		inst.Rescue = &rs
	}
	inst.Action, inst.ActionFrom, inst.ActionStarted, inst.ActionError = req.Action, inst.VMState, now, ""
	inst.TaskState = r.Task
	if req.Action == Unshelve && inst.VMState == records.VMShelvedOffloaded {
		inst.ActionPhase, inst.ActionOps = PhaseBoot, nil
		return inst, []Action{{Kind: StartBoot}}, nil
	}
	inst.ActionPhase, inst.ActionOps = PhaseAgent, ops
	return inst, []Action{{Kind: CallAgent, Op: ops[0], Host: inst.Host}}, nil
}

// Step applies ev to inst's action in flight. It never mutates its input.
func (mc Machine) Step(inst records.Instance, ev Event, now time.Time) (records.Instance, []Action, error) {
	inst.ActionOps = slices.Clone(inst.ActionOps)
	switch {
	case inst.Action == "" && ev.Kind == OffloadDue:
		if inst.VMState != records.VMShelved || inst.TaskState != records.TaskNone {
			return inst, nil, mc.illegal(inst, ev)
		}
		return mc.offload(inst, now)
	case inst.Action == "" && ev.Kind == MoveLost:
		if !records.MoveTask(inst.TaskState) {
			return inst, nil, mc.illegal(inst, ev)
		}
		inst.TaskState = records.TaskNone
		if inst.VMState != records.VMResized {
			inst.ResizeFlavor = nil // a resize's new flavor, saved for the quotas' count
		}
		return inst, nil, nil
	case inst.Action == "":
		return inst, nil, mc.illegal(inst, ev)
	case inst.ActionPhase == PhaseUpload && inst.Snapshot == nil:
		// No image to write (a record changed by hand): the action ends
		// as failed rather than upload to nothing.
		return mc.failed(inst, "the snapshot's image is not recorded"), nil, nil
	}
	switch string(inst.ActionPhase) + "/" + string(ev.Kind) {
	case string(PhaseAgent) + "/" + string(Done):
		return mc.agentDone(inst, now)
	case string(PhaseAgent) + "/" + string(Failed), string(PhaseAgent) + "/" + string(TimedOut),
		string(PhaseUpload) + "/" + string(Failed), string(PhaseUpload) + "/" + string(TimedOut):
		return mc.failed(inst, ev.Err), dropImage(inst), nil
	case string(PhaseUpload) + "/" + string(Prepared):
		if inst.TaskState != pendingUpload(inst.Action) {
			return inst, nil, mc.illegal(inst, ev)
		}
		inst.TaskState = uploading(inst.Action)
		return inst, []Action{{Kind: UploadImage, Image: inst.Snapshot.ImageID}}, nil
	case string(PhaseUpload) + "/" + string(ResumeEv):
		return inst, []Action{uploadStep(inst)}, nil
	case string(PhaseUpload) + "/" + string(Done):
		return mc.uploaded(inst, now)
	case string(PhaseAgent) + "/" + string(ResumeEv):
		return inst, []Action{{Kind: CallAgent, Op: inst.ActionOps[0], Host: inst.Host}}, nil
	case string(PhaseRelease) + "/" + string(Released):
		inst.Host = ""
		return mc.ended(inst, records.VMShelvedOffloaded), nil, nil
	case string(PhaseRelease) + "/" + string(ResumeEv), string(PhaseRelease) + "/" + string(TimedOut):
		return inst, []Action{{Kind: ReleaseClaim}}, nil
	case string(PhaseBoot) + "/" + string(Booted):
		return mc.unshelved(inst)
	case string(PhaseBoot) + "/" + string(BootFailed):
		// As Nova's: an unshelve that finds no host leaves the server
		// shelved_offloaded, the reason in its action.
		inst.Host = ""
		next := mc.ended(inst, records.VMShelvedOffloaded)
		next.ActionError, next.Fault = ev.Err, ""
		return next, nil, nil
	}
	return inst, nil, mc.illegal(inst, ev)
}

func (mc Machine) illegal(inst records.Instance, ev Event) error {
	return &IllegalError{Action: inst.Action, Phase: inst.ActionPhase, VMState: inst.VMState, Event: ev.Kind}
}

// IllegalError is an event not allowed in the action's phase (a late or
// repeated answer).
type IllegalError struct {
	Action  string
	Phase   records.ActionPhase
	VMState records.VMState
	Event   EventKind
}

func (e *IllegalError) Error() string {
	return fmt.Sprintf("lifecycle event %s is not allowed in action %q phase %q (vm_state %s)", e.Event, e.Action, e.Phase, e.VMState)
}

// agentDone: the operation is done; the next one, or the end (a
// snapshot's upload first).
func (mc Machine) agentDone(inst records.Instance, now time.Time) (records.Instance, []Action, error) {
	done := inst.ActionOps[0]
	if inst.ActionOps = inst.ActionOps[1:]; len(inst.ActionOps) > 0 {
		return inst, []Action{{Kind: CallAgent, Op: inst.ActionOps[0], Host: inst.Host}}, nil
	}
	if done == OpSnapshot && inst.Snapshot != nil {
		inst.ActionPhase, inst.TaskState = PhaseUpload, pendingUpload(inst.Action)
		return inst, []Action{uploadStep(inst)}, nil
	}
	return mc.actionEnd(inst, now)
}

// uploaded: the snapshot's image is active; the action ends (a shelve
// keeps the image as its shelved image).
func (mc Machine) uploaded(inst records.Instance, now time.Time) (records.Instance, []Action, error) {
	if inst.Action == Shelve {
		inst.ShelvedImage = inst.Snapshot.ImageID
	}
	inst.Snapshot = nil
	if inst.Action == CreateImage || inst.Action == CreateBackup {
		return mc.ended(inst, inst.ActionFrom), nil, nil
	}
	return mc.actionEnd(inst, now)
}

// pendingUpload and uploading are the task states of a snapshot's
// upload phase (a shelve's own).
func pendingUpload(action string) records.TaskState {
	if action == Shelve {
		return records.TaskShelvingImagePendingUpload
	}
	return records.TaskImagePendingUpload
}

func uploading(action string) records.TaskState {
	if action == Shelve {
		return records.TaskShelvingImageUploading
	}
	return records.TaskImageUploading
}

// uploadStep is the upload phase's action for inst's task state.
func uploadStep(inst records.Instance) Action {
	if inst.TaskState == uploading(inst.Action) {
		return Action{Kind: UploadImage, Image: inst.Snapshot.ImageID}
	}
	return Action{Kind: PrepareUpload, Image: inst.Snapshot.ImageID}
}

// dropImage is what a failed action leaves to do: the image its
// snapshot was writing is deleted.
func dropImage(inst records.Instance) []Action {
	if inst.Snapshot == nil {
		return nil
	}
	return []Action{{Kind: DropImage, Image: inst.Snapshot.ImageID}}
}

// actionEnd ends inst's action after its last agent operation.
func (mc Machine) actionEnd(inst records.Instance, now time.Time) (records.Instance, []Action, error) {
	r, _ := RuleFor(Request{Action: inst.Action, RebootType: rebootType(inst)})
	end := r.End
	if inst.Action == Rebuild && inst.ActionFrom == records.VMStopped {
		end = records.VMStopped
	}
	switch inst.Action {
	case ShelveOffload:
		inst.ActionPhase, inst.ActionOps = PhaseRelease, nil
		return inst, []Action{{Kind: ReleaseClaim}}, nil
	case Shelve:
		next := mc.ended(inst, records.VMShelved)
		next.ShelvedAt = now
		if mc.ShelvedOffloadTime == 0 {
			return mc.offload(next, now)
		}
		return next, nil, nil
	}
	if inst.Action == Unshelve {
		return mc.unshelved(inst)
	}
	return mc.ended(inst, end), nil, nil
}

// unshelved ends an unshelve: the guest runs (from its shelved image, if
// offloaded), and the shelved image is deleted, as Nova's.
func (mc Machine) unshelved(inst records.Instance) (records.Instance, []Action, error) {
	next := mc.ended(inst, records.VMActive)
	if next.ShelvedImage == "" {
		return next, nil, nil
	}
	next.ShelvedImage = ""
	return next, []Action{{Kind: DropImage, Image: inst.ShelvedImage}}, nil
}

// offload starts shelveOffload on a shelved server (right after shelve,
// or when shelved_offload_time has passed).
func (mc Machine) offload(inst records.Instance, now time.Time) (records.Instance, []Action, error) {
	r := Rules[ShelveOffload]
	inst.Action, inst.ActionFrom, inst.ActionStarted, inst.ActionError = ShelveOffload, inst.VMState, now, ""
	inst.TaskState, inst.ActionPhase, inst.ActionOps = r.Task, PhaseAgent, slices.Clone(r.Ops)
	return inst, []Action{{Kind: CallAgent, Op: inst.ActionOps[0], Host: inst.Host}}, nil
}

func rebootType(inst records.Instance) string {
	if inst.TaskState == records.TaskRebootingHard {
		return "HARD"
	}
	return "SOFT"
}

// ended clears the action and puts inst in vm.
func (mc Machine) ended(inst records.Instance, vm records.VMState) records.Instance {
	inst.VMState, inst.TaskState = vm, records.TaskNone
	inst.Action, inst.ActionPhase, inst.ActionOps, inst.ActionFrom = "", "", nil, ""
	inst.Snapshot = nil
	if vm != records.VMRescued {
		inst.Rescue = nil // unrescued, or the rescue failed
	}
	inst.PowerState = records.PowerStateOf(inst)
	if vm != records.VMError {
		inst.Fault = ""
	}
	return inst
}

// failed ends an action whose agent refused or never answered: the
// server stays in the vm_state it was in (a rebuild, whose guest may be
// half replaced, ends in ERROR), the reason kept with the action.
func (mc Machine) failed(inst records.Instance, why string) records.Instance {
	vm := inst.VMState
	if inst.Action == Rebuild {
		vm = records.VMError
		inst.Fault = fmt.Sprintf("rebuild on %s failed: %s", inst.Host, why)
	}
	if inst.Action == Unshelve && inst.VMState == records.VMShelved {
		vm = records.VMShelved
	}
	next := mc.ended(inst, vm)
	next.ActionError = why
	return next
}
