package conductor

import (
	"context"
	"errors"
	"fmt"

	"keel/internal/compute"
	"keel/internal/migration"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// LiveMigrate starts a live migration of an ACTIVE instance to
// requestedHost, or to a host the scheduler chooses when it is empty. It
// returns the migration record once the quick steps are done: claimed,
// checked and queued (or already ended in error, with the reason).
func (c *Conductor) LiveMigrate(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error) {
	return c.liveMigrate(ctx, instanceUUID, requestedHost, moveOpts{})
}

// StartLiveMigration is LiveMigrate answering early (Nova from 2.34: the
// pre-checks are asynchronous): it returns once the store alone has
// decided what it can — the state checks, the migration recorded, the
// destination chosen and claimed (or the migration in error: no valid
// host) — and the destination's pre-check, the copy and what follows go on
// in the background, reported on the migration record.
func (c *Conductor) StartLiveMigration(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error) {
	return c.liveMigrate(ctx, instanceUUID, requestedHost, moveOpts{early: true})
}

// moveOpts are what a plan's move adds to a migration it starts, whether
// the start answers early (see StartLiveMigration), and a request's own
// edits of the record the start saves (see Resize).
type moveOpts struct {
	ref   *records.MoveRef
	avoid []string
	early bool
	edits []func(*records.Instance)
}

func (c *Conductor) liveMigrate(ctx context.Context, instanceUUID, requestedHost string, o moveOpts) (records.Migration, error) {
	// The flow runs on its own context: a caller that stops waiting (a
	// client hang-up) changes nothing.
	ctx = context.WithoutCancel(ctx)
	inst, err := c.store.GetInstance(ctx, instanceUUID)
	if err != nil {
		return records.Migration{}, fmt.Errorf("live-migrating %s: %w", instanceUUID, err)
	}
	// Nova live-migrates active and paused servers; a paused one stays
	// paused through the move and arrives paused.
	// Any other vm_state (a suspended, stopped or rescued server) or a
	// task in flight is refused with Nova's 409 text.
	if inst.VMState != records.VMActive && inst.VMState != records.VMPaused {
		return records.Migration{}, &InvalidStateError{Msg: fmt.Sprintf(
			"Cannot 'os-migrateLive' instance %s while it is in vm_state %s", instanceUUID, inst.VMState)}
	}
	if inst.TaskState != records.TaskNone {
		return records.Migration{}, &InvalidStateError{Msg: fmt.Sprintf(
			"Cannot 'os-migrateLive' instance %s while it is in task_state %s", instanceUUID, inst.TaskState)}
	}
	// Nova answers 400 (UnableToMigrateToSelf), as for a cold migration.
	if requestedHost == inst.Host {
		return records.Migration{}, &BadRequestError{Msg: fmt.Sprintf("Unable to migrate instance (%s) to current host (%s).", instanceUUID, requestedHost)}
	}
	now := c.clock.Now()
	m, err := c.beginMove(ctx, c.moving(inst, records.TaskMigrating), records.Migration{
		UUID: c.cfg.NewID(), InstanceUUID: inst.UUID, Type: "live-migration", SourceHost: inst.Host,
		RequestedHost: requestedHost, CreatedAt: now, UpdatedAt: now, Owner: c.cfg.Owner,
		MemoryTotalBytes: inst.Flavor.RAMMB << 20, MemoryRemainingBytes: inst.Flavor.RAMMB << 20,
		PlanMove: o.ref, AvoidHosts: o.avoid,
	})
	if err != nil {
		return records.Migration{}, fmt.Errorf("live-migrating %s: %w", instanceUUID, err)
	}
	return c.runMove(ctx, m, o)
}

// runMove feeds a recorded move its start: all of it in the caller, or
// with o.early only as far as the store alone decides (flow.Flow.Start:
// the rest, from the first agent call, goes on in the background). It
// returns the migration as it is then. An error leaves the migration in
// its step for the sweep; the record says where it is.
func (c *Conductor) runMove(ctx context.Context, m records.Migration, o moveOpts) (records.Migration, error) {
	ev := migration.Event{Kind: migration.Start}
	var err error
	if o.early {
		_, err = c.migrations.Start(ctx, c.flows, m, ev, c.handOff)
	} else {
		err = c.Handle(ctx, m.ID, ev)
	}
	if err != nil {
		c.log.Warn("move left for the sweep", "migration", m.ID, "type", m.Type, "err", err)
	}
	return c.store.GetMigration(ctx, m.ID)
}

// moving returns inst with a move's task, as a move saves it with its
// migration: owned by this replica.
func (c *Conductor) moving(inst records.Instance, task records.TaskState) records.Instance {
	inst.TaskState, inst.Owner, inst.UpdatedAt = task, c.cfg.Owner, c.clock.Now()
	return inst
}

// beginMove saves inst, in its move's task, and records its migration m
// in one store write (store.Migrations.BeginMove): a crash leaves both or
// neither. It returns the migration as recorded.
func (c *Conductor) beginMove(ctx context.Context, inst records.Instance, m records.Migration) (records.Migration, error) {
	_, m, err := c.store.BeginMove(ctx, inst, m)
	if err != nil {
		return records.Migration{}, fmt.Errorf("recording the move: %w", err)
	}
	return m, nil
}

// Abort asks to cancel a migration (DELETE /servers/{id}/migrations/{mid}).
func (c *Conductor) Abort(ctx context.Context, migID int64) error {
	return c.userEvent(ctx, migID, migration.Abort)
}

// ForceComplete asks a running migration to finish now.
func (c *Conductor) ForceComplete(ctx context.Context, migID int64) error {
	return c.userEvent(ctx, migID, migration.ForceComplete)
}

// ResetMigration is an operator's way out of a stuck migration (`keel
// migration reset`): whatever its phase, it ends in error with its
// allocations put right (rolled back before the guest moved, finished on
// the destination after), the destination rolled back and the source slot
// freed. This replica takes the migration over first.
func (c *Conductor) ResetMigration(ctx context.Context, migID int64) (records.Migration, error) {
	ctx = context.WithoutCancel(ctx)
	if c.cfg.Owner != "" {
		err := retryConflicts(func() error {
			m, err := c.store.GetMigration(ctx, migID)
			if err != nil || m.Owner == c.cfg.Owner || records.MigrationTerminal(m.Status) {
				return err
			}
			m.Owner, m.UpdatedAt = c.cfg.Owner, c.clock.Now()
			_, err = c.store.UpdateMigration(ctx, m)
			return err
		})
		if err != nil {
			return records.Migration{}, fmt.Errorf("resetting migration %d: %w", migID, err)
		}
	}
	if err := c.userEvent(ctx, migID, migration.Reset); err != nil {
		return records.Migration{}, err
	}
	return c.store.GetMigration(ctx, migID)
}

func (c *Conductor) userEvent(ctx context.Context, migID int64, kind migration.EventKind) error {
	ctx = context.WithoutCancel(ctx)
	m, err := c.store.GetMigration(ctx, migID)
	if err != nil {
		return fmt.Errorf("migration %d: %w", migID, err)
	}
	if _, _, err := c.machine.Step(m, migration.Event{Kind: kind}, c.clock.Now()); err != nil {
		return &InvalidStateError{Msg: fmt.Sprintf("cannot %s migration %d in status %s: %v", kind, migID, m.Status, err)}
	}
	return c.Handle(ctx, migID, migration.Event{Kind: kind})
}

// CopyProgress implements compute.Reporter.
func (c *Conductor) CopyProgress(ctx context.Context, migID int64, total, processed, remaining int64) {
	_ = c.Handle(ctx, migID, migration.Event{Kind: migration.Progress, Total: total, Processed: processed, Remaining: remaining})
}

// CopyDone implements compute.Reporter. It returns nil once the outcome
// is committed, or when it no longer applies (the migration ended or moved
// on: a repeat); an error means it was not taken and must be sent again.
func (c *Conductor) CopyDone(ctx context.Context, migID int64, copyErr error) error {
	ev := migration.Event{Kind: migration.Copied}
	if copyErr != nil {
		ev = migration.Event{Kind: migration.CopyFailed, Err: copyErr.Error(), Restarted: errors.Is(copyErr, compute.ErrCopyRestarted)}
	}
	err := c.Handle(ctx, migID, ev)
	var illegal *migration.IllegalError
	if errors.As(err, &illegal) || isNotFound(err) {
		return nil
	}
	return err
}

// Handle feeds one event to a migration and performs the resulting
// actions, feeding their answers back, until the migration waits for
// something outside (a slot, the memory copy) or ends: the driver's loop
// (flow.Flow.Run) over the migration flow (see migrationFlow). The
// record is saved before each action runs, the instance settled before
// the save that ends it.
func (c *Conductor) Handle(ctx context.Context, migID int64, ev migration.Event) error {
	_, err := c.migrations.Run(ctx, c.flows, records.Migration{ID: migID}, ev)
	return err
}

func (e *moveEffects) actClaim(ctx context.Context, m records.Migration, inst records.Instance, _ migration.Action) (migration.Event, bool, error) {
	if m.NewFlavor != nil {
		inst.Flavor = *m.NewFlavor // a resize's destination holds the new flavor
	}
	host, err := e.claimDestination(ctx, m, inst)
	if err != nil {
		if !scheduler.IsNoValidHost(err) && !placement.IsCapacity(err) && !placement.IsConflict(err) {
			return noAnswer, false, err
		}
		return failed(migration.NoValidHost, err)
	}
	return migration.Event{Kind: migration.Claimed, Host: host}, true, nil
}

func (e *moveEffects) actCheck(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.CheckCanLiveMigrateDestination(ctx, inst, m.SourceHost) }); err != nil {
		return failed(migration.CheckFailed, err)
	}
	return answer(migration.CheckPassed)
}

func (e *moveEffects) actRevert(ctx context.Context, m records.Migration, _ records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.revertAllocations(ctx, m); err != nil {
		return noAnswer, false, fmt.Errorf("giving the source allocation back: %w", err)
	}
	if a.Kind == migration.ReleaseDestination {
		return answer(migration.Released)
	}
	return answer(migration.Reverted)
}

// actAcquireSlot: the move itself goes on in the background (as Nova's
// API answers 202 once the migration is queued): the slot, granted now or
// when one frees, is handed over on the clock.
func (e *moveEffects) actAcquireSlot(ctx context.Context, m records.Migration, _ records.Instance, _ migration.Action) (migration.Event, bool, error) {
	bg := context.WithoutCancel(ctx)
	e.tasks.afterFunc(e.clock, 0, func() {
		if e.acquireSlot(m) {
			// Refused (aborted meanwhile): pass the slot on.
			if err := e.handle(bg, m.ID, migration.Event{Kind: migration.SlotAcquired}); err != nil {
				e.releaseSlot(bg, m.ID)
			}
		}
	})
	return noAnswer, false, nil
}

func (e *moveEffects) actHoldSlot(_ context.Context, m records.Migration, _ records.Instance, a migration.Action) (migration.Event, bool, error) {
	e.slots.mu.Lock()
	e.slots.tab.hold(a.Host, m.DestHost, m.ID)
	e.slots.mu.Unlock()
	return noAnswer, false, nil
}

// actCheckCopy asks the source whether the copy's cast reached it, best
// effort: a source that cannot be asked reports on its own restart
// (compute.Manager.Reconcile), or the stall deadline ends the copy.
//
// The question goes on in the background, as a slot's hand-over does:
// Recover resumes the copies before the server serves, when the agents
// may not have (re)connected yet — keel dev starts its agents only once
// the API is up, and agents of a restarted server reconnect within
// seconds — and the call retries until one answers (rpc_timeout). Asked
// inline, it held the API down that long for each such copy.
func (e *moveEffects) actCheckCopy(ctx context.Context, m records.Migration, _ records.Instance, a migration.Action) (migration.Event, bool, error) {
	bg := context.WithoutCancel(ctx)
	e.tasks.afterFunc(e.clock, 0, func() {
		ctx, cancel := e.tasks.context(bg)
		defer cancel()
		if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.CheckCopy(ctx, m.ID) }); err != nil {
			e.log.Warn("asking the source whether it runs the copy", "migration", m.ID, "source", a.Host, "err", err)
		}
	})
	return noAnswer, false, nil
}

func (e *moveEffects) actReleaseSlot(ctx context.Context, m records.Migration, _ records.Instance, _ migration.Action) (migration.Event, bool, error) {
	e.releaseSlot(ctx, m.ID)
	return noAnswer, false, nil
}

func (e *moveEffects) actPrepare(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	var data map[string]string
	if err := e.agents.call(a.Host, func(api ComputeAPI) (err error) { data, err = api.PreLiveMigration(ctx, inst); return err }); err != nil {
		return failed(migration.PrepareFailed, err)
	}
	return migration.Event{Kind: migration.Prepared, Data: data}, true, nil
}

func (e *moveEffects) actStartCopy(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.LiveMigration(ctx, m.ID, m.Version, inst, m.DestHost, a.Data) }); err != nil {
		return failed(migration.CopyFailed, err)
	}
	return noAnswer, false, nil
}

// actStopCopy asks the source to abort or finish the copy, best effort:
// the copy's report (or, when it never comes, the stall timeout) ends it.
func (e *moveEffects) actStopCopy(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	err := e.agents.call(a.Host, func(api ComputeAPI) error {
		if a.Kind == migration.AbortCopy {
			return api.AbortLiveMigration(ctx, inst.UUID)
		}
		return api.ForceCompleteLiveMigration(ctx, inst.UUID)
	})
	if err != nil {
		e.log.Warn("asking the source to stop or finish the copy", "migration", m.ID, "action", a.Kind, "err", err)
	}
	return noAnswer, false, nil
}

func (e *moveEffects) actPostSource(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.PostLiveMigrationAtSource(ctx, inst) }); err != nil {
		return failed(migration.StepFailed, err)
	}
	return answer(migration.SourceDone)
}

func (e *moveEffects) actPostDest(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.PostLiveMigrationAtDestination(ctx, inst) }); err != nil {
		return failed(migration.StepFailed, err)
	}
	return answer(migration.DestDone)
}

func (e *moveEffects) actFinish(ctx context.Context, m records.Migration, _ records.Instance, _ migration.Action) (migration.Event, bool, error) {
	if _, err := e.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: m.UUID, AnyConsumerGeneration: true}); err != nil {
		return noAnswer, false, fmt.Errorf("deleting the migration consumer's allocation: %w", err)
	}
	return answer(migration.Finished)
}

// actRollbackDest: a destination that cannot roll back (it is down) is
// not waited for: the reason goes in the record, and the destination's
// audit removes the guest no instance of its host claims.
func (e *moveEffects) actRollbackDest(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.RollbackLiveMigrationAtDestination(ctx, inst) }); err != nil {
		e.log.Warn("rollback at destination failed; left for its audit", "migration", m.ID, "dest", a.Host, "err", err)
		return migration.Event{Kind: migration.DestRolledBack, Err: fmt.Sprintf("rollback at destination %s failed (left for its audit): %v", a.Host, err)}, true, nil
	}
	return answer(migration.DestRolledBack)
}

func (e *moveEffects) actSettle(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.settleInstance(ctx, inst, a); err != nil {
		return noAnswer, false, err
	}
	return noAnswer, false, nil
}
