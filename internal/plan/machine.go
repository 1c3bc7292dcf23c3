package plan

import (
	"fmt"
	"time"

	"keel/internal/records"
)

// EventKind names an event.
type EventKind string

// Events.
const (
	// Approve: an operator approved a recommended plan.
	Approve EventKind = "approve"
	// Run: the executor takes an approved plan and starts running it.
	Run EventKind = "run"
	// Begin: Select chose the pending move Move to start now.
	Begin EventKind = "begin"
	// Started: the move's migration Migration was created.
	Started EventKind = "started"
	// Refused: the re-check before the start refused the move (Reason);
	// Skip says it no longer applies (the instance moved or is gone)
	// rather than failed.
	Refused EventKind = "refused"
	// Progress: the move's copy has processed Bytes so far.
	Progress EventKind = "progress"
	// Ended: the move's migration ended with Status (a migration status),
	// the instance on Host, Err the reason of a failure, Bytes copied.
	Ended EventKind = "ended"
	// Cancel stops starting moves; Abort also aborts the running ones.
	Cancel EventKind = "cancel"
	// Supersede: a newer plan replaces one not yet running.
	Supersede EventKind = "supersede"
	// Resume: the executor (re)started on a running plan: starting moves
	// must find their migration.
	Resume EventKind = "resume"
	// Lost: a starting move has no migration (the restart came before it
	// was created): it is pending again.
	Lost EventKind = "lost"
	// Deferred: the re-check found the instance busy (another move of it
	// runs: it is arriving on a host being drained): the move is pending
	// again, Reason says why, and no attempt is counted.
	Deferred EventKind = "deferred"
	// Redirect: the running move's destination is being drained now (a
	// drain created after the move chose it): its migration is aborted
	// (AbortMove) and, once it ends cancelled, the move is pending again
	// with Reason saying why, no attempt counted. A migration that
	// completes anyway (too late to abort) is done as usual.
	Redirect EventKind = "redirect"
)

// Event is one input to the machine.
type Event struct {
	Kind      EventKind
	Move      int
	Migration int64
	Status    records.MigrationStatus
	Host      string
	Reason    string
	Skip      bool
	Abort     bool
	Bytes     int64
	// Interrupted: an Ended migration that keel's own restart ended
	// (records.Migration.Interrupted): the move is pending again, no
	// attempt counted.
	Interrupted bool
	// Now is when the event happened (the executor's clock).
	Now time.Time
}

// ActionKind names an action.
type ActionKind string

// Actions.
const (
	// StartMove: re-check move Move and create its migration (a cold one
	// if Cold), answering Started or Refused.
	StartMove ActionKind = "start-move"
	// AbortMove: abort the running migration Migration of move Move.
	AbortMove ActionKind = "abort-move"
	// FindMigration: look for move Move's migration by its plan move
	// name, answering Started or Lost.
	FindMigration ActionKind = "find-migration"
	// Finished: the plan reached a final state (logged, reported).
	Finished ActionKind = "finished"
)

// Action is one thing the executor must do.
type Action struct {
	Kind      ActionKind
	Move      int
	Migration int64
	Cold      bool
}

// Machine steps plans. MaxAttempts is how many live migrations one move
// may try (a failed one is retried, the scheduler choosing again) before
// it fails or falls back to a cold migration; 0 means 2.
type Machine struct {
	MaxAttempts int
}

// IllegalError is an event the plan's state does not allow.
type IllegalError struct {
	Plan  int64
	State records.PlanState
	Event EventKind
	Why   string
}

func (e *IllegalError) Error() string {
	return fmt.Sprintf("plan %d in state %s: %s refused: %s", e.Plan, e.State, e.Event, e.Why)
}

func illegal(p records.Plan, ev Event, why string) error {
	return &IllegalError{Plan: p.ID, State: p.State, Event: ev.Kind, Why: why}
}

func (m Machine) maxAttempts() int {
	if m.MaxAttempts <= 0 {
		return 2
	}
	return m.MaxAttempts
}

// Step applies ev to p and returns the next plan and the actions to
// perform. p is not modified (its moves are copied).
func (m Machine) Step(p records.Plan, ev Event) (records.Plan, []Action, error) {
	p.Moves = append([]records.PlanMove(nil), p.Moves...)
	p.Hosts = append([]string(nil), p.Hosts...)
	if records.PlanTerminal(p.State) {
		return p, nil, illegal(p, ev, "the plan has ended")
	}
	var acts []Action
	var err error
	switch ev.Kind {
	case Approve:
		if p.State != records.PlanRecommended {
			return p, nil, illegal(p, ev, "only a recommended plan is approved")
		}
		p.State = records.PlanApproved
	case Run:
		if p.State != records.PlanApproved {
			return p, nil, illegal(p, ev, "only an approved plan starts running")
		}
		p.State, p.StartedAt = records.PlanRunning, ev.Now
	case Supersede:
		if p.State == records.PlanRunning {
			return p, nil, illegal(p, ev, "a running plan is cancelled, not superseded")
		}
		p.State, p.FinishedAt, p.Reason = records.PlanSuperseded, ev.Now, ev.Reason
		return p, []Action{{Kind: Finished}}, nil
	case Cancel:
		acts = m.cancel(&p, ev)
	case Resume:
		if p.State != records.PlanRunning {
			return p, nil, illegal(p, ev, "only a running plan resumes")
		}
		for i, mv := range p.Moves {
			if mv.State == records.MoveStarting {
				acts = append(acts, Action{Kind: FindMigration, Move: i, Cold: mv.Cold})
			}
		}
	default:
		acts, err = m.moveEvent(&p, ev)
		if err != nil {
			return p, nil, err
		}
	}
	return p, append(acts, settle(&p, ev.Now)...), nil
}

func (m Machine) cancel(p *records.Plan, ev Event) []Action {
	if p.State != records.PlanRunning {
		p.State, p.FinishedAt = records.PlanCancelled, ev.Now
		p.Reason = reasonOr(ev.Reason, "cancelled before it ran")
		for i := range p.Moves {
			if !records.MoveTerminal(p.Moves[i].State) {
				p.Moves[i].State, p.Moves[i].Reason = records.MoveCancelled, "plan cancelled"
			}
		}
		return []Action{{Kind: Finished}}
	}
	p.CancelRequested = true
	p.AbortRunning = p.AbortRunning || ev.Abort
	p.Reason = reasonOr(ev.Reason, "cancelled")
	var acts []Action
	for i := range p.Moves {
		mv := &p.Moves[i]
		switch mv.State {
		case records.MovePending:
			mv.State, mv.Reason, mv.EndedAt = records.MoveCancelled, "plan cancelled before the move started", ev.Now
		case records.MoveRunning:
			if ev.Abort {
				acts = append(acts, Action{Kind: AbortMove, Move: i, Migration: mv.Migration})
			}
		}
	}
	return acts
}

func reasonOr(r, def string) string {
	if r != "" {
		return r
	}
	return def
}

// moveEvent applies an event about one move.
func (m Machine) moveEvent(p *records.Plan, ev Event) ([]Action, error) {
	if p.State != records.PlanRunning {
		return nil, illegal(*p, ev, "moves change only while the plan runs")
	}
	if ev.Move < 0 || ev.Move >= len(p.Moves) {
		return nil, illegal(*p, ev, fmt.Sprintf("no move %d", ev.Move))
	}
	mv := &p.Moves[ev.Move]
	want := map[EventKind]records.MoveState{Begin: records.MovePending, Started: records.MoveStarting, Refused: records.MoveStarting,
		Lost: records.MoveStarting, Deferred: records.MoveStarting, Progress: records.MoveRunning, Ended: records.MoveRunning,
		Redirect: records.MoveRunning}[ev.Kind]
	if want == "" {
		return nil, illegal(*p, ev, "unknown event")
	}
	if mv.State != want {
		return nil, illegal(*p, ev, fmt.Sprintf("move %d is %s, not %s", ev.Move, mv.State, want))
	}
	switch ev.Kind {
	case Begin:
		if p.CancelRequested {
			return nil, illegal(*p, ev, "the plan is being cancelled")
		}
		mv.State, mv.Attempts, mv.StartedAt, mv.Reason = records.MoveStarting, mv.Attempts+1, ev.Now, ""
		return []Action{{Kind: StartMove, Move: ev.Move, Cold: mv.Cold}}, nil
	case Started:
		mv.State, mv.Migration = records.MoveRunning, ev.Migration
	case Lost:
		mv.State, mv.Attempts = records.MovePending, max(mv.Attempts-1, 0)
	case Deferred:
		mv.State, mv.Attempts, mv.Reason = records.MovePending, max(mv.Attempts-1, 0), ev.Reason
	case Refused:
		mv.EndedAt, mv.Reason = ev.Now, ev.Reason
		if ev.Skip {
			mv.State = records.MoveSkipped
		} else {
			mv.State = records.MoveFailed
			m.stopOnFailure(p, ev)
		}
	case Progress:
		mv.BytesCopied = max(mv.BytesCopied, ev.Bytes)
	case Redirect:
		if mv.Redirect != "" || p.CancelRequested {
			return nil, nil // already asked, or the plan stops anyway
		}
		mv.Redirect = ev.Reason
		return []Action{{Kind: AbortMove, Move: ev.Move, Migration: mv.Migration}}, nil
	case Ended:
		return m.ended(p, ev), nil
	}
	return nil, nil
}

// ended applies a move's migration's end.
func (m Machine) ended(p *records.Plan, ev Event) []Action {
	mv := &p.Moves[ev.Move]
	mv.BytesCopied = max(mv.BytesCopied, ev.Bytes)
	redirect := mv.Redirect
	mv.Redirect = ""
	if redirect != "" && ev.Status == records.MigrationCancelled && !p.CancelRequested {
		// Aborted to keep it off a host being drained: tried again,
		// elsewhere (the draining host is avoided), for free.
		mv.State, mv.Attempts, mv.Reason = records.MovePending, max(mv.Attempts-1, 0), redirect
		return nil
	}
	if ev.Interrupted && !p.CancelRequested && (ev.Status == records.MigrationFailed || ev.Status == records.MigrationError) {
		// Ended by a restart of keel itself, not by its destination:
		// tried again (the destination not avoided), for free.
		mv.State, mv.Attempts = records.MovePending, max(mv.Attempts-1, 0)
		mv.Reason = fmt.Sprintf("migration %d was interrupted by a restart of keel: tried again, not counted as an attempt (%s)", ev.Migration, reasonOr(ev.Reason, "no reason given"))
		return nil
	}
	switch ev.Status {
	case records.MigrationCompleted, records.MigrationConfirmed, records.MigrationDone:
		mv.State, mv.Result, mv.EndedAt, mv.Reason = records.MoveDone, ev.Host, ev.Now, ""
		return nil
	case records.MigrationCancelled:
		mv.State, mv.EndedAt, mv.Reason = records.MoveCancelled, ev.Now, reasonOr(ev.Reason, "migration aborted")
		return nil
	}
	why := fmt.Sprintf("migration %d ended %s: %s", ev.Migration, ev.Status, reasonOr(ev.Reason, "no reason given"))
	switch {
	case p.CancelRequested:
	case !mv.Cold && mv.Attempts < m.maxAttempts():
		// Retried: the scheduler chooses again (the failed destination may
		// be down), when Select next has room.
		mv.State, mv.Reason = records.MovePending, why
		return nil
	case !mv.Cold && p.Options.ColdFallback:
		mv.State, mv.Cold, mv.Reason, mv.StartedAt = records.MoveStarting, true, why, ev.Now
		mv.Attempts++
		return []Action{{Kind: StartMove, Move: ev.Move, Cold: true}}
	}
	mv.State, mv.EndedAt, mv.Reason = records.MoveFailed, ev.Now, why
	m.stopOnFailure(p, ev)
	return nil
}

// stopOnFailure cancels the pending moves of a plan whose policy stops at
// the first failure.
func (m Machine) stopOnFailure(p *records.Plan, ev Event) {
	if !p.Options.StopOnFailure || p.CancelRequested {
		return
	}
	p.Reason = fmt.Sprintf("stopped: move %d failed", ev.Move)
	for i := range p.Moves {
		if p.Moves[i].State == records.MovePending {
			p.Moves[i].State, p.Moves[i].Reason, p.Moves[i].EndedAt = records.MoveCancelled, p.Reason, ev.Now
		}
	}
}

// settle ends a running plan whose moves have all ended.
func settle(p *records.Plan, now time.Time) []Action {
	if p.State != records.PlanRunning {
		return nil
	}
	failed := 0
	for _, mv := range p.Moves {
		if !records.MoveTerminal(mv.State) {
			return nil
		}
		if mv.State == records.MoveFailed {
			failed++
		}
	}
	p.FinishedAt = now
	switch {
	case p.CancelRequested:
		p.State = records.PlanCancelled
	case failed > 0:
		p.State = records.PlanFailed
		if p.Reason == "" {
			p.Reason = fmt.Sprintf("%d of %s failed", failed, Count(len(p.Moves), "move", "moves"))
		}
	default:
		p.State = records.PlanDone
	}
	return []Action{{Kind: Finished}}
}
