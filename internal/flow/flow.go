package flow

import (
	"context"
	"time"
)

// Machine is a flow's rules, pure: R is its record, E its events, A its
// actions. Step never mutates its input.
type Machine[R, E, A any] interface {
	// Step applies ev to r at now: the next record and what to do.
	Step(r R, ev E, now time.Time) (R, []A, error)
	// Deadline is when r's flow must be fed an event if nothing else
	// happens first, and which one, as seen at now: of two deadlines that
	// have both passed by now the machine says which fires (a timeout
	// before a stall), otherwise the earliest is returned. False when
	// nothing is due ever (no flow in flight, or it waits for someone
	// else). A zero time is due at every sweep (the flow's Due decides).
	Deadline(r R, now time.Time) (time.Time, E, bool)
	// Resume is the event that resumes r's flow after a restart of the
	// server, or when another replica takes it over; false when r holds
	// no flow of this machine in flight.
	Resume(r R) (E, bool)
}

// Flow is one kind of flow as the driver sees it: its machine, its
// records, and how to feed it.
type Flow[R, E, A any] struct {
	// Name names the flow in logs ("boot", "migration", "lifecycle").
	Name    string
	Machine Machine[R, E, A]

	// List returns the records that may hold a flow of this kind.
	List func(ctx context.Context) ([]R, error)
	// Get reads r's record again.
	Get func(ctx context.Context, r R) (R, error)
	// Save writes r if its version is still the stored one; a conflict
	// (placement.IsConflict) or store.ErrNotFound means it moved on.
	Save func(ctx context.Context, r R) (R, error)
	// Key is r's lock key, unique across flows that do not share records
	// (a boot and a lifecycle action share their instance's).
	Key func(r R) string
	// Owner is the replica that drives r; Version its stored version;
	// Owned returns r owned by owner, stamped now.
	Owner   func(r R) string
	Version func(r R) int64
	Owned   func(r R, owner string, now time.Time) R

	// Run's loop (Drive), which recovery, take-over and the sweep feed
	// through too. Perform is the flow's effect table: it does one
	// action and returns its answer, when it has one now, or an error
	// when it cannot be done now. Stamp returns a record as it is saved
	// at now (its UpdatedAt). Gone, when set, reports a record out of the
	// flow's hands (a delete took the instance): the loop stops there.
	// Saved, when set, observes each of the loop's saves (logs, hooks).
	Perform func(ctx context.Context, r R, a A) (E, bool, error)
	Stamp   func(r R, now time.Time) R
	Gone    func(r R) bool
	Saved   func(prev, next R, ev E)
	// Early, when set, picks the actions performed before their step's
	// save, on the record as stepped (a migration settles its instance
	// before its record says it ended: whoever reads the end finds the
	// instance where it now runs); they must be idempotent (a conflict or
	// a crash repeats them) and have no answer. One that cannot be done
	// now leaves the step unsaved, for the sweep.
	Early func(a A) bool
	// Refused, when set, observes an event the machine refused (logs, and
	// what an ended flow must forget) and returns the loop's error: the
	// refusal itself, or nil to stop quietly (an answer to one of the
	// loop's own actions that came after someone else moved the record
	// on). answer tells such an answer from the event the loop was given.
	Refused func(r R, ev E, answer bool, err error) error
	// Scope, when set, is called at the start of each loop (Drive) and
	// its release at the end: per-loop state the effects share through
	// the context (a boot's server-group lock, taken by its schedule
	// effect and held while the boot places its instance).
	Scope func(ctx context.Context) (context.Context, func())
	// Due, when set, is the part of a passed deadline, or of a resume,
	// the record alone cannot tell: false leaves it for a later sweep (a
	// resumed flow is taken over first, so that sweep is this replica's).
	Due func(ctx context.Context, r R, ev E) bool
	// Remote, when set, picks the actions that wait on someone outside
	// the store (an agent call): Start hands the loop over before the
	// first of them, so its caller answers without waiting on them.
	Remote func(a A) bool
	// Conflict reports whether a Save's error means the record moved on.
	Conflict func(err error) bool
}
