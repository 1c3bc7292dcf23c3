package migration

import "keel/internal/records"

// The cold migration and resize machine (records.Migration.Type
// "migration" or "resize"), Nova's semantics: the guest is stopped and its
// disk moved, then it starts on the destination with the new flavor, and
// the server waits in VERIFY_RESIZE for the user to confirm or revert (or
// for resize_confirm_window to confirm it). A stopped server moves the
// same way but its guest is never started: it waits in VERIFY_RESIZE
// powered off and ends stopped whether confirmed or reverted
// (records.Migration.OldVMState).
//
//	accepted       schedule ──Claimed──▶ prep-resize          NoValidHost ─▶ [error]
//	pre-migrating  prep-resize ──Prepared──▶ resize-source    PrepareFailed ─▶ cold-rollback
//	migrating      resize-source ──Copied──▶ finish-resize    CopyFailed|Stalled ─▶ cold-rollback
//	post-migrating finish-resize ──DestDone──▶ verify         StepFailed ─▶ cold-rollback
//	finished       verify (VERIFY_RESIZE) ──Confirm──▶ confirm-source ──SourceDone──▶ finish ──Finished──▶ [confirmed]
//	                                     ──RevertResize──▶ revert-dest ──DestRolledBack──▶ revert-source
//	                                                       ──SourceDone──▶ revert ──Reverted──▶ [reverted]
//	cold-rollback: rollback-dest ──▶ restart-source ──▶ revert ──▶ [error|failed]
//
// Allocations as Nova holds them: schedule moves the instance's source
// allocation (old flavor) to the migration consumer and claims the
// destination for the instance with the new flavor, in one write; confirm
// deletes the migration consumer's allocation; revert gives it back to the
// instance and drops the destination claim, in one write. Both hosts'
// usage is exact at every step.

// Phases of a cold migration or resize.
const (
	PhasePrepResize    records.MigrationPhase = "prep-resize"
	PhaseResizeSource  records.MigrationPhase = "resize-source"
	PhaseFinishResize  records.MigrationPhase = "finish-resize"
	PhaseVerify        records.MigrationPhase = "verify"
	PhaseConfirmSource records.MigrationPhase = "confirm-source"
	PhaseRevertDest    records.MigrationPhase = "revert-dest"
	PhaseRevertSource  records.MigrationPhase = "revert-source"
	PhaseRestartSource records.MigrationPhase = "restart-source"
	// PhaseRevertLost is revert after the guest could not be started
	// again on the source: the instance ends in ERROR there.
	PhaseRevertLost records.MigrationPhase = "revert-lost"
)

// Events of a cold migration or resize, besides the shared ones.
const (
	// Confirm is confirmResize, or resize_confirm_window passing.
	Confirm EventKind = "confirm"
	// RevertResize is revertResize.
	RevertResize EventKind = "revert-resize"
)

// Actions of a cold migration or resize.
const (
	// PrepResize: prep_resize on the destination (its checks, its busy
	// mark). Answer: Prepared or PrepareFailed.
	PrepResize ActionKind = "prep-resize"
	// ResizeInstance: resize_instance on the source: stop the guest and
	// move its disk to Host's destination; the source reports the end as
	// a copy's (Copied or CopyFailed).
	ResizeInstance ActionKind = "resize-instance"
	// FinishResize: finish_resize on the destination: start the guest with
	// the new flavor and count it. Answer: DestDone or StepFailed.
	FinishResize ActionKind = "finish-resize"
	// ConfirmAtSource: confirm_resize on the source: drop the stopped
	// guest. Answer: SourceDone (a source that cannot be reached is named
	// in the record and left for its audit).
	ConfirmAtSource ActionKind = "confirm-at-source"
	// RevertAtDest: revert_resize on the destination: drop its guest.
	// Answer: DestRolledBack.
	RevertAtDest ActionKind = "revert-at-destination"
	// FinishRevertAtSource: finish_revert_resize on the source: start the
	// guest again with the old flavor. Answer: SourceDone or StepFailed.
	FinishRevertAtSource ActionKind = "finish-revert-at-source"
)

var resizeTransitions = map[transitionKey]transition{
	{"", Start}:                         coldStart,
	{PhaseSchedule, Claimed}:            claimedThen(PhasePrepResize, PrepResize),
	{PhaseSchedule, NoValidHost}:        noValidHost,
	{PhasePrepResize, Prepared}:         coldPrepared,
	{PhasePrepResize, PrepareFailed}:    coldFailedAt("prep_resize on the destination"),
	{PhaseResizeSource, Progress}:       progress,
	{PhaseResizeSource, Copied}:         coldCopied,
	{PhaseResizeSource, CopyFailed}:     coldFailedAt("resize_instance on the source"),
	{PhaseResizeSource, Stalled}:        coldFailedAt("resize_instance on the source: no report"),
	{PhaseFinishResize, DestDone}:       coldFinished,
	{PhaseFinishResize, StepFailed}:     coldFailedAt("finish_resize on the destination"),
	{PhaseVerify, Confirm}:              coldConfirm,
	{PhaseVerify, RevertResize}:         coldRevert,
	{PhaseConfirmSource, SourceDone}:    coldSourceConfirmed,
	{PhaseFinish, Finished}:             coldDone,
	{PhaseRevertDest, DestRolledBack}:   coldDestReverted,
	{PhaseRevertSource, SourceDone}:     coldSourceRestarted,
	{PhaseRevertSource, StepFailed}:     coldSourceRestartFailed,
	{PhaseRollbackDest, DestRolledBack}: coldRolledBackDest,
	{PhaseRestartSource, SourceDone}:    coldRestarted,
	{PhaseRestartSource, StepFailed}:    coldSourceRestartFailed,
	{PhaseRevert, Reverted}:             coldReverted,
	{PhaseRevertLost, Reverted}:         coldReverted,
	{PhaseRevertLost, Resume}:           repeat(RevertAllocations, func(records.Migration) string { return "" }),
	{PhaseRevertLost, Reset}:            repeat(RevertAllocations, func(records.Migration) string { return "" }),
	{"", Resume}:                        resumeBeforeCopy,
	{PhaseSchedule, Resume}:             resumeBeforeCopy,
	{PhasePrepResize, Resume}:           coldFailedAt("interrupted by a restart of the server, or by a step that could not be done"),
	{PhaseResizeSource, Resume}:         checkCopy, // the source reports the disk copy's end
	{PhaseFinishResize, Resume}:         repeat(FinishResize, destOf),
	{PhaseVerify, Resume}:               wait,
	{PhaseConfirmSource, Resume}:        repeat(ConfirmAtSource, sourceOf),
	{PhaseFinish, Resume}:               repeat(FinishAllocations, func(records.Migration) string { return "" }),
	{PhaseRevertDest, Resume}:           repeat(RevertAtDest, destOf),
	{PhaseRevertSource, Resume}:         repeat(FinishRevertAtSource, sourceOf),
	{PhaseRollbackDest, Resume}:         repeat(RevertAtDest, destOf),
	{PhaseRestartSource, Resume}:        repeat(FinishRevertAtSource, sourceOf),
	{PhaseRevert, Resume}:               repeat(RevertAllocations, func(records.Migration) string { return "" }),
	{PhaseSchedule, Reset}:              resetBeforeCopy,
	{PhasePrepResize, Reset}:            coldFailedAt(resetByOperator),
	{PhaseResizeSource, Reset}:          coldFailedAt(resetByOperator),
	{PhaseFinishResize, Reset}:          coldFailedAt(resetByOperator),
	{PhaseVerify, Reset}:                coldRevert,
	{PhaseConfirmSource, Reset}:         repeat(ConfirmAtSource, sourceOf),
	{PhaseRevertDest, Reset}:            repeat(RevertAtDest, destOf),
	{PhaseRevertSource, Reset}:          repeat(FinishRevertAtSource, sourceOf),
	{PhaseRollbackDest, Reset}:          repeat(RevertAtDest, destOf),
	{PhaseRestartSource, Reset}:         repeat(FinishRevertAtSource, sourceOf),
	{PhaseFinish, Reset}:                repeat(FinishAllocations, func(records.Migration) string { return "" }),
	{PhaseRevert, Reset}:                repeat(RevertAllocations, func(records.Migration) string { return "" }),
}

// StartedStopped reports whether m moves a stopped server: its guest is
// not started on the destination (Nova's power_on=False), nor on the
// source again when the move is reverted or rolled back.
func StartedStopped(m records.Migration) bool { return m.OldVMState == records.VMStopped }

// settledState is the vm_state a cold move ends in, confirmed or
// reverted: the one it started from (active or stopped).
func settledState(m records.Migration) records.VMState {
	if StartedStopped(m) {
		return records.VMStopped
	}
	return records.VMActive
}

// checkCopy: the source reports the disk copy's end, or, when the
// copy's cast never reached it, that the copy ended interrupted.
func checkCopy(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	return m, []Action{{Kind: CheckCopy, Host: m.SourceHost}}
}

func sourceOf(m records.Migration) string { return m.SourceHost }
func destOf(m records.Migration) string   { return m.DestHost }

// wait: the user decides (VERIFY_RESIZE).
func wait(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) { return m, nil }

func coldStart(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Status, m.Phase = records.MigrationAccepted, PhaseSchedule
	return m, []Action{{Kind: ClaimDestination, Host: m.RequestedHost}}
}

// claimedThen: a cold move's destination is claimed; its first step
// there is kind, in phase.
func claimedThen(phase records.MigrationPhase, kind ActionKind) transition {
	return func(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
		m.DestHost, m.Phase, m.Status = ev.Host, phase, records.MigrationPreMigrating
		m.Attempts++
		return m, []Action{{Kind: kind, Host: ev.Host}}
	}
}

// withReason keeps a failed compensation's reason (Err) in the record.
func withReason(m records.Migration, ev Event) records.Migration {
	if ev.Err != "" {
		m.Error = joinReason(m.Error, ev.Err)
	}
	return m
}

// coldPrepared: the destination is ready; its migrate data (where the
// disk goes) is handed to the source.
func coldPrepared(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m.Phase, m.Status = PhaseResizeSource, records.MigrationMigrating
	return m, []Action{{Kind: ResizeInstance, Host: m.SourceHost, Data: ev.Data}}
}

func coldCopied(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase, m.Status = PhaseFinishResize, records.MigrationPostMigrating
	return m, []Action{{Kind: FinishResize, Host: m.DestHost}}
}

// coldFinished: the guest runs on the destination with the new flavor;
// the server is VERIFY_RESIZE there.
func coldFinished(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase, m.Status = PhaseVerify, records.MigrationFinished
	power := records.PowerRunning
	if StartedStopped(m) {
		power = records.PowerShutdown
	}
	return m, []Action{{Kind: SettleInstance, Host: m.DestHost, Flavor: m.NewFlavor, VMState: records.VMResized, PowerState: power}}
}

func coldConfirm(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase, m.Status = PhaseConfirmSource, records.MigrationConfirming
	return m, []Action{{Kind: ConfirmAtSource, Host: m.SourceHost}}
}

// coldSourceConfirmed: the source dropped its stopped guest (or could
// not: Err says why, and its audit removes the guest no instance of its
// host claims).
func coldSourceConfirmed(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m = withReason(m, ev)
	m.Phase = PhaseFinish
	return m, []Action{{Kind: FinishAllocations}}
}

func coldDone(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Status, m.Phase = records.MigrationConfirmed, PhaseDone
	return m, []Action{{Kind: SettleInstance, Host: m.DestHost, VMState: settledState(m)}}
}

func coldRevert(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase, m.Status = PhaseRevertDest, records.MigrationReverting
	return m, []Action{{Kind: RevertAtDest, Host: m.DestHost}}
}

func coldDestReverted(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m = withReason(m, ev)
	m.Phase = PhaseRevertSource
	return m, []Action{{Kind: FinishRevertAtSource, Host: m.SourceHost}}
}

func coldSourceRestarted(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase = PhaseRevert
	if m.Outcome == "" {
		m.Outcome = records.MigrationReverted
	}
	return m, []Action{{Kind: RevertAllocations}}
}

// coldSourceRestartFailed: the guest could not start again on the source;
// the allocations still go back there, and the instance ends in ERROR.
func coldSourceRestartFailed(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m.Error = joinReason(m.Error, "restarting the guest on the source "+m.SourceHost+" failed: "+ev.Err)
	m.Outcome, m.Phase = records.MigrationError, PhaseRevertLost
	return m, []Action{{Kind: RevertAllocations}}
}

// coldFailedAt: a step before the guest ran on the destination failed (or
// was interrupted, or reset): drop what the destination has, start the
// guest on the source again, give the allocations back.
func coldFailedAt(step string) transition {
	return func(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
		reason := step
		if ev.Err != "" {
			reason += ": " + ev.Err
		}
		outcome := records.MigrationFailed
		if ev.Kind == Resume || ev.Kind == Reset || ev.Kind == Stalled {
			outcome = records.MigrationError
		}
		m.Phase, m.Outcome, m.Error = PhaseRollbackDest, outcome, reason
		if ev.Kind == CopyFailed {
			m.Interrupted = ev.Restarted // keel's own restart, not the move, ended it
		}
		return m, []Action{{Kind: RevertAtDest, Host: m.DestHost}}
	}
}

func coldRolledBackDest(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	m = withReason(m, ev)
	m.Phase = PhaseRestartSource
	return m, []Action{{Kind: FinishRevertAtSource, Host: m.SourceHost}}
}

func coldRestarted(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase = PhaseRevert
	return m, []Action{{Kind: RevertAllocations}}
}

// coldReverted: the allocations are back on the source; the instance
// runs there with its old flavor (or, when its guest could not be
// started again, is in ERROR there).
func coldReverted(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	vm := settledState(m)
	if m.Phase == PhaseRevertLost {
		vm = records.VMError
	}
	status := m.Outcome
	if status == "" {
		status = records.MigrationError
	}
	m.Status, m.Phase, m.Outcome = status, PhaseDone, ""
	return m, []Action{{Kind: SettleInstance, Host: m.SourceHost, Flavor: m.OldFlavor, VMState: vm}}
}
