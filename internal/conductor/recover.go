package conductor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"keel/internal/boot"
	"keel/internal/migration"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Recover resumes the migrations a restart of the server left active:
// the migration record is the source of truth. Before the memory copy a
// migration is rolled back (the destination claim returned, anything the
// destination prepared removed) and ends in error; during the copy it
// waits for the source agent's report; after it, the interrupted step is
// repeated (every step is idempotent), so the migration completes. It
// returns how many migrations it resumed.
//
// Run it once at start, before serving. Without an owner (Config.Owner
// empty) it resumes every active migration. With one, it first
// heartbeats, then resumes only the migrations that are unowned, its own
// (a restart of this replica), or owned by a replica whose heartbeat is
// older than ServiceDownTime; it takes the others' over first, with a
// versioned update of the record, so of two replicas racing for the same
// migration exactly one resumes it. Migrations of live replicas are left
// alone.
func (c *Conductor) Recover(ctx context.Context) (int, error) {
	if c.cfg.Owner != "" {
		if err := c.Heartbeat(ctx); err != nil {
			return 0, fmt.Errorf("recovering migrations: %w", err)
		}
	}
	return c.resume(ctx, true)
}

// Sweep takes over and resumes the active migrations owned by replicas
// whose heartbeat is older than ServiceDownTime (a replica that died for
// good). RunOwnership calls it every ServiceDownTime/2; it does nothing
// without an owner. It returns how many migrations it took over.
func (c *Conductor) Sweep(ctx context.Context) (int, error) {
	if c.cfg.Owner == "" {
		return 0, nil
	}
	return c.resume(ctx, false)
}

// resume resumes the boots and active migrations this conductor may take:
// at start (Recover) also the unowned ones and its own.
func (c *Conductor) resume(ctx context.Context, atStart bool) (int, error) {
	var live map[string]bool
	if c.cfg.Owner != "" {
		var err error
		if live, err = c.liveReplicas(ctx); err != nil {
			return 0, err
		}
	}
	nb, err := c.resumeBoots(ctx, live, atStart)
	if err != nil {
		return nb, err
	}
	nm, err := c.resumeMigrations(ctx, live, atStart)
	if err != nil {
		return nb + nm, err
	}
	nl, err := c.resumeLifecycle(ctx, live, atStart)
	return nb + nm + nl, err
}

// resumeBoots resumes the boots this conductor may take (see mayTake).
func (c *Conductor) resumeBoots(ctx context.Context, live map[string]bool, atStart bool) (int, error) {
	insts, err := c.store.ListInstances(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("recovering boots: %w", err)
	}
	n := 0
	for _, in := range insts {
		if in.VMState != records.VMBuilding || in.TaskState == records.TaskDeleting {
			continue
		}
		if c.cfg.Owner != "" {
			if !c.mayTakeOwned(in.Owner, live, atStart) {
				continue
			}
			if in.Owner != c.cfg.Owner {
				won, err := c.takeOverBoot(ctx, in)
				if err != nil {
					c.log.Error("taking a boot over", "instance", in.UUID, "owner", in.Owner, "err", err)
					continue
				}
				if !won {
					continue
				}
			}
		}
		ev := boot.Event{Kind: boot.Resume}
		if in.BuildPhase == "" {
			ev.Kind = boot.Start // created, never stepped
		}
		c.log.Info("resuming boot", "instance", in.UUID, "phase", in.BuildPhase, "host", in.Host, "previous_owner", in.Owner, "at_start", atStart)
		if _, err := c.StepBoot(ctx, in.UUID, ev); err != nil {
			c.log.Error("resuming boot", "instance", in.UUID, "err", err)
			continue
		}
		n++
	}
	return n, nil
}

// takeOverBoot makes this replica the owner of a boot with a versioned
// update; false when the record changed meanwhile.
func (c *Conductor) takeOverBoot(ctx context.Context, in records.Instance) (bool, error) {
	prev := in.Owner
	in.Owner, in.UpdatedAt = c.cfg.Owner, c.clock.Now()
	if _, err := c.store.UpdateInstance(ctx, in); placement.IsConflict(err) || isNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("taking the boot of %s over: %w", in.UUID, err)
	}
	c.log.Info("took boot over", "instance", in.UUID, "previous_owner", prev, "owner", c.cfg.Owner)
	return true, nil
}

// resumeMigrations resumes the active migrations this conductor may take.
func (c *Conductor) resumeMigrations(ctx context.Context, live map[string]bool, atStart bool) (int, error) {
	ms, err := c.store.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return 0, fmt.Errorf("recovering migrations: %w", err)
	}
	n := 0
	for _, m := range ms {
		if m.Phase == "" || records.MigrationTerminal(m.Status) {
			continue
		}
		if c.cfg.Owner != "" {
			if !c.mayTake(m, live, atStart) {
				continue
			}
			if m.Owner != c.cfg.Owner {
				won, err := c.takeOver(ctx, m.ID, live, atStart)
				if err != nil {
					c.log.Error("taking a migration over", "migration", m.ID, "owner", m.Owner, "err", err)
					continue
				}
				if !won {
					continue
				}
			}
		}
		c.log.Info("resuming migration", "migration", m.ID, "instance", m.InstanceUUID, "phase", m.Phase, "status", m.Status,
			"previous_owner", m.Owner, "at_start", atStart)
		if err := c.Handle(ctx, m.ID, migration.Event{Kind: migration.Resume}); err != nil {
			c.log.Error("resuming migration", "migration", m.ID, "err", err)
			continue
		}
		n++
	}
	return n, nil
}

// mayTake reports whether this replica may resume m: one whose owner is
// dead, and at start also an unowned one or its own.
func (c *Conductor) mayTake(m records.Migration, live map[string]bool, atStart bool) bool {
	return c.mayTakeOwned(m.Owner, live, atStart)
}

// mayTakeOwned is mayTake for a flow owned by owner.
func (c *Conductor) mayTakeOwned(owner string, live map[string]bool, atStart bool) bool {
	switch {
	case owner == c.cfg.Owner:
		return atStart // a live replica already drives its own
	case owner == "":
		return atStart
	default:
		return !live[owner]
	}
}

// takeOver makes this replica the owner of migration id with a versioned
// update; it reports false when the record changed meanwhile (another
// replica took it, or the migration moved on or ended).
func (c *Conductor) takeOver(ctx context.Context, id int64, live map[string]bool, atStart bool) (bool, error) {
	l := c.lock(id)
	l.Lock()
	defer l.Unlock()
	m, err := c.store.GetMigration(ctx, id)
	if err != nil {
		return false, fmt.Errorf("migration %d: %w", id, err)
	}
	if records.MigrationTerminal(m.Status) || !c.mayTake(m, live, atStart) {
		return false, nil
	}
	prev := m.Owner
	m.Owner, m.UpdatedAt = c.cfg.Owner, c.clock.Now()
	if _, err := c.store.UpdateMigration(ctx, m); placement.IsConflict(err) {
		c.log.Info("another replica took the migration first", "migration", id, "previous_owner", prev)
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("taking migration %d over: %w", id, err)
	}
	c.log.Info("took migration over", "migration", id, "previous_owner", prev, "owner", c.cfg.Owner)
	return true, nil
}

// liveReplicas are the names of the replicas whose heartbeat is younger
// than ServiceDownTime (this one always counts as live).
func (c *Conductor) liveReplicas(ctx context.Context) (map[string]bool, error) {
	svcs, err := c.store.ListServices(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading replicas' heartbeats: %w", err)
	}
	now := c.clock.Now()
	live := map[string]bool{c.cfg.Owner: true}
	prefix := records.ServerServiceHost("")
	for _, s := range svcs {
		if s.Binary != records.ServerBinary || len(s.Host) < len(prefix) {
			continue
		}
		if !s.ForcedDown && (c.cfg.ServiceDownTime <= 0 || now.Sub(s.LastSeenUp) <= c.cfg.ServiceDownTime) {
			live[s.Host[len(prefix):]] = true
		}
	}
	return live, nil
}

// Heartbeat records that this replica is alive (its service record's
// LastSeenUp is now). It does nothing without an owner.
func (c *Conductor) Heartbeat(ctx context.Context) error {
	if c.cfg.Owner == "" {
		return nil
	}
	key, now := records.ServerServiceHost(c.cfg.Owner), c.clock.Now()
	_, err := c.store.UpdateService(ctx, key, func(s *records.Service) error {
		s.LastSeenUp, s.UpdatedAt = now, now
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		err = c.store.PutService(ctx, records.Service{Host: key, Binary: records.ServerBinary, Zone: "internal", LastSeenUp: now, UpdatedAt: now})
	}
	if err != nil {
		return fmt.Errorf("heartbeating server replica %s: %w", c.cfg.Owner, err)
	}
	return nil
}

// RunOwnership sweeps for stalled flows (SweepStalled), and with an owner
// heartbeats every HeartbeatInterval and sweeps for dead replicas' boots
// and migrations every ServiceDownTime/2, on the conductor's clock, until
// ctx ends.
func (c *Conductor) RunOwnership(ctx context.Context) {
	c.repeat(ctx, c.sweepEvery(), func() {
		if n, err := c.SweepStalled(ctx); err != nil {
			c.log.Warn("sweeping for stalled boots and migrations", "err", err)
		} else if n > 0 {
			c.log.Info("ended or resumed stalled boots and migrations", "count", n)
		}
	})
	if c.cfg.Owner == "" {
		return
	}
	every := c.cfg.HeartbeatInterval
	if every <= 0 {
		every = c.cfg.ServiceDownTime / 3
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	c.repeat(ctx, every, func() {
		if err := c.Heartbeat(ctx); err != nil {
			c.log.Warn("heartbeat", "err", err)
		}
		c.reconcile(ctx)
	})
	if c.cfg.ServiceDownTime > 0 {
		c.repeat(ctx, c.cfg.ServiceDownTime/2, func() {
			if n, err := c.Sweep(ctx); err != nil {
				c.log.Warn("sweeping for dead replicas' migrations", "err", err)
			} else if n > 0 {
				c.log.Info("took over migrations of dead replicas", "count", n)
			}
		})
	}
}

// repeat runs f every d on the clock until ctx ends.
func (c *Conductor) repeat(ctx context.Context, d time.Duration, f func()) {
	var tick func()
	tick = func() {
		if ctx.Err() != nil {
			return
		}
		f()
		if ctx.Err() == nil {
			c.clock.AfterFunc(d, tick)
		}
	}
	c.clock.AfterFunc(d, tick)
}
