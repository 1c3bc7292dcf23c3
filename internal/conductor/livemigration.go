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
	"keel/internal/store"
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
	if requestedHost == inst.Host {
		return records.Migration{}, &InvalidStateError{Msg: fmt.Sprintf("instance %s already runs on %s", instanceUUID, requestedHost)}
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

// forget drops what the conductor keeps in memory for an ended migration:
// its place in the slot queue (a migration aborted while queued must not
// be handed the next slot).
func (c *Conductor) forget(m records.Migration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slotTab.forget(m.ID)
}

// migrationEffects is the migration machine's effect table, as the
// driver's loop (flow.Flow.Perform) calls it: one method per action kind,
// each given the instance as stored now, returning the answer event, if
// the action has one now, or an error when it cannot be done now (the
// migration then stays in its phase, and the sweep of stalled flows
// resumes it). A compensation that fails on an agent (the destination's
// rollback) is an answer with the reason, which the record keeps; one
// that fails in the store is retried.
func (c *Conductor) migrationEffects() func(context.Context, records.Migration, migration.Action) (migration.Event, bool, error) {
	type effect func(c *Conductor, ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error)
	table := map[migration.ActionKind]effect{
		migration.ClaimDestination:   (*Conductor).actClaim,
		migration.CheckDestination:   (*Conductor).actCheck,
		migration.ReleaseDestination: (*Conductor).actRevert,
		migration.RevertAllocations:  (*Conductor).actRevert,
		migration.AcquireSlot:        (*Conductor).actAcquireSlot,
		migration.HoldSlot:           (*Conductor).actHoldSlot,
		migration.CheckCopy:          (*Conductor).actCheckCopy,
		migration.ReleaseSlot:        (*Conductor).actReleaseSlot,
		migration.PreLiveMigration:   (*Conductor).actPrepare,
		migration.StartCopy:          (*Conductor).actStartCopy,
		migration.AbortCopy:          (*Conductor).actStopCopy,
		migration.ForceCopy:          (*Conductor).actStopCopy,
		migration.PostAtSource:       (*Conductor).actPostSource,
		migration.PostAtDest:         (*Conductor).actPostDest,
		migration.FinishAllocations:  (*Conductor).actFinish,
		migration.RollbackAtDest:     (*Conductor).actRollbackDest,
		migration.SettleInstance:     (*Conductor).actSettle,

		migration.PrepResize:           (*Conductor).actPrepResize,
		migration.ResizeInstance:       (*Conductor).actResizeInstance,
		migration.FinishResize:         (*Conductor).actFinishResize,
		migration.ConfirmAtSource:      (*Conductor).actConfirmAtSource,
		migration.RevertAtDest:         (*Conductor).actRevertAtDest,
		migration.FinishRevertAtSource: (*Conductor).actFinishRevertAtSource,

		migration.RebuildAtDest: (*Conductor).actRebuildAtDest,
		migration.CleanupSource: (*Conductor).actCleanupSource,
		migration.Terminate:     (*Conductor).actTerminate,
	}
	return func(ctx context.Context, m records.Migration, a migration.Action) (migration.Event, bool, error) {
		f, ok := table[a.Kind]
		if !ok {
			return migration.Event{}, false, fmt.Errorf("migration %d: unknown action %q", m.ID, a.Kind)
		}
		inst, err := c.store.GetInstance(ctx, m.InstanceUUID)
		if err != nil {
			if !isNotFound(err) {
				return migration.Event{}, false, fmt.Errorf("migration %d: reading instance %s: %w", m.ID, m.InstanceUUID, err)
			}
			c.log.Error("migration lost its instance", "migration", m.ID, "instance", m.InstanceUUID, "err", err)
			inst = records.Instance{UUID: m.InstanceUUID}
		}
		ans, ok, err := f(c, ctx, m, inst, a)
		if err != nil {
			return ans, ok, fmt.Errorf("migration %d: %s: %w", m.ID, a.Kind, err)
		}
		return ans, ok, nil
	}
}

func answer(kind migration.EventKind) (migration.Event, bool, error) {
	return migration.Event{Kind: kind}, true, nil
}

func failed(kind migration.EventKind, err error) (migration.Event, bool, error) {
	return migration.Event{Kind: kind, Err: err.Error()}, true, nil
}

var noAnswer = migration.Event{}

func (c *Conductor) actClaim(ctx context.Context, m records.Migration, inst records.Instance, _ migration.Action) (migration.Event, bool, error) {
	if m.NewFlavor != nil {
		inst.Flavor = *m.NewFlavor // a resize's destination holds the new flavor
	}
	host, err := c.claimDestination(ctx, m, inst)
	if err != nil {
		if !scheduler.IsNoValidHost(err) && !placement.IsCapacity(err) && !placement.IsConflict(err) {
			return noAnswer, false, err
		}
		return failed(migration.NoValidHost, err)
	}
	return migration.Event{Kind: migration.Claimed, Host: host}, true, nil
}

func (c *Conductor) actCheck(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := c.call(a.Host, func(api ComputeAPI) error { return api.CheckCanLiveMigrateDestination(ctx, inst, m.SourceHost) }); err != nil {
		return failed(migration.CheckFailed, err)
	}
	return answer(migration.CheckPassed)
}

func (c *Conductor) actRevert(ctx context.Context, m records.Migration, _ records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := c.revertAllocations(ctx, m); err != nil {
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
func (c *Conductor) actAcquireSlot(ctx context.Context, m records.Migration, _ records.Instance, _ migration.Action) (migration.Event, bool, error) {
	bg := context.WithoutCancel(ctx)
	c.tasks.afterFunc(c.clock, 0, func() {
		if c.acquireSlot(m) {
			// Refused (aborted meanwhile): pass the slot on.
			if err := c.Handle(bg, m.ID, migration.Event{Kind: migration.SlotAcquired}); err != nil {
				c.releaseSlot(bg, m.ID)
			}
		}
	})
	return noAnswer, false, nil
}

func (c *Conductor) actHoldSlot(_ context.Context, m records.Migration, _ records.Instance, a migration.Action) (migration.Event, bool, error) {
	c.mu.Lock()
	c.slotTab.hold(a.Host, m.DestHost, m.ID)
	c.mu.Unlock()
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
func (c *Conductor) actCheckCopy(ctx context.Context, m records.Migration, _ records.Instance, a migration.Action) (migration.Event, bool, error) {
	bg := context.WithoutCancel(ctx)
	c.tasks.afterFunc(c.clock, 0, func() {
		ctx, cancel := c.tasks.context(bg)
		defer cancel()
		if err := c.call(a.Host, func(api ComputeAPI) error { return api.CheckCopy(ctx, m.ID) }); err != nil {
			c.log.Warn("asking the source whether it runs the copy", "migration", m.ID, "source", a.Host, "err", err)
		}
	})
	return noAnswer, false, nil
}

func (c *Conductor) actReleaseSlot(ctx context.Context, m records.Migration, _ records.Instance, _ migration.Action) (migration.Event, bool, error) {
	c.releaseSlot(ctx, m.ID)
	return noAnswer, false, nil
}

func (c *Conductor) actPrepare(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	var data map[string]string
	if err := c.call(a.Host, func(api ComputeAPI) (err error) { data, err = api.PreLiveMigration(ctx, inst); return err }); err != nil {
		return failed(migration.PrepareFailed, err)
	}
	return migration.Event{Kind: migration.Prepared, Data: data}, true, nil
}

func (c *Conductor) actStartCopy(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := c.call(a.Host, func(api ComputeAPI) error { return api.LiveMigration(ctx, m.ID, m.Version, inst, m.DestHost, a.Data) }); err != nil {
		return failed(migration.CopyFailed, err)
	}
	return noAnswer, false, nil
}

// actStopCopy asks the source to abort or finish the copy, best effort:
// the copy's report (or, when it never comes, the stall timeout) ends it.
func (c *Conductor) actStopCopy(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	err := c.call(a.Host, func(api ComputeAPI) error {
		if a.Kind == migration.AbortCopy {
			return api.AbortLiveMigration(ctx, inst.UUID)
		}
		return api.ForceCompleteLiveMigration(ctx, inst.UUID)
	})
	if err != nil {
		c.log.Warn("asking the source to stop or finish the copy", "migration", m.ID, "action", a.Kind, "err", err)
	}
	return noAnswer, false, nil
}

func (c *Conductor) actPostSource(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := c.call(a.Host, func(api ComputeAPI) error { return api.PostLiveMigrationAtSource(ctx, inst) }); err != nil {
		return failed(migration.StepFailed, err)
	}
	return answer(migration.SourceDone)
}

func (c *Conductor) actPostDest(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := c.call(a.Host, func(api ComputeAPI) error { return api.PostLiveMigrationAtDestination(ctx, inst) }); err != nil {
		return failed(migration.StepFailed, err)
	}
	return answer(migration.DestDone)
}

func (c *Conductor) actFinish(ctx context.Context, m records.Migration, _ records.Instance, _ migration.Action) (migration.Event, bool, error) {
	if _, err := c.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: m.UUID, AnyConsumerGeneration: true}); err != nil {
		return noAnswer, false, fmt.Errorf("deleting the migration consumer's allocation: %w", err)
	}
	return answer(migration.Finished)
}

// actRollbackDest: a destination that cannot roll back (it is down) is
// not waited for: the reason goes in the record, and the destination's
// audit removes the guest no instance of its host claims.
func (c *Conductor) actRollbackDest(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := c.call(a.Host, func(api ComputeAPI) error { return api.RollbackLiveMigrationAtDestination(ctx, inst) }); err != nil {
		c.log.Warn("rollback at destination failed; left for its audit", "migration", m.ID, "dest", a.Host, "err", err)
		return migration.Event{Kind: migration.DestRolledBack, Err: fmt.Sprintf("rollback at destination %s failed (left for its audit): %v", a.Host, err)}, true, nil
	}
	return answer(migration.DestRolledBack)
}

func (c *Conductor) actSettle(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := c.settleInstance(ctx, inst, a); err != nil {
		return noAnswer, false, err
	}
	return noAnswer, false, nil
}

func (c *Conductor) call(host string, f func(ComputeAPI) error) error {
	api, err := c.compute(host)
	if err != nil {
		return err
	}
	return f(api)
}

// claimDestination asks the scheduler for a destination and, in one store
// write, hands the instance's source allocation to the migration consumer
// and claims the destination for the instance.
func (c *Conductor) claimDestination(ctx context.Context, m records.Migration, inst records.Instance) (string, error) {
	src, err := c.store.GetConsumer(ctx, inst.UUID)
	if err != nil {
		return "", fmt.Errorf("reading the allocation of %s: %w", inst.UUID, err)
	}
	// The instance's group policy and hints hold for its new host too
	// (as Nova's live migration runs the same filters).
	unlock := c.groupLock(inst)
	defer unlock()
	req, err := c.request(ctx, inst)
	if err != nil {
		return "", err
	}
	req.IgnoreHosts = append([]string{m.SourceHost}, m.TriedHosts...)
	if m.Type == records.MigrationTypeResize && c.cfg.AllowResizeToSameHost {
		req.IgnoreHosts = req.IgnoreHosts[1:]
	}
	req.IgnoreHosts = append(req.IgnoreHosts, m.AvoidHosts...)
	req.RequestedHost = m.RequestedHost
	sel, err := c.sched.Select(ctx, req, func(ctx context.Context, cand scheduler.Candidate) (int64, error) {
		gen := src.Generation
		plan, err := c.store.WriteAllocations(ctx,
			placement.AllocationWrite{ConsumerUUID: m.UUID, Type: placement.ConsumerMigration,
				ProjectID: src.ProjectID, UserID: src.UserID, Allocations: src.Allocations},
			placement.AllocationWrite{ConsumerUUID: inst.UUID, ConsumerGeneration: &gen, Type: placement.ConsumerInstance,
				Allocations: cand.Allocations, ProviderGenerations: cand.Generations},
		)
		return plan.Providers[cand.ProviderUUID], err
	})
	c.decided("migration", inst, sel, err, "migration", m.ID)
	if err != nil {
		return "", err
	}
	return sel.Host, nil
}

// revertAllocations gives the migration consumer's allocation back to the
// instance and drops the destination claim, in one write. It is a no-op if
// the migration consumer is already gone (done before a restart).
func (c *Conductor) revertAllocations(ctx context.Context, m records.Migration) error {
	return retryConflicts(func() error {
		mc, err := c.store.GetConsumer(ctx, m.UUID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		mcGen := mc.Generation
		if _, err := c.store.GetInstance(ctx, m.InstanceUUID); errors.Is(err, store.ErrNotFound) {
			// The instance is gone: drop the source side, recreate nothing.
			_, err := c.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: m.UUID, ConsumerGeneration: &mcGen})
			return err
		}
		ic, err := c.store.GetConsumer(ctx, m.InstanceUUID)
		var icGen *int64
		if err == nil {
			icGen = &ic.Generation
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		_, err = c.store.WriteAllocations(ctx,
			placement.AllocationWrite{ConsumerUUID: m.InstanceUUID, ConsumerGeneration: icGen, Type: placement.ConsumerInstance,
				ProjectID: mc.ProjectID, UserID: mc.UserID, Allocations: mc.Allocations},
			placement.AllocationWrite{ConsumerUUID: m.UUID, ConsumerGeneration: &mcGen},
		)
		return err
	})
}

// settleInstance ends the instance's part of a move: its task cleared,
// and, as the action says, its host, flavor and vm_state set.
func (c *Conductor) settleInstance(ctx context.Context, inst records.Instance, a migration.Action) error {
	err := retryConflicts(func() error {
		cur, err := c.store.GetInstance(ctx, inst.UUID)
		if err != nil {
			return err
		}
		if a.Host != "" {
			cur.Host = a.Host
		}
		if a.Flavor != nil {
			if cur.ResizeFlavor != nil && a.Flavor.ID != cur.Flavor.ID {
				// The resized guest runs with its new flavor: the old one
				// is the other side now, still counted until the end.
				prev := cur.Flavor
				cur.ResizeFlavor = &prev
			}
			cur.Flavor = *a.Flavor
		}
		if a.VMState != "" {
			cur.VMState = a.VMState
		}
		if cur.VMState != records.VMResized {
			cur.ResizeFlavor = nil // no resize open (any more)
		}
		if a.PowerState != 0 {
			cur.PowerState = a.PowerState
		}
		cur.TaskState, cur.UpdatedAt = records.TaskNone, c.clock.Now()
		_, err = c.store.UpdateInstance(ctx, cur)
		return err
	})
	if err != nil {
		return fmt.Errorf("settling instance %s after its migration: %w", inst.UUID, err)
	}
	return nil
}

// acquireSlot takes a live-migration slot for m (see slotTable), or
// queues it for the next free one.
func (c *Conductor) acquireSlot(m records.Migration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slotTab.acquire(m.SourceHost, m.DestHost, m.ID)
}

// releaseSlot frees migID's slot and hands the room to the queued
// migrations that now fit, whose steps then run on their own (the clock
// runs them after the current handler returns). A slot this replica does
// not hold (another replica queued the migration; this one only applied
// an agent's report) is left to the replica holding it, which frees it
// when it reconciles (see reconcile).
func (c *Conductor) releaseSlot(ctx context.Context, migID int64) {
	c.mu.Lock()
	granted := c.slotTab.release(migID)
	c.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	for _, next := range granted {
		c.tasks.afterFunc(c.clock, 0, func() {
			// A migration aborted while it waited refuses the slot: pass it on.
			if err := c.Handle(bg, next, migration.Event{Kind: migration.SlotAcquired}); err != nil {
				c.releaseSlot(bg, next)
			}
		})
	}
}

// reconcile drops what this replica keeps in memory for migrations that
// ended elsewhere, and frees the slots it holds for migrations that ended
// or that another replica now owns: with several replicas, the agent's
// last report of a migration may have been applied by another replica,
// whose ReleaseSlot and forget could not reach this one's memory.
func (c *Conductor) reconcile(ctx context.Context) {
	held := map[int64]string{} // migration → source whose slot it holds
	c.mu.Lock()
	for host, ids := range c.slotTab.heldBySource() {
		for _, id := range ids {
			held[id] = host
		}
	}
	waiting := c.slotTab.waitingIDs()
	c.mu.Unlock()
	ids := make([]int64, 0, len(waiting)+len(held))
	for _, id := range waiting {
		if _, ok := held[id]; !ok {
			ids = append(ids, id)
		}
	}
	for id := range held {
		ids = append(ids, id)
	}
	for _, id := range ids {
		m, err := c.store.GetMigration(ctx, id)
		if err != nil && !isNotFound(err) {
			c.log.Warn("reconciling the conductor's memory", "migration", id, "err", err)
			continue
		}
		ended := err != nil || records.MigrationTerminal(m.Status)
		host, holds := held[id]
		if holds && (ended || (c.cfg.Owner != "" && m.Owner != c.cfg.Owner)) {
			c.log.Info("freeing the slot of a migration another replica ended or took", "migration", id, "source", host)
			c.releaseSlot(ctx, id)
		}
		if ended {
			m.ID = id
			c.forget(m)
		}
	}
}
