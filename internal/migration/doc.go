// Package migration is the live-migration state machine, pure: the
// current migration record and an event go in, the next record and the
// actions to perform come out. The conductor performs the actions (store
// writes, calls to the agents) and feeds their results back as events; the
// record, saved after every step, is what recovery resumes from.
//
// Phases, with the Nova status each one shows:
//
//	accepted   schedule ──Claimed──▶ check ──CheckPassed──▶ queue
//	              │ NoValidHost        │ CheckFailed
//	              ▼                    ▼
//	           [error]             release ──Released──▶ schedule (next host)
//	                                   └─ attempts used up / requested host ─▶ [error]
//	queued     queue ──SlotAcquired──▶ prepare
//	preparing  prepare ──Prepared──▶ copy          PrepareFailed ─▶ rollback-dest
//	running    copy ──Copied──▶ post-source ──SourceDone──▶ post-dest
//	                 CopyFailed ─▶ rollback-dest
//	           post-dest ──DestDone──▶ finish ──Finished──▶ [completed]
//	           post-source ──StepFailed──▶ post-dest, then finish ─▶ [error]
//	           post-dest ──StepFailed──▶ finish ─▶ [error]
//	           (the guest has moved: both end with the instance on the
//	           destination)
//	rollback   rollback-dest ──DestRolledBack──▶ revert ──Reverted──▶ [failed|cancelled|error]
//
// Allocations follow Nova's migration-allocation model: schedule moves the
// instance's source allocation to the migration consumer and claims the
// destination for the instance, atomically; finish deletes the migration
// consumer's allocation; revert moves it back to the instance and drops the
// destination claim, atomically.
//
// Abort (DELETE /servers/{id}/migrations/{mid}) is accepted while queued,
// preparing or running in copy, and ends the migration cancelled; force
// complete is accepted in copy only.
//
// Nothing stays stuck: Resume (recovery, or the sweep of a step that
// stalled) repeats or rolls back every phase; Stalled (no report from the
// source for migration_stall_timeout) aborts the copy and rolls back; and
// Reset, an operator's way out, ends any phase in error — rolled back
// before the guest moved, finished on the destination after.
package migration
