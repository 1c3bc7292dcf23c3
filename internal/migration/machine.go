package migration

import (
	"fmt"
	"time"

	"keel/internal/records"
)

// Phases of a live migration (records.Migration.Phase).
const (
	PhaseSchedule     records.MigrationPhase = "schedule"
	PhaseCheck        records.MigrationPhase = "check"
	PhaseRelease      records.MigrationPhase = "release"
	PhaseQueue        records.MigrationPhase = "queue"
	PhasePrepare      records.MigrationPhase = "prepare"
	PhaseCopy         records.MigrationPhase = "copy"
	PhasePostSource   records.MigrationPhase = "post-source"
	PhasePostDest     records.MigrationPhase = "post-dest"
	PhaseFinish       records.MigrationPhase = "finish"
	PhaseRollbackDest records.MigrationPhase = "rollback-dest"
	PhaseRevert       records.MigrationPhase = "revert"
	PhaseDone         records.MigrationPhase = "done"
)

// EventKind names what happened.
type EventKind string

// Events.
const (
	Start          EventKind = "start"
	Claimed        EventKind = "claimed"
	NoValidHost    EventKind = "no-valid-host"
	CheckPassed    EventKind = "check-passed"
	CheckFailed    EventKind = "check-failed"
	Released       EventKind = "released"
	SlotAcquired   EventKind = "slot-acquired"
	Prepared       EventKind = "prepared"
	PrepareFailed  EventKind = "prepare-failed"
	Progress       EventKind = "progress"
	Copied         EventKind = "copied"
	CopyFailed     EventKind = "copy-failed"
	SourceDone     EventKind = "source-done"
	DestDone       EventKind = "dest-done"
	Finished       EventKind = "finished"
	StepFailed     EventKind = "step-failed"
	DestRolledBack EventKind = "dest-rolled-back"
	Reverted       EventKind = "reverted"
	Abort          EventKind = "abort"
	ForceComplete  EventKind = "force-complete"
	// Resume is fed by recovery after a restart of the server, and by the
	// sweep for a migration whose step stalled (an action could not be
	// done): the step in flight may or may not have happened, so each
	// phase either repeats its (idempotent) action or, before the copy,
	// rolls back.
	Resume EventKind = "resume"
	// Stalled is fed by the sweep when the memory copy has gone without a
	// report from the source for migration_stall_timeout (the source
	// crashed or was cut off, perhaps after an abort): the copy is
	// aborted, best effort, and the migration rolled back.
	Stalled EventKind = "stalled"
	// Reset is an operator's way out of a migration a bug left stuck
	// (`keel migration reset`): before the guest moved it is rolled back,
	// after it the migration is finished on the destination; either way it
	// ends in error.
	Reset EventKind = "reset"
)

// Event is something that happened to a migration.
type Event struct {
	Kind EventKind
	// Host is the destination for Claimed.
	Host string
	// Err is the reason for the failure events.
	Err string
	// Data is the destination's migrate data for Prepared (e.g. the URI
	// the source's driver sends to).
	Data map[string]string
	// Memory progress for Progress (bytes).
	Total, Processed, Remaining int64
	// Restarted: a CopyFailed whose copy the source agent's restart cut
	// short (the migration ends Interrupted).
	Restarted bool
}

// ActionKind names what the conductor must do next.
type ActionKind string

// Actions.
const (
	// ClaimDestination: ask the scheduler for a destination (excluding the
	// source and TriedHosts, or checking RequestedHost) and move the
	// allocations in one store write. Answer: Claimed or NoValidHost.
	ClaimDestination ActionKind = "claim-destination"
	// CheckDestination: check_can_live_migrate_destination on Host (which
	// calls the source's check). Answer: CheckPassed or CheckFailed.
	CheckDestination ActionKind = "check-destination"
	// ReleaseDestination: give the destination claim back to the source
	// (allocations as before the claim). Answer: Released.
	ReleaseDestination ActionKind = "release-destination"
	// AcquireSlot: wait for one of the source's
	// max_concurrent_live_migrations slots. Answer: SlotAcquired.
	AcquireSlot ActionKind = "acquire-slot"
	// ReleaseSlot frees the source slot. No answer.
	ReleaseSlot ActionKind = "release-slot"
	// HoldSlot counts a slot a running copy already holds (after a restart
	// of the server). No answer.
	HoldSlot ActionKind = "hold-slot"
	// CheckCopy asks the source (Host), after a restart of the server or a
	// take-over, whether it runs the copy (a live migration's memory, a
	// cold move's disk) or holds its unreported end: if it does neither,
	// the cast never reached it, and it reports the copy ended, interrupted
	// (CopyFailed with Restarted), so the move rolls back at once instead
	// of waiting for CopyStallTimeout. No answer (the source's report is
	// the answer; a source that cannot be asked leaves the stall deadline).
	CheckCopy ActionKind = "check-copy"
	// PreLiveMigration on the destination. Answer: Prepared or
	// PrepareFailed.
	PreLiveMigration ActionKind = "pre-live-migration"
	// StartCopy: cast live_migration to the source's driver with Data.
	// Answers: Progress*, then Copied or CopyFailed.
	StartCopy ActionKind = "start-copy"
	// AbortCopy / ForceCopy: migrate_cancel / force complete on the source.
	AbortCopy ActionKind = "abort-copy"
	ForceCopy ActionKind = "force-copy"
	// PostAtSource: the source drops the guest and updates its tracker and
	// host record. Answer: SourceDone or StepFailed.
	PostAtSource ActionKind = "post-at-source"
	// PostAtDest: post_live_migration_at_destination — the destination
	// takes the guest and updates its tracker and host record. Answer:
	// DestDone or StepFailed.
	PostAtDest ActionKind = "post-at-destination"
	// FinishAllocations deletes the migration consumer's (source)
	// allocations. Answer: Finished.
	FinishAllocations ActionKind = "finish-allocations"
	// RollbackAtDest: rollback_live_migration_at_destination. Answer:
	// DestRolledBack.
	RollbackAtDest ActionKind = "rollback-at-destination"
	// RevertAllocations: the instance's allocation returns to the source,
	// the destination claim is dropped. Answer: Reverted.
	RevertAllocations ActionKind = "revert-allocations"
	// Terminate: remove the instance's guest from Host, best effort (its
	// audit removes a guest no instance of the host claims). No answer.
	Terminate ActionKind = "terminate"
	// SettleInstance: clear the instance's task state and set its host to
	// Host. No answer.
	SettleInstance ActionKind = "settle-instance"
)

// Action is one thing the conductor must do.
type Action struct {
	Kind ActionKind
	Host string
	Data map[string]string
	// Flavor and VMState, for SettleInstance, are the instance's flavor
	// and vm_state from now on (nil and "" keep them).
	Flavor  *records.Flavor
	VMState records.VMState
	// PowerState, for SettleInstance, is the guest's power state from now
	// on (records.Power*; 0 keeps it): a resized server's shows whether
	// its guest runs.
	PowerState int
}

// Machine holds the rules' parameters.
type Machine struct {
	// MaxAttempts is how many destinations are claimed and checked before
	// the migration ends in error ([scheduler] max_attempts).
	MaxAttempts int

	// The deadlines (see Deadline); 0 turns each off.
	// CopyStallTimeout is how long a copy (a live migration's memory, a
	// cold move's disk, an evacuation's rebuild) may go without a report
	// before it is Stalled ([keel] migration_stall_timeout).
	CopyStallTimeout time.Duration
	// ConfirmWindow confirms a move left in VERIFY_RESIZE this long
	// (Nova's resize_confirm_window).
	ConfirmWindow time.Duration
	// StallAfter is how long a step may stay with nothing in flight (an
	// action could not be done) before it is resumed.
	StallAfter time.Duration
}

// IllegalError is an event that is not allowed in the migration's phase.
type IllegalError struct {
	Phase  records.MigrationPhase
	Status records.MigrationStatus
	Event  EventKind
}

func (e *IllegalError) Error() string {
	return fmt.Sprintf("event %s is not allowed in phase %s (status %s)", e.Event, e.Phase, e.Status)
}

// Step applies ev to m at now. It never mutates its input.
func (mc Machine) Step(m records.Migration, ev Event, now time.Time) (records.Migration, []Action, error) {
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	if ev.Kind == Stalled && ev.Err == "" {
		ev.Err = stallReason(m, now)
	}
	if records.MigrationTerminal(m.Status) {
		return m, nil, &IllegalError{Phase: m.Phase, Status: m.Status, Event: ev.Kind}
	}
	t, ok := tableOf(m.Type)[transitionKey{m.Phase, ev.Kind}]
	if !ok {
		return m, nil, &IllegalError{Phase: m.Phase, Status: m.Status, Event: ev.Kind}
	}
	next, acts := t(mc, m, ev)
	return next, acts, nil
}

// stallReason says how long a Stalled copy went without a report.
func stallReason(m records.Migration, now time.Time) string {
	idle := now.Sub(m.UpdatedAt).Round(time.Second)
	if m.Phase == PhaseRebuild {
		return fmt.Sprintf("no report from the destination for %s", idle)
	}
	return fmt.Sprintf("none for %s (migration_stall_timeout)", idle)
}

// Deadline is when m must be fed an event if nothing else happens, and
// which: a copy with no report for CopyStallTimeout is Stalled; a move
// in VERIFY_RESIZE past ConfirmWindow is confirmed; an evacuation waits
// for its source to come back (SourceBack, due at every sweep: whoever
// feeds it checks the source's service is up); any other step with
// nothing in flight for StallAfter is resumed (a live migration waiting
// in its replica's slot queue is not stalled: whoever feeds it checks).
// Each phase has one deadline, so now does not change which.
func (mc Machine) Deadline(m records.Migration, _ time.Time) (time.Time, Event, bool) {
	if records.MigrationTerminal(m.Status) {
		return time.Time{}, Event{}, false
	}
	switch m.Phase {
	case PhaseCopy, PhaseResizeSource, PhaseRebuild:
		if mc.CopyStallTimeout <= 0 {
			return time.Time{}, Event{}, false
		}
		return m.UpdatedAt.Add(mc.CopyStallTimeout), Event{Kind: Stalled}, true
	case PhaseAwaitSource:
		return time.Time{}, Event{Kind: SourceBack}, true
	case PhaseVerify:
		if mc.ConfirmWindow <= 0 {
			return time.Time{}, Event{}, false // the user decides
		}
		return m.UpdatedAt.Add(mc.ConfirmWindow), Event{Kind: Confirm}, true
	}
	return m.UpdatedAt.Add(mc.StallAfter), Event{Kind: Resume}, true
}

// Resume is the event that resumes m after a restart, or when another
// replica takes it over: Resume for every migration in flight, also one
// recorded with its instance's task (store.BeginMove) whose first step
// was never saved (no phase: the server stopped in between), which ends
// as interrupted before anything moved.
func (mc Machine) Resume(m records.Migration) (Event, bool) {
	if records.MigrationTerminal(m.Status) {
		return Event{}, false
	}
	return Event{Kind: Resume}, true
}

// tableOf is the transition table of a migration type.
func tableOf(typ string) map[transitionKey]transition {
	switch typ {
	case records.MigrationTypeCold, records.MigrationTypeResize:
		return resizeTransitions
	case records.MigrationTypeEvac:
		return evacuateTransitions
	}
	return transitions
}

type transitionKey struct {
	phase records.MigrationPhase
	event EventKind
}

type transition func(mc Machine, m records.Migration, ev Event) (records.Migration, []Action)

var transitions = map[transitionKey]transition{
	{"", Start}:                         start,
	{PhaseSchedule, Claimed}:            claimed,
	{PhaseSchedule, NoValidHost}:        noValidHost,
	{PhaseCheck, CheckPassed}:           checkPassed,
	{PhaseCheck, CheckFailed}:           checkFailed,
	{PhaseRelease, Released}:            released,
	{PhaseQueue, SlotAcquired}:          slotAcquired,
	{PhaseQueue, Abort}:                 abortQueued,
	{PhasePrepare, Prepared}:            prepared,
	{PhasePrepare, PrepareFailed}:       prepareFailed,
	{PhasePrepare, Abort}:               abortLater,
	{PhaseCopy, Progress}:               progress,
	{PhaseCopy, Copied}:                 copied,
	{PhaseCopy, CopyFailed}:             copyFailed,
	{PhaseCopy, Abort}:                  abortCopy,
	{PhaseCopy, ForceComplete}:          forceComplete,
	{PhasePostSource, SourceDone}:       sourceDone,
	{PhasePostSource, StepFailed}:       postFailed,
	{PhasePostDest, DestDone}:           destDone,
	{PhasePostDest, StepFailed}:         postFailed,
	{PhaseFinish, Finished}:             finished,
	{PhaseRollbackDest, DestRolledBack}: destRolledBack,
	{PhaseRevert, Reverted}:             reverted,

	{"", Resume}:                resumeBeforeCopy,
	{PhaseSchedule, Resume}:     resumeBeforeCopy,
	{PhaseCheck, Resume}:        resumeBeforeCopy,
	{PhaseRelease, Resume}:      resumeBeforeCopy,
	{PhaseQueue, Resume}:        resumeBeforeCopy,
	{PhasePrepare, Resume}:      resumePrepare,
	{PhaseCopy, Resume}:         resumeCopy,
	{PhasePostSource, Resume}:   repeat(PostAtSource, func(m records.Migration) string { return m.SourceHost }),
	{PhasePostDest, Resume}:     repeat(PostAtDest, func(m records.Migration) string { return m.DestHost }),
	{PhaseFinish, Resume}:       repeat(FinishAllocations, func(records.Migration) string { return "" }),
	{PhaseRollbackDest, Resume}: repeat(RollbackAtDest, func(m records.Migration) string { return m.DestHost }),
	{PhaseRevert, Resume}:       repeat(RevertAllocations, func(records.Migration) string { return "" }),

	{PhaseCopy, Stalled}: stalled,

	{PhaseSchedule, Reset}:     resetBeforeCopy,
	{PhaseCheck, Reset}:        resetBeforeCopy,
	{PhaseRelease, Reset}:      resetBeforeCopy,
	{PhaseQueue, Reset}:        resetBeforeCopy,
	{PhasePrepare, Reset}:      resetPrepared,
	{PhaseCopy, Reset}:         resetCopy,
	{PhasePostSource, Reset}:   resetAfterCopy,
	{PhasePostDest, Reset}:     resetAfterCopy,
	{PhaseFinish, Reset}:       resetAfterCopy,
	{PhaseRollbackDest, Reset}: resetRollback,
	{PhaseRevert, Reset}:       resetRollback,
}

const resetByOperator = "reset by an operator"

// stalled: no report from the source for too long. Ask it to stop
// copying (it may be back, or never hear), and roll the destination back.
func stalled(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	next, acts := releasing(rollback(m, records.MigrationError, "no progress report from the source "+m.SourceHost+": "+ev.Err+"; the copy was aborted and rolled back"))
	return next, append([]Action{{Kind: AbortCopy, Host: m.SourceHost}}, acts...)
}

// resetBeforeCopy: nothing has moved; give the destination claim back.
func resetBeforeCopy(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	next, acts := releasing(m, nil)
	next.Phase, next.Outcome, next.Error = PhaseRevert, records.MigrationError, resetByOperator
	return next, append(acts, Action{Kind: RevertAllocations})
}

// resetPrepared: the destination may be set up; roll it back.
func resetPrepared(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	return releasing(rollback(m, records.MigrationError, resetByOperator))
}

// resetCopy: stop the copy, best effort, and roll back.
func resetCopy(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	next, acts := releasing(rollback(m, records.MigrationError, resetByOperator))
	return next, append([]Action{{Kind: AbortCopy, Host: m.SourceHost}}, acts...)
}

// resetAfterCopy: the guest runs on the destination; finish there.
func resetAfterCopy(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase, m.Outcome, m.Error = PhaseFinish, records.MigrationError, resetByOperator
	return m, []Action{{Kind: FinishAllocations}}
}

// resetRollback: already rolling back; repeat the step in flight.
func resetRollback(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Outcome, m.Error = records.MigrationError, joinReason(m.Error, resetByOperator)
	if m.Phase == PhaseRollbackDest {
		return m, []Action{{Kind: RollbackAtDest, Host: m.DestHost}}
	}
	return m, []Action{{Kind: RevertAllocations}}
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

const interrupted = "interrupted by a restart of the server, or by a step that could not be done, before the memory copy began"

// resumeBeforeCopy: nothing has moved yet; give the destination claim
// back (a no-op if the claim never committed) and end in error.
func resumeBeforeCopy(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase, m.Outcome, m.Error, m.Interrupted = PhaseRevert, records.MigrationError, interrupted, true
	return m, []Action{{Kind: RevertAllocations}}
}

// resumePrepare: pre_live_migration may have set the destination up. The
// source slot is freed (a no-op after a restart, which lost it).
func resumePrepare(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Interrupted = true
	return releasing(rollback(m, records.MigrationError, interrupted))
}

// resumeCopy: the copy runs on the source agent, which reports its end
// (retrying until a server answers; after its own restart it reports the
// copy interrupted). The slot it holds is counted again, and the source
// is asked whether the copy's cast reached it (the server may have been
// killed between saving this phase and casting the copy).
func resumeCopy(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	return m, []Action{{Kind: HoldSlot, Host: m.SourceHost}, {Kind: CheckCopy, Host: m.SourceHost}}
}

func repeat(kind ActionKind, host func(records.Migration) string) transition {
	return func(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
		return m, []Action{{Kind: kind, Host: host(m)}}
	}
}

// start: the API accepted the request; claim a destination.
func start(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Status, m.Phase = records.MigrationAccepted, PhaseSchedule
	return m, []Action{{Kind: ClaimDestination, Host: m.RequestedHost}}
}

func claimed(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m.DestHost, m.Phase = ev.Host, PhaseCheck
	m.Attempts++
	return m, []Action{{Kind: CheckDestination, Host: ev.Host}}
}

func noValidHost(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	return finish(m, records.MigrationError, ev.Err, m.SourceHost)
}

func checkPassed(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Status, m.Phase = records.MigrationQueued, PhaseQueue
	return m, []Action{{Kind: AcquireSlot, Host: m.SourceHost}}
}

// checkFailed gives the destination back; released decides whether to try
// another host.
func checkFailed(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m.Phase = PhaseRelease
	m.TriedHosts = append(m.TriedHosts, m.DestHost)
	m.Error = fmt.Sprintf("destination %s refused: %s", m.DestHost, ev.Err)
	return m, []Action{{Kind: ReleaseDestination, Host: m.DestHost}}
}

func released(mc Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	failedDest := m.DestHost
	m.DestHost = ""
	if m.RequestedHost != "" || m.Attempts >= max(mc.MaxAttempts, 1) {
		reason := m.Error
		if m.RequestedHost == "" {
			reason = fmt.Sprintf("no destination passed the pre-checks after %d attempts; last: %s", m.Attempts, m.Error)
		}
		m.DestHost = failedDest
		return finish(m, records.MigrationError, reason, m.SourceHost)
	}
	m.Phase = PhaseSchedule
	return m, []Action{{Kind: ClaimDestination}}
}

func slotAcquired(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Status, m.Phase = records.MigrationPreparing, PhasePrepare
	return m, []Action{{Kind: PreLiveMigration, Host: m.DestHost}}
}

func abortQueued(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.AbortRequested = true
	m.Outcome, m.Error = records.MigrationCancelled, "aborted by request"
	m.Phase = PhaseRevert
	return m, []Action{{Kind: RevertAllocations}}
}

func prepared(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	if m.AbortRequested {
		return releasing(rollback(m, records.MigrationCancelled, "aborted by request"))
	}
	m.Status, m.Phase = records.MigrationRunning, PhaseCopy
	return m, []Action{{Kind: StartCopy, Host: m.SourceHost, Data: ev.Data}}
}

func prepareFailed(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	if m.AbortRequested {
		return releasing(rollback(m, records.MigrationCancelled, "aborted by request"))
	}
	return releasing(rollback(m, records.MigrationFailed, "pre_live_migration on "+m.DestHost+" failed: "+ev.Err))
}

// releasing prepends freeing the source's slot (held from SlotAcquired
// until the copy ends).
func releasing(m records.Migration, acts []Action) (records.Migration, []Action) {
	return m, append([]Action{{Kind: ReleaseSlot, Host: m.SourceHost}}, acts...)
}

// abortLater records an abort that arrives while a step is in flight.
func abortLater(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.AbortRequested = true
	return m, nil
}

func progress(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m.MemoryTotalBytes, m.MemoryProcessedBytes, m.MemoryRemainingBytes = ev.Total, ev.Processed, ev.Remaining
	return m, nil
}

// copied: the copy ended. A driver that reported its final figures (the
// last progress with nothing remaining, as the QEMU driver sends what QEMU
// counted) keeps them; otherwise the whole RAM counts as processed.
func copied(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase = PhasePostSource
	if m.MemoryRemainingBytes != 0 || m.MemoryProcessedBytes == 0 {
		m.MemoryProcessedBytes = m.MemoryTotalBytes
	}
	m.MemoryRemainingBytes = 0
	return releasing(m, []Action{{Kind: PostAtSource, Host: m.SourceHost}})
}

func copyFailed(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	if m.AbortRequested {
		return releasing(rollback(m, records.MigrationCancelled, "aborted by request"))
	}
	m.Interrupted = ev.Restarted
	return releasing(rollback(m, records.MigrationFailed, "live migration from "+m.SourceHost+" to "+m.DestHost+" failed: "+ev.Err))
}

func abortCopy(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.AbortRequested = true
	return m, []Action{{Kind: AbortCopy, Host: m.SourceHost}}
}

func forceComplete(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.ForceComplete = true
	return m, []Action{{Kind: ForceCopy, Host: m.SourceHost}}
}

func sourceDone(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase = PhasePostDest
	return m, []Action{{Kind: PostAtDest, Host: m.DestHost}}
}

// postFailed: the guest already runs on the destination, so there is no
// rolling back; the migration ends in error with the instance on the
// destination and the source allocation released (the audits heal the
// records). A failed source step still hands the guest to the
// destination (post_live_migration_at_destination), or the destination
// would never take it.
func postFailed(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	msg := fmt.Sprintf("post-migration step %s failed: %s", m.Phase, ev.Err)
	if m.Outcome == records.MigrationError && m.Error != "" {
		msg = m.Error + "; " + msg
	}
	m.Outcome, m.Error = records.MigrationError, msg
	if m.Phase == PhasePostSource {
		m.Phase = PhasePostDest
		return m, []Action{{Kind: PostAtDest, Host: m.DestHost}}
	}
	m.Phase = PhaseFinish
	return m, []Action{{Kind: FinishAllocations}}
}

func destDone(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase = PhaseFinish
	return m, []Action{{Kind: FinishAllocations}}
}

func finished(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	if m.Outcome != "" {
		return finish(m, m.Outcome, m.Error, m.DestHost)
	}
	return finish(m, records.MigrationCompleted, "", m.DestHost)
}

// destRolledBack: the destination rolled back, or could not (Err says
// why; the record keeps it, and the destination's audit removes what is
// left).
func destRolledBack(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m = withReason(m, ev)
	m.Phase = PhaseRevert
	return m, []Action{{Kind: RevertAllocations}}
}

func reverted(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	return finish(m, m.Outcome, m.Error, m.SourceHost)
}

func rollback(m records.Migration, outcome records.MigrationStatus, reason string) (records.Migration, []Action) {
	m.Phase, m.Outcome, m.Error = PhaseRollbackDest, outcome, reason
	return m, []Action{{Kind: RollbackAtDest, Host: m.DestHost}}
}

func finish(m records.Migration, status records.MigrationStatus, reason, host string) (records.Migration, []Action) {
	m.Status, m.Phase, m.Error, m.Outcome = status, PhaseDone, reason, ""
	return m, []Action{{Kind: SettleInstance, Host: host}}
}
