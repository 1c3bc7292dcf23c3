package conductor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"keel/internal/clock"
	"keel/internal/migration"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// moveEffects performs the move machines' actions — live migration, cold
// migration, resize, evacuation — as the migration flow's effect table
// (migrationEffects): the claims and allocation moves in the store, the
// agents' calls, the live-migration slots and the instance's settling.
// It holds only what those need; an answer that comes later (a slot
// handed over) goes back through handle, the conductor's Handle.
type moveEffects struct {
	cfg    Config
	store  Store
	sched  *scheduler.Scheduler
	place  *placer
	agents agents
	slots  *slots
	clock  clock.Clock
	log    *slog.Logger
	tasks  *tasks
	handle func(ctx context.Context, migID int64, ev migration.Event) error
}

// migrationEffects is the migration machine's effect table, as the
// driver's loop (flow.Flow.Perform) calls it: one method per action kind,
// each given the instance as stored now, returning the answer event, if
// the action has one now, or an error when it cannot be done now (the
// migration then stays in its phase, and the sweep of stalled flows
// resumes it). A compensation that fails on an agent (the destination's
// rollback) is an answer with the reason, which the record keeps; one
// that fails in the store is retried.
func (e *moveEffects) migrationEffects() func(context.Context, records.Migration, migration.Action) (migration.Event, bool, error) {
	type effect func(e *moveEffects, ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error)
	table := map[migration.ActionKind]effect{
		migration.ClaimDestination:   (*moveEffects).actClaim,
		migration.CheckDestination:   (*moveEffects).actCheck,
		migration.ReleaseDestination: (*moveEffects).actRevert,
		migration.RevertAllocations:  (*moveEffects).actRevert,
		migration.AcquireSlot:        (*moveEffects).actAcquireSlot,
		migration.HoldSlot:           (*moveEffects).actHoldSlot,
		migration.CheckCopy:          (*moveEffects).actCheckCopy,
		migration.ReleaseSlot:        (*moveEffects).actReleaseSlot,
		migration.PreLiveMigration:   (*moveEffects).actPrepare,
		migration.StartCopy:          (*moveEffects).actStartCopy,
		migration.AbortCopy:          (*moveEffects).actStopCopy,
		migration.ForceCopy:          (*moveEffects).actStopCopy,
		migration.PostAtSource:       (*moveEffects).actPostSource,
		migration.PostAtDest:         (*moveEffects).actPostDest,
		migration.FinishAllocations:  (*moveEffects).actFinish,
		migration.RollbackAtDest:     (*moveEffects).actRollbackDest,
		migration.SettleInstance:     (*moveEffects).actSettle,

		migration.PrepResize:           (*moveEffects).actPrepResize,
		migration.ResizeInstance:       (*moveEffects).actResizeInstance,
		migration.FinishResize:         (*moveEffects).actFinishResize,
		migration.ConfirmAtSource:      (*moveEffects).actConfirmAtSource,
		migration.RevertAtDest:         (*moveEffects).actRevertAtDest,
		migration.FinishRevertAtSource: (*moveEffects).actFinishRevertAtSource,

		migration.RebuildAtDest: (*moveEffects).actRebuildAtDest,
		migration.CleanupSource: (*moveEffects).actCleanupSource,
		migration.Terminate:     (*moveEffects).actTerminate,
	}
	return func(ctx context.Context, m records.Migration, a migration.Action) (migration.Event, bool, error) {
		f, ok := table[a.Kind]
		if !ok {
			return migration.Event{}, false, fmt.Errorf("migration %d: unknown action %q", m.ID, a.Kind)
		}
		inst, err := e.store.GetInstance(ctx, m.InstanceUUID)
		if err != nil {
			if !isNotFound(err) {
				return migration.Event{}, false, fmt.Errorf("migration %d: reading instance %s: %w", m.ID, m.InstanceUUID, err)
			}
			e.log.Error("migration lost its instance", "migration", m.ID, "instance", m.InstanceUUID, "err", err)
			inst = records.Instance{UUID: m.InstanceUUID}
		}
		ans, ok, err := f(e, ctx, m, inst, a)
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

// claimDestination asks the scheduler for a destination and, in one store
// write, hands the instance's source allocation to the migration consumer
// and claims the destination for the instance.
func (e *moveEffects) claimDestination(ctx context.Context, m records.Migration, inst records.Instance) (string, error) {
	src, err := e.store.GetConsumer(ctx, inst.UUID)
	if err != nil {
		return "", fmt.Errorf("reading the allocation of %s: %w", inst.UUID, err)
	}
	// The instance's group policy and hints hold for its new host too
	// (as Nova's live migration runs the same filters).
	unlock := e.place.groupLock(inst)
	defer unlock()
	req, err := e.place.request(ctx, inst)
	if err != nil {
		return "", err
	}
	req.IgnoreHosts = append([]string{m.SourceHost}, m.TriedHosts...)
	if m.Type == records.MigrationTypeResize && e.cfg.AllowResizeToSameHost {
		req.IgnoreHosts = req.IgnoreHosts[1:]
	}
	req.IgnoreHosts = append(req.IgnoreHosts, m.AvoidHosts...)
	req.RequestedHost = m.RequestedHost
	sel, err := e.sched.Select(ctx, req, func(ctx context.Context, cand scheduler.Candidate) (int64, error) {
		gen := src.Generation
		plan, err := e.store.WriteAllocations(ctx,
			placement.AllocationWrite{ConsumerUUID: m.UUID, Type: placement.ConsumerMigration,
				ProjectID: src.ProjectID, UserID: src.UserID, Allocations: src.Allocations},
			placement.AllocationWrite{ConsumerUUID: inst.UUID, ConsumerGeneration: &gen, Type: placement.ConsumerInstance,
				Allocations: cand.Allocations, ProviderGenerations: cand.Generations},
		)
		return plan.Providers[cand.ProviderUUID], err
	})
	e.place.decided("migration", inst, sel, err, "migration", m.ID)
	if err != nil {
		return "", err
	}
	return sel.Host, nil
}

// revertAllocations gives the migration consumer's allocation back to the
// instance and drops the destination claim, in one write. It is a no-op if
// the migration consumer is already gone (done before a restart).
func (e *moveEffects) revertAllocations(ctx context.Context, m records.Migration) error {
	return retryConflicts(func() error {
		mc, err := e.store.GetConsumer(ctx, m.UUID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		mcGen := mc.Generation
		if _, err := e.store.GetInstance(ctx, m.InstanceUUID); errors.Is(err, store.ErrNotFound) {
			// The instance is gone: drop the source side, recreate nothing.
			_, err := e.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: m.UUID, ConsumerGeneration: &mcGen})
			return err
		}
		ic, err := e.store.GetConsumer(ctx, m.InstanceUUID)
		var icGen *int64
		if err == nil {
			icGen = &ic.Generation
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		_, err = e.store.WriteAllocations(ctx,
			placement.AllocationWrite{ConsumerUUID: m.InstanceUUID, ConsumerGeneration: icGen, Type: placement.ConsumerInstance,
				ProjectID: mc.ProjectID, UserID: mc.UserID, Allocations: mc.Allocations},
			placement.AllocationWrite{ConsumerUUID: m.UUID, ConsumerGeneration: &mcGen},
		)
		return err
	})
}

// settleInstance ends the instance's part of a move: its task cleared,
// and, as the action says, its host, flavor and vm_state set.
func (e *moveEffects) settleInstance(ctx context.Context, inst records.Instance, a migration.Action) error {
	err := retryConflicts(func() error {
		cur, err := e.store.GetInstance(ctx, inst.UUID)
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
		cur.TaskState, cur.UpdatedAt = records.TaskNone, e.clock.Now()
		_, err = e.store.UpdateInstance(ctx, cur)
		return err
	})
	if err != nil {
		return fmt.Errorf("settling instance %s after its migration: %w", inst.UUID, err)
	}
	return nil
}

// acquireSlot takes a live-migration slot for m (see slotTable), or
// queues it for the next free one.
func (e *moveEffects) acquireSlot(m records.Migration) bool {
	e.slots.mu.Lock()
	defer e.slots.mu.Unlock()
	return e.slots.tab.acquire(m.SourceHost, m.DestHost, m.ID)
}

// releaseSlot frees migID's slot and hands the room to the queued
// migrations that now fit, whose steps then run on their own (the clock
// runs them after the current handler returns). A slot this replica does
// not hold (another replica queued the migration; this one only applied
// an agent's report) is left to the replica holding it, which frees it
// when it reconciles (see reconcile).
func (e *moveEffects) releaseSlot(ctx context.Context, migID int64) {
	e.slots.mu.Lock()
	granted := e.slots.tab.release(migID)
	e.slots.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	for _, next := range granted {
		e.tasks.afterFunc(e.clock, 0, func() {
			// A migration aborted while it waited refuses the slot: pass it on.
			if err := e.handle(bg, next, migration.Event{Kind: migration.SlotAcquired}); err != nil {
				e.releaseSlot(bg, next)
			}
		})
	}
}

// reconcile drops what this replica keeps in memory for migrations that
// ended elsewhere, and frees the slots it holds for migrations that ended
// or that another replica now owns: with several replicas, the agent's
// last report of a migration may have been applied by another replica,
// whose ReleaseSlot and forget could not reach this one's memory.
func (e *moveEffects) reconcile(ctx context.Context) {
	held := map[int64]string{} // migration → source whose slot it holds
	e.slots.mu.Lock()
	for host, ids := range e.slots.tab.heldBySource() {
		for _, id := range ids {
			held[id] = host
		}
	}
	waiting := e.slots.tab.waitingIDs()
	e.slots.mu.Unlock()
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
		m, err := e.store.GetMigration(ctx, id)
		if err != nil && !isNotFound(err) {
			e.log.Warn("reconciling the conductor's memory", "migration", id, "err", err)
			continue
		}
		ended := err != nil || records.MigrationTerminal(m.Status)
		host, holds := held[id]
		if holds && (ended || (e.cfg.Owner != "" && m.Owner != e.cfg.Owner)) {
			e.log.Info("freeing the slot of a migration another replica ended or took", "migration", id, "source", host)
			e.releaseSlot(ctx, id)
		}
		if ended {
			m.ID = id
			e.forget(m)
		}
	}
}

// forget drops what the conductor keeps in memory for an ended migration:
// its place in the slot queue (a migration aborted while queued must not
// be handed the next slot).
func (e *moveEffects) forget(m records.Migration) {
	e.slots.mu.Lock()
	defer e.slots.mu.Unlock()
	e.slots.tab.forget(m.ID)
}
