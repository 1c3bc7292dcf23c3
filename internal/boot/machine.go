// Package boot is the boot state machine, pure: the instance record and an
// event go in, the next record and the actions to perform come out. The
// conductor performs the actions (scheduling and claiming, the server
// group's late check, the cast to the agent, giving the claim back) and
// feeds their results back as events; the record, saved after every step,
// is what recovery resumes from. It mirrors package migration.
//
// Phases (records.Instance.BuildPhase), with the task state each shows:
//
//	schedule  (scheduling)  ──Scheduled──▶ confirm-group ──GroupConfirmed──▶ cast
//	              │              (no group: straight to cast)  │ GroupRefused
//	              │ NoValidHost                                ▼
//	              ▼                               schedule again (up to MaxLateChecks)
//	           release ──Released──▶ [error]
//	cast      (spawning)    ──Cast──▶ spawn        CastFailed ─▶ release
//	spawn     (spawning)    ──Spawned──▶ [active]  SpawnFailed ─▶ release
//	any but release ──TimedOut──▶ release (the guest is terminated, the host cleared)
//
// Resume repeats schedule, confirm-group, cast and release; in spawn it
// waits, as the agent keeps its report until a server takes it.
//
// An action answers with an event only for an outcome of the flow (a
// host, a refusal, the agent's report). An action that cannot be done now
// (the store or the agent cannot be reached) answers nothing: the driver
// stops, the record stays in its phase, and Resume, fed by recovery or by
// the sweep of stalled flows, repeats the phase's action. Every action is
// therefore idempotent: a repeated Schedule first gives back any claim an
// interrupted attempt left, and the agent answers a repeated cast from the guest it
// already has.
package boot

import (
	"fmt"
	"time"

	"keel/internal/records"
)

// Phases of a boot (records.Instance.BuildPhase).
const (
	PhaseSchedule records.BuildPhase = "schedule"
	PhaseConfirm  records.BuildPhase = "confirm-group"
	PhaseCast     records.BuildPhase = "cast"
	PhaseSpawn    records.BuildPhase = "spawn"
	PhaseRelease  records.BuildPhase = "release"
)

// EventKind names what happened.
type EventKind string

// Events.
const (
	Start          EventKind = "start"
	Scheduled      EventKind = "scheduled"
	NoValidHost    EventKind = "no-valid-host"
	GroupConfirmed EventKind = "group-confirmed"
	GroupRefused   EventKind = "group-refused"
	Cast           EventKind = "cast"
	CastFailed     EventKind = "cast-failed"
	Spawned        EventKind = "spawned"
	SpawnFailed    EventKind = "spawn-failed"
	Released       EventKind = "released"
	// TimedOut is fed by the sweep when a boot has been building longer
	// than instance_build_timeout.
	TimedOut EventKind = "timed-out"
	// Resume is fed by recovery after a restart, and by the sweep for a
	// flow that stalled (an action could not be done): the phase's action
	// is repeated.
	Resume EventKind = "resume"
)

// Event is something that happened to a boot.
type Event struct {
	Kind EventKind
	// Host and Zone are the chosen host and its zone, for Scheduled.
	Host, Zone string
	// Err is the reason, for the failure events.
	Err string
}

// ActionKind names what the conductor must do next.
type ActionKind string

// Actions.
const (
	// Schedule: give back any claim the instance holds (GiveBack), then
	// ask the scheduler for a host (ForcedHost, or the filters and weighers) and
	// claim it. Answer: Scheduled or NoValidHost.
	Schedule ActionKind = "schedule"
	// ConfirmGroup: the server group's late check (are the other members
	// still where the policy allows this host?). Answer: GroupConfirmed
	// or GroupRefused.
	ConfirmGroup ActionKind = "confirm-group"
	// CastBuild: build_and_run_instance on Host. Answer: Cast or
	// CastFailed; then the agent reports Spawned or SpawnFailed.
	CastBuild ActionKind = "cast-build"
	// Terminate: remove the guest from Host, best effort (the host's
	// audit removes a guest no instance claims). No answer.
	Terminate ActionKind = "terminate"
	// ReleaseClaim: delete the instance's allocations and take it out of
	// its server group. Answer: Released.
	ReleaseClaim ActionKind = "release-claim"
)

// Action is one thing the conductor must do.
type Action struct {
	Kind ActionKind
	Host string
	// GiveBack, for Schedule, says the instance may hold a claim from an
	// earlier attempt (a resumed phase, a host the group check refused):
	// it is given back first. A fresh boot holds none and skips the
	// write.
	GiveBack bool
}

// Machine holds the rules' parameters.
type Machine struct {
	// MaxLateChecks is how many times a boot whose host the server
	// group's late check refused is scheduled again (default 3).
	MaxLateChecks int
	// BuildTimeout is how long a boot may build before it times out
	// ([DEFAULT] instance_build_timeout); 0 turns it off.
	BuildTimeout time.Duration
	// StallAfter is how long a phase may stay with nothing in flight (an
	// action could not be done) before it is resumed.
	StallAfter time.Duration
}

// IllegalError is an event that is not allowed in the boot's phase.
type IllegalError struct {
	Phase   records.BuildPhase
	VMState records.VMState
	Event   EventKind
}

func (e *IllegalError) Error() string {
	return fmt.Sprintf("boot event %s is not allowed in phase %q (vm_state %s)", e.Event, e.Phase, e.VMState)
}

// Building reports whether inst's boot is still in flight.
func Building(inst records.Instance) bool {
	return inst.VMState == records.VMBuilding && inst.BuildPhase != ""
}

// Spawning reports whether inst's host has its guest, or had it: the
// boot's cast was answered and the boot waits for the spawn's report (a
// building instance without a phase was written before phases existed,
// when the cast came first). An agent decides from it, never from the
// phase names, so the machine may rename its phases alone.
func Spawning(inst records.Instance) bool {
	return inst.VMState == records.VMBuilding && (inst.BuildPhase == "" || inst.BuildPhase == PhaseSpawn)
}

// Deadline is when inst's boot must be fed an event if nothing else
// happens, and which, as seen at now: a boot created but never stepped
// is started after StallAfter; one building longer than BuildTimeout
// times out (in spawn it waits for nothing else: the agent keeps its
// report), before a stall that also passed; any other phase with nothing
// in flight for StallAfter is resumed. A release is repeated, never
// timed out. When none has passed, the earliest is returned.
func (mc Machine) Deadline(inst records.Instance, now time.Time) (time.Time, Event, bool) {
	if inst.VMState != records.VMBuilding || inst.TaskState == records.TaskDeleting {
		return time.Time{}, Event{}, false
	}
	type deadline struct {
		at time.Time
		ev Event
	}
	// In precedence order: the first that has passed fires.
	var ds []deadline
	stall := inst.UpdatedAt.Add(mc.StallAfter)
	if inst.BuildPhase == "" {
		ds = append(ds, deadline{stall, Event{Kind: Start}}) // created, its first step never saved
	}
	if mc.BuildTimeout > 0 && inst.BuildPhase != PhaseRelease {
		ds = append(ds, deadline{inst.BuildStarted().Add(mc.BuildTimeout),
			Event{Kind: TimedOut, Err: fmt.Sprintf("still building after %s (instance_build_timeout)", mc.BuildTimeout)}})
	}
	if inst.BuildPhase != "" && inst.BuildPhase != PhaseSpawn {
		ds = append(ds, deadline{stall, Event{Kind: Resume}})
	}
	if len(ds) == 0 {
		return time.Time{}, Event{}, false
	}
	first := ds[0]
	for _, d := range ds {
		if now.After(d.at) {
			return d.at, d.ev, true
		}
		if d.at.Before(first.at) {
			first = d
		}
	}
	return first.at, first.ev, true
}

// Resume is the event that resumes inst's boot after a restart, or when
// another replica takes it over: Start for a boot created but never
// stepped, Resume for one in flight.
func (mc Machine) Resume(inst records.Instance) (Event, bool) {
	switch {
	case inst.VMState != records.VMBuilding || inst.TaskState == records.TaskDeleting:
		return Event{}, false
	case inst.BuildPhase == "":
		return Event{Kind: Start}, true
	}
	return Event{Kind: Resume}, true
}

// Step applies ev to inst at now. It never mutates its input.
func (mc Machine) Step(inst records.Instance, ev Event, _ time.Time) (records.Instance, []Action, error) {
	if inst.VMState != "" && inst.VMState != records.VMBuilding {
		// Ended: a late answer or report (the conductor deals with a
		// guest that should not be there).
		return inst, nil, &IllegalError{Phase: inst.BuildPhase, VMState: inst.VMState, Event: ev.Kind}
	}
	t, ok := transitions[transitionKey{inst.BuildPhase, ev.Kind}]
	if !ok {
		return inst, nil, &IllegalError{Phase: inst.BuildPhase, VMState: inst.VMState, Event: ev.Kind}
	}
	next, acts := t(mc, inst, ev)
	return next, acts, nil
}

type transitionKey struct {
	phase records.BuildPhase
	event EventKind
}

type transition func(mc Machine, inst records.Instance, ev Event) (records.Instance, []Action)

var transitions = map[transitionKey]transition{
	{"", Start}:                    start,
	{PhaseSchedule, Scheduled}:     scheduled,
	{PhaseSchedule, NoValidHost}:   noValidHost,
	{PhaseConfirm, GroupConfirmed}: groupConfirmed,
	{PhaseConfirm, GroupRefused}:   groupRefused,
	{PhaseCast, Cast}:              cast,
	{PhaseCast, CastFailed}:        castFailed,
	{PhaseCast, Spawned}:           spawned, // the report outran the cast's answer
	{PhaseCast, SpawnFailed}:       spawnFailed,
	{PhaseSpawn, Spawned}:          spawned,
	{PhaseSpawn, SpawnFailed}:      spawnFailed,
	{PhaseSchedule, TimedOut}:      timedOut,
	{PhaseConfirm, TimedOut}:       timedOut,
	{PhaseCast, TimedOut}:          timedOut,
	{PhaseSpawn, TimedOut}:         timedOut,
	{PhaseRelease, Released}:       released,
	{PhaseSchedule, Resume}:        again(Schedule),
	{PhaseConfirm, Resume}:         again(ConfirmGroup),
	{PhaseCast, Resume}:            again(CastBuild),
	{PhaseSpawn, Resume}:           waitReport,
	{PhaseRelease, Resume}:         again(ReleaseClaim),
}

// again repeats the phase's action (after a restart or a stall).
func again(kind ActionKind) transition {
	return func(_ Machine, inst records.Instance, _ Event) (records.Instance, []Action) {
		host := ""
		if kind == CastBuild {
			host = inst.Host
		}
		return inst, []Action{{Kind: kind, Host: host, GiveBack: kind == Schedule}}
	}
}

// waitReport: the agent took the build; its report (kept by the agent
// until a server takes it) ends the boot, or instance_build_timeout does.
func waitReport(_ Machine, inst records.Instance, _ Event) (records.Instance, []Action) {
	return inst, nil
}

// start: the API accepted the request; find and claim a host.
func start(_ Machine, inst records.Instance, _ Event) (records.Instance, []Action) {
	inst.VMState, inst.TaskState, inst.BuildPhase = records.VMBuilding, records.TaskScheduling, PhaseSchedule
	inst.RequestedZone, inst.Host, inst.Fault = inst.Zone, "", ""
	return inst, []Action{{Kind: Schedule}}
}

func scheduled(_ Machine, inst records.Instance, ev Event) (records.Instance, []Action) {
	inst.Host, inst.BuildAttempts = ev.Host, inst.BuildAttempts+1
	// As Nova's conductor: an instance booted without a zone is in its
	// host's zone from now on.
	inst.Zone = inst.RequestedZone
	if inst.Zone == "" {
		inst.Zone = ev.Zone
	}
	if inst.Hints != nil && inst.Hints.Group != "" {
		inst.BuildPhase = PhaseConfirm
		return inst, []Action{{Kind: ConfirmGroup}}
	}
	return casting(inst)
}

func casting(inst records.Instance) (records.Instance, []Action) {
	inst.BuildPhase, inst.TaskState = PhaseCast, records.TaskSpawning
	return inst, []Action{{Kind: CastBuild, Host: inst.Host}}
}

func noValidHost(_ Machine, inst records.Instance, ev Event) (records.Instance, []Action) {
	return fail(inst, ev.Err, false)
}

func groupConfirmed(_ Machine, inst records.Instance, _ Event) (records.Instance, []Action) {
	return casting(inst)
}

// groupRefused: another keel server placed a member of the group
// meanwhile and this host now breaks its policy (Nova's late check on the
// compute host): schedule again, knowing where that member went.
func groupRefused(mc Machine, inst records.Instance, ev Event) (records.Instance, []Action) {
	limit := mc.MaxLateChecks
	if limit <= 0 {
		limit = 3
	}
	if inst.BuildAttempts >= limit {
		return fail(inst, fmt.Sprintf("No valid host was found. Server group %s's policy no longer allowed the chosen host %s after %d attempts (other members were placed meanwhile): %s",
			inst.Hints.Group, inst.Host, inst.BuildAttempts, ev.Err), true)
	}
	inst.BuildPhase, inst.Host, inst.Zone, inst.TaskState = PhaseSchedule, "", inst.RequestedZone, records.TaskScheduling
	return inst, []Action{{Kind: Schedule, GiveBack: true}}
}

func cast(_ Machine, inst records.Instance, _ Event) (records.Instance, []Action) {
	inst.BuildPhase = PhaseSpawn
	return inst, nil
}

func castFailed(_ Machine, inst records.Instance, ev Event) (records.Instance, []Action) {
	return fail(inst, ev.Err, false)
}

func spawned(_ Machine, inst records.Instance, _ Event) (records.Instance, []Action) {
	inst.VMState, inst.TaskState, inst.BuildPhase = records.VMActive, records.TaskNone, ""
	return inst, nil
}

func spawnFailed(_ Machine, inst records.Instance, ev Event) (records.Instance, []Action) {
	return fail(inst, fmt.Sprintf("build on %s failed: %s", inst.Host, ev.Err), false)
}

// timedOut: the boot took longer than instance_build_timeout (the agent
// never reported, or its host went away): the guest, if any, is removed
// and the instance leaves its host, so the host's audit removes whatever
// the terminate could not reach.
func timedOut(_ Machine, inst records.Instance, ev Event) (records.Instance, []Action) {
	host := inst.Host
	next, acts := fail(inst, fmt.Sprintf("build on %s timed out: %s", host, ev.Err), true)
	return next, append([]Action{{Kind: Terminate, Host: host}}, acts...)
}

// fail gives the claim back; released then ends the boot in ERROR with
// the fault. clearHost takes the instance off the host it was given.
func fail(inst records.Instance, fault string, clearHost bool) (records.Instance, []Action) {
	inst.BuildPhase, inst.Fault = PhaseRelease, fault
	if clearHost {
		inst.Host = ""
	}
	return inst, []Action{{Kind: ReleaseClaim}}
}

func released(_ Machine, inst records.Instance, _ Event) (records.Instance, []Action) {
	inst.VMState, inst.TaskState, inst.BuildPhase = records.VMError, records.TaskNone, ""
	return inst, nil
}
