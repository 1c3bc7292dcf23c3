package conductor

import (
	"context"
	"fmt"
	"time"

	"keel/internal/boot"
	"keel/internal/migration"
	"keel/internal/records"
	"keel/internal/store"
)

// SweepStalled ends or resumes the flows this replica drives that stopped
// moving (RunOwnership calls it every sweepEvery):
//
//   - a boot building longer than BuildTimeout times out (its guest is
//     removed, its claim given back, the instance in ERROR);
//   - a live migration whose memory copy has had no report from its source
//     for CopyStallTimeout is aborted and rolled back;
//   - a boot or migration left in a step with nothing in flight for
//     StallAfter (an action could not be done: the store was full, an
//     agent was cut off) is resumed: its step is repeated, or before the
//     copy the migration is rolled back.
//
// A flow whose record changed since it was read, or whose step is in
// flight in this process, is left alone. It returns how many flows it fed
// an event.
func (c *Conductor) SweepStalled(ctx context.Context) (int, error) {
	ctx = context.WithoutCancel(ctx)
	nb, err := c.sweepBoots(ctx)
	if err != nil {
		return nb, err
	}
	nm, err := c.sweepMigrations(ctx)
	if err != nil {
		return nb + nm, err
	}
	nl, err := c.sweepLifecycle(ctx)
	return nb + nm + nl, err
}

func (c *Conductor) stallAfter() time.Duration {
	switch {
	case c.cfg.StallAfter > 0:
		return c.cfg.StallAfter
	case c.cfg.ServiceDownTime > 0:
		return c.cfg.ServiceDownTime
	}
	return time.Minute
}

// sweepEvery is how often RunOwnership sweeps for stalled flows: a
// quarter of StallAfter (so a stall ends within about StallAfter and a
// quarter), at most every 10 s (an evacuated host that came back is seen
// within that), at least every 100 ms.
func (c *Conductor) sweepEvery() time.Duration {
	return min(max(c.stallAfter()/4, 100*time.Millisecond), 10*time.Second)
}

// mine reports whether this replica drives a flow owned by owner.
func (c *Conductor) mine(owner string) bool { return owner == c.cfg.Owner }

func (c *Conductor) sweepBoots(ctx context.Context) (int, error) {
	insts, err := c.store.ListInstances(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("sweeping boots: %w", err)
	}
	now, n := c.clock.Now(), 0
	for _, in := range insts {
		if in.VMState != records.VMBuilding || in.TaskState == records.TaskDeleting || !c.mine(in.Owner) {
			continue
		}
		var ev boot.Event
		switch {
		case in.BuildPhase == "" && now.Sub(in.UpdatedAt) > c.stallAfter():
			ev = boot.Event{Kind: boot.Start} // created, its first step never saved
		case c.cfg.BuildTimeout > 0 && now.Sub(in.BuildStarted()) > c.cfg.BuildTimeout && in.BuildPhase != boot.PhaseRelease:
			ev = boot.Event{Kind: boot.TimedOut, Err: fmt.Sprintf("still building after %s (instance_build_timeout)", c.cfg.BuildTimeout)}
		case in.BuildPhase != boot.PhaseSpawn && now.Sub(in.UpdatedAt) > c.stallAfter():
			ev = boot.Event{Kind: boot.Resume}
		default:
			continue
		}
		if c.stepBootIf(ctx, in, ev) {
			n++
		}
	}
	return n, nil
}

// stepBootIf feeds ev to a boot unless its step is in flight here or its
// record moved on since the sweep read it.
func (c *Conductor) stepBootIf(ctx context.Context, seen records.Instance, ev boot.Event) bool {
	unlock, ok := c.tryBootLock(seen.UUID)
	if !ok {
		return false
	}
	cur, err := c.store.GetInstance(ctx, seen.UUID)
	unlock()
	if err != nil || cur.Version != seen.Version {
		return false
	}
	c.log.Info("sweeping a stalled boot", "instance", seen.UUID, "phase", seen.BuildPhase, "event", ev.Kind, "since", seen.UpdatedAt)
	if _, err := c.StepBoot(ctx, seen.UUID, ev); err != nil {
		c.log.Warn("stalled boot", "instance", seen.UUID, "err", err)
	}
	return true
}

func (c *Conductor) sweepMigrations(ctx context.Context) (int, error) {
	ms, err := c.store.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return 0, fmt.Errorf("sweeping migrations: %w", err)
	}
	now, n := c.clock.Now(), 0
	for _, m := range ms {
		if m.Phase == "" || records.MigrationTerminal(m.Status) || !c.mine(m.Owner) {
			continue
		}
		idle := now.Sub(m.UpdatedAt)
		var ev migration.Event
		switch {
		case m.Phase == migration.PhaseCopy || m.Phase == migration.PhaseResizeSource:
			if c.cfg.CopyStallTimeout <= 0 || idle <= c.cfg.CopyStallTimeout {
				continue
			}
			ev = migration.Event{Kind: migration.Stalled, Err: fmt.Sprintf("none for %s (migration_stall_timeout)", idle.Round(time.Second))}
		case m.Phase == migration.PhaseAwaitSource:
			if down, err := c.serviceDown(ctx, m.SourceHost); err != nil || down {
				continue // the evacuated host is still down
			}
			ev = migration.Event{Kind: migration.SourceBack}
		case m.Phase == migration.PhaseRebuild:
			if c.cfg.CopyStallTimeout <= 0 || idle <= c.cfg.CopyStallTimeout {
				continue
			}
			ev = migration.Event{Kind: migration.Stalled, Err: fmt.Sprintf("no report from the destination for %s", idle.Round(time.Second))}
		case m.Phase == migration.PhaseVerify:
			if c.cfg.ResizeConfirmWindow <= 0 || idle <= c.cfg.ResizeConfirmWindow {
				continue // the user decides
			}
			ev = migration.Event{Kind: migration.Confirm} // resize_confirm_window passed
		case m.Phase == migration.PhaseQueue && c.isWaiting(m):
			continue // waiting for a source slot is not a stall
		case idle > c.stallAfter():
			ev = migration.Event{Kind: migration.Resume}
		default:
			continue
		}
		if c.handleIf(ctx, m, ev) {
			n++
		}
	}
	return n, nil
}

// isWaiting reports whether m waits in this replica's queue for a slot,
// or was just handed one (its step about to run).
func (c *Conductor) isWaiting(m records.Migration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slotTab.isWaiting(m.ID) || c.slotTab.holds(m.ID)
}

// handleIf feeds ev to a migration unless its step is in flight here or
// its record moved on since the sweep read it.
func (c *Conductor) handleIf(ctx context.Context, seen records.Migration, ev migration.Event) bool {
	l := c.lock(seen.ID)
	if !l.TryLock() {
		return false
	}
	cur, err := c.store.GetMigration(ctx, seen.ID)
	l.Unlock()
	if err != nil || cur.Version != seen.Version {
		return false
	}
	c.log.Info("sweeping a stalled migration", "migration", seen.ID, "phase", seen.Phase, "event", ev.Kind, "since", seen.UpdatedAt)
	if err := c.Handle(ctx, seen.ID, ev); err != nil {
		c.log.Warn("stalled migration", "migration", seen.ID, "err", err)
	}
	return true
}

// tryBootLock is bootLock without waiting: false when the boot's step is
// in flight in this process.
func (c *Conductor) tryBootLock(uuid string) (func(), bool) {
	c.mu.Lock()
	if m := c.bootMus[uuid]; m != nil {
		c.mu.Unlock()
		return nil, false
	}
	c.mu.Unlock()
	return c.bootLock(uuid), true
}

// HeldSlots returns, by source host, the migrations holding one of its
// max_concurrent_live_migrations slots on this replica (a copy), after
// freeing those of migrations that ended on another replica (reconcile,
// which the heartbeat also runs): what it returns is held for real.
func (c *Conductor) HeldSlots(ctx context.Context) map[string][]int64 {
	c.reconcile(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slotTab.heldBySource()
}
