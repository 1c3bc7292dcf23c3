package records

import "time"

// Plan purposes, in the order the executor serves them (evacuations first).
const (
	PlanEvacuateAll = "evacuate-all"
	PlanDrain       = "drain"
	PlanRebalance   = "rebalance"
	// PlanReturn moves back to a host what its last drain moved off it
	// (keel host undrain --return); it runs as a rebalance does.
	PlanReturn = "return"
)

// PlanState is a plan's state.
type PlanState string

// Plan states. A plan is recommended (proposed, nothing claimed), approved
// (an operator said go), running (the executor starts its moves), and ends
// done (every move ended, none failed), failed (a move failed and the
// policy stops, or some moves failed), cancelled, or superseded (a newer
// plan replaced it before it ran).
const (
	PlanRecommended PlanState = "recommended"
	PlanApproved    PlanState = "approved"
	PlanRunning     PlanState = "running"
	PlanDone        PlanState = "done"
	PlanFailed      PlanState = "failed"
	PlanCancelled   PlanState = "cancelled"
	PlanSuperseded  PlanState = "superseded"
)

// PlanTerminal reports whether a plan state is final.
func PlanTerminal(state PlanState) bool {
	switch state {
	case PlanDone, PlanFailed, PlanCancelled, PlanSuperseded:
		return true
	}
	return false
}

// MoveState is a plan move's state.
type MoveState string

// Move states. A move is pending until the executor starts it; starting
// while the executor re-checks it and creates its migration (the state is
// saved before the migration is created, so a restart finds the migration
// by the plan and move it names); running while its migration runs; then
// done, failed (with the reason), skipped (the re-check found it no longer
// applies: the instance moved or is gone) or cancelled (the plan was
// cancelled before it started).
const (
	MovePending   MoveState = "pending"
	MoveStarting  MoveState = "starting"
	MoveRunning   MoveState = "running"
	MoveDone      MoveState = "done"
	MoveFailed    MoveState = "failed"
	MoveSkipped   MoveState = "skipped"
	MoveCancelled MoveState = "cancelled"
)

// MoveTerminal reports whether a move state is final.
func MoveTerminal(state MoveState) bool {
	switch state {
	case MoveDone, MoveFailed, MoveSkipped, MoveCancelled:
		return true
	}
	return false
}

// PlanMove is one move of a plan: an instance from its source to a
// destination (empty: the scheduler chooses when the move starts, as a
// drain does).
type PlanMove struct {
	Instance string `json:"instance"`
	Source   string `json:"source"`
	Dest     string `json:"dest,omitempty"`
	// RAMMB is the instance's memory when planned (what a live copy
	// moves; the order and the ETA read it).
	RAMMB int64     `json:"ram_mb"`
	State MoveState `json:"state"`
	// Migration is the move's current migration record (0 before it
	// started); Attempts counts the migrations started for it.
	Migration int64 `json:"migration,omitempty"`
	Attempts  int   `json:"attempts,omitempty"`
	// Cold is set once the move fell back to a cold migration.
	Cold bool `json:"cold,omitempty"`
	// Redirect, while set, says why the move's running migration is
	// being aborted to be tried again elsewhere (its destination is being
	// drained).
	Redirect string `json:"redirect,omitempty"`
	// Result is the host the instance ended on (done), Reason why the
	// move failed or was skipped.
	Result string `json:"result,omitempty"`
	Reason string `json:"reason,omitempty"`
	// BytesCopied is the memory the move's copy processed.
	BytesCopied int64     `json:"bytes_copied,omitempty"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	EndedAt     time.Time `json:"ended_at,omitzero"`
}

// PlanOptions are a plan's policy.
type PlanOptions struct {
	// Parallel is how many of the plan's moves may run at once (0: the
	// cluster-wide cap alone limits it).
	Parallel int `json:"parallel,omitempty"`
	// Order is how a drain orders its moves: largest (RAM first,
	// default), smallest, or given (as listed).
	Order string `json:"order,omitempty"`
	// ColdFallback lets a move whose live migration failed be cold
	// migrated instead.
	ColdFallback bool `json:"cold_fallback,omitempty"`
	// StopOnFailure ends the plan failed at its first failed move
	// (running moves finish); otherwise the plan goes on.
	StopOnFailure bool `json:"stop_on_failure,omitempty"`
}

// Plan is an ordered set of moves with a purpose, stored so that a
// restart resumes it (see package plan and the conductor's executor).
type Plan struct {
	ID      int64     `json:"id"`
	UUID    string    `json:"uuid"`
	Purpose string    `json:"purpose"`
	State   PlanState `json:"state"`
	// Hosts are the hosts a drain empties (their services are disabled
	// while it runs), an evacuation's host, or the host a return fills.
	Hosts   []string    `json:"hosts,omitempty"`
	Options PlanOptions `json:"options"`
	Moves   []PlanMove  `json:"moves"`
	// Owner is the replica that runs the plan (see Migration.Owner).
	Owner string `json:"owner,omitempty"`
	// Reason says why the plan failed or was cancelled.
	Reason string `json:"reason,omitempty"`
	// CancelRequested stops the plan starting moves; AbortRunning also
	// aborts the moves running when it was cancelled.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	AbortRunning    bool `json:"abort_running,omitempty"`

	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Version    int64     `json:"version"`
}

// MoveRef names the plan and move a migration was started for (kept on
// the migration record).
type MoveRef struct {
	Plan int64 `json:"plan"`
	Move int   `json:"move"`
}
