package migration

import "keel/internal/records"

// The evacuation machine (records.Migration.Type "evacuation"): the
// instance of a host that is down (forced down, or silent past
// service_down_time) is rebuilt on a destination the scheduler picks from
// the claim-time view, as a fresh boot would be.
//
//	accepted      schedule ──Claimed──▶ rebuild          NoValidHost ─▶ [error]
//	pre-migrating rebuild ──Copied (the guest runs)──▶ await-source (status done)
//	                      CopyFailed|Stalled ─▶ revert ──Reverted──▶ [error]
//	done          await-source ──SourceBack──▶ cleanup-source ──SourceDone──▶ finish ──Finished──▶ [completed]
//
// Allocations: schedule moves the instance's allocation on the dead
// source to the migration consumer and claims the destination for the
// instance, in one write. The migration consumer keeps the source's
// resources until the source comes back (its guest may still exist
// there); the agent of a source that restarts destroys the guests its
// evacuations rebuilt elsewhere (status done, RebuiltElsewhere) before it
// serves anything (never two running copies), and the conductor, seeing
// the source up again, removes any guest left there (cleanup-source) and
// drops the source side. A rebuild still in flight when the source comes
// back leaves its guest there: a failed one reverts to the source, and
// one that ends well has it removed at the sweep that sees the source up.

// Phases of an evacuation.
const (
	PhaseRebuild       records.MigrationPhase = "rebuild"
	PhaseAwaitSource   records.MigrationPhase = "await-source"
	PhaseCleanupSource records.MigrationPhase = "cleanup-source"
)

// Evacuation events and actions.
const (
	// SourceBack is fed by the sweep when an evacuated host's service is
	// up again.
	SourceBack EventKind = "source-back"
	// RebuildAtDest: rebuild_instance on the destination (spawn the guest
	// from its image); the agent reports its end as a copy's.
	RebuildAtDest ActionKind = "rebuild-at-destination"
	// CleanupSource: make sure the evacuated guest is gone from the
	// source that came back. Answer: SourceDone.
	CleanupSource ActionKind = "cleanup-source"
)

var evacuateTransitions = map[transitionKey]transition{
	{"", Start}:                      coldStart,
	{PhaseSchedule, Claimed}:         claimedThen(PhaseRebuild, RebuildAtDest),
	{PhaseSchedule, NoValidHost}:     noValidHost,
	{PhaseRebuild, Copied}:           evacRebuilt,
	{PhaseRebuild, CopyFailed}:       evacFailed,
	{PhaseRebuild, Stalled}:          evacFailed,
	{PhaseRebuild, Progress}:         progress,
	{PhaseAwaitSource, SourceBack}:   evacSourceBack,
	{PhaseCleanupSource, SourceDone}: coldSourceConfirmed,
	{PhaseFinish, Finished}:          evacCompleted,
	{PhaseRevert, Reverted}:          evacReverted,
	{"", Resume}:                     resumeBeforeCopy,
	{PhaseSchedule, Resume}:          resumeBeforeCopy,
	{PhaseRebuild, Resume}:           repeat(RebuildAtDest, destOf), // the cast may not have reached it; a repeat is answered from the guest there
	{PhaseAwaitSource, Resume}:       wait,
	{PhaseCleanupSource, Resume}:     repeat(CleanupSource, sourceOf),
	{PhaseFinish, Resume}:            repeat(FinishAllocations, func(records.Migration) string { return "" }),
	{PhaseRevert, Resume}:            repeat(RevertAllocations, func(records.Migration) string { return "" }),
	{PhaseSchedule, Reset}:           resetBeforeCopy,
	{PhaseRebuild, Reset}:            evacFailed,
	{PhaseAwaitSource, Reset}:        evacSourceBack,
	{PhaseCleanupSource, Reset}:      repeat(CleanupSource, sourceOf),
	{PhaseFinish, Reset}:             repeat(FinishAllocations, func(records.Migration) string { return "" }),
	{PhaseRevert, Reset}:             repeat(RevertAllocations, func(records.Migration) string { return "" }),
}

// evacRebuilt: the instance runs on its destination; the source side
// waits for the source to come back.
// evacRebuilt: the guest runs on the destination (or, for an instance
// evacuated stopped, was rebuilt and powered off there): the instance
// settles there in its state.
func evacRebuilt(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase, m.Status = PhaseAwaitSource, records.MigrationDone
	vm := records.VMActive
	if StartedStopped(m) {
		vm = records.VMStopped
	}
	return m, []Action{{Kind: SettleInstance, Host: m.DestHost, VMState: vm}}
}

// evacFailed: the rebuild failed; the allocations go back to the source,
// where the instance stays.
func evacFailed(_ Machine, m records.Migration, ev Event) (records.Migration, []Action) {
	reason := "rebuild on " + m.DestHost + " failed"
	if ev.Err != "" {
		reason += ": " + ev.Err
	}
	if ev.Kind == Reset {
		reason = resetByOperator
	}
	m.Phase, m.Outcome, m.Error = PhaseRevert, records.MigrationError, reason
	return m, []Action{{Kind: Terminate, Host: m.DestHost}, {Kind: RevertAllocations}}
}

func evacSourceBack(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Phase = PhaseCleanupSource
	return m, []Action{{Kind: CleanupSource, Host: m.SourceHost}}
}

func evacCompleted(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	return finish(m, records.MigrationCompleted, m.Error, m.DestHost)
}

// evacReverted: the instance stays on its source as it was, holding its
// allocation there (the migration's error says why); evacuating it again
// is the way on.
func evacReverted(_ Machine, m records.Migration, _ Event) (records.Migration, []Action) {
	m.Status, m.Phase, m.Outcome = records.MigrationError, PhaseDone, ""
	return m, []Action{{Kind: SettleInstance, Host: m.SourceHost}}
}
