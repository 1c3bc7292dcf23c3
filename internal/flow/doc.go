// Package flow is the one driver of keel's flows. Every flow — a boot, a
// move (live migration, cold migration and resize, evacuation), a server
// lifecycle action — is a pure machine over a stored record:
//
//	Step(record, event, now) → (record, actions)   the rules
//	Deadline(record, now)    → (when, event)       what fires if nothing else happens
//	Resume(record)           → event               what restarts it after a restart
//
// A Flow joins a machine to where its records live (list, read, save with
// a version check) and to the code that feeds it events. The Driver runs,
// once for every registered flow:
//
//   - Recover, at start: every record with a flow in flight that this
//     replica may take (unowned, its own, or a dead replica's) is taken
//     over with a versioned save, so of two replicas racing for it exactly
//     one wins, and fed its Resume event;
//   - TakeOver, periodically: the same for records of replicas whose
//     heartbeat stopped;
//   - Sweep, periodically: every record this replica drives whose
//     Deadline has passed is fed the deadline's event, unless its step is
//     in flight in this process or the record moved on since it was read.
//
// The machine decides what a timeout means; the driver only compares
// times. A deadline whose event also depends on the world outside the
// record (an evacuated host that came back, a migration waiting in this
// process's slot queue) is checked by the flow's Due before it fires.
//
// The driver holds one lock per record key, in this process: a flow's
// steps, the sweep's look at it and a take-over never interleave.
// A loop that finds its record taken over by another replica (its save
// lost on the version to the take-over, or a later read names the new
// owner) stops driving it there: no step saved beside the new owner's,
// no action performed.
package flow
