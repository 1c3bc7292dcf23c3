package conductor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"keel/internal/records"
	"keel/internal/store"
)

// Recover resumes the flows a restart of the server left in flight (the
// boots, the migrations, the lifecycle actions, the running and approved
// plans): the record is the source
// of truth, and each machine's Resume says how it goes on. Before the
// memory copy a migration is rolled back (the destination claim
// returned, anything the destination prepared removed) and ends in
// error; during the copy it waits for the source agent's report; after
// it, the interrupted step is repeated (every step is idempotent), so the
// migration completes. It returns how many flows it resumed.
//
// Run it once at start, before serving. Without an owner (Config.Owner
// empty) it resumes every flow in flight. With one, it first heartbeats,
// then resumes only the flows that are unowned, its own (a restart of
// this replica), or owned by a replica whose heartbeat is older than
// ServiceDownTime; it takes the others' over first, with a versioned
// update of the record, so of two replicas racing for the same flow
// exactly one resumes it. Flows of live replicas are left alone.
func (c *Conductor) Recover(ctx context.Context) (int, error) {
	if c.cfg.Owner != "" {
		if err := c.Heartbeat(ctx); err != nil {
			return 0, fmt.Errorf("recovering migrations: %w", err)
		}
	}
	return c.flows.Recover(ctx)
}

// Sweep takes over and resumes the flows in flight owned by replicas
// whose heartbeat is older than ServiceDownTime (a replica that died for
// good). RunOwnership calls it every ServiceDownTime/2; it does nothing
// without an owner. It returns how many flows it took over.
func (c *Conductor) Sweep(ctx context.Context) (int, error) {
	return c.flows.TakeOver(ctx)
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
	c.tasks.repeat(ctx, c.clock, c.sweepEvery(), func() {
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
	c.tasks.repeat(ctx, c.clock, every, func() {
		if err := c.Heartbeat(ctx); err != nil {
			c.log.Warn("heartbeat", "err", err)
		}
		c.moves.reconcile(ctx)
	})
	if c.cfg.ServiceDownTime > 0 {
		c.tasks.repeat(ctx, c.clock, c.cfg.ServiceDownTime/2, func() {
			if n, err := c.Sweep(ctx); err != nil {
				c.log.Warn("sweeping for dead replicas' migrations", "err", err)
			} else if n > 0 {
				c.log.Info("took over migrations of dead replicas", "count", n)
			}
		})
	}
}
