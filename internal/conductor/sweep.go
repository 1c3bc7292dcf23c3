package conductor

import (
	"context"
	"time"

	"keel/internal/records"
)

// SweepStalled feeds the flows this replica drives whose deadline passed
// (RunOwnership calls it every sweepEvery); each machine decides what its
// deadlines mean (see the Deadline methods of packages boot, migration
// and lifecycle):
//
//   - a boot building longer than BuildTimeout times out (its guest is
//     removed, its claim given back, the instance in ERROR);
//   - a copy with no report for CopyStallTimeout is aborted and rolled
//     back; a resize left in VERIFY_RESIZE past ResizeConfirmWindow is
//     confirmed; an evacuation whose source is back cleans it up;
//   - a lifecycle action whose agent has not answered for its timeout
//     ends, a shelved server past shelved_offload_time is offloaded;
//   - a flow left in a step with nothing in flight for StallAfter (an
//     action could not be done: the store was full, an agent was cut off)
//     is resumed: its step is repeated, or before the copy the migration
//     is rolled back.
//
// A flow whose record changed since it was read, or whose step is in
// flight in this process, is left alone. It returns how many flows it fed
// an event.
func (c *Conductor) SweepStalled(ctx context.Context) (int, error) {
	return c.flows.Sweep(ctx)
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

// isWaiting reports whether m waits in this replica's queue for a slot,
// or was just handed one (its step about to run).
func (c *Conductor) isWaiting(m records.Migration) bool {
	c.slots.mu.Lock()
	defer c.slots.mu.Unlock()
	return c.slots.tab.isWaiting(m.ID) || c.slots.tab.holds(m.ID)
}

// HeldSlots returns, by source host, the migrations holding one of its
// max_concurrent_live_migrations slots on this replica (a copy), after
// freeing those of migrations that ended on another replica (reconcile,
// which the heartbeat also runs): what it returns is held for real.
func (c *Conductor) HeldSlots(ctx context.Context) map[string][]int64 {
	c.moves.reconcile(ctx)
	c.slots.mu.Lock()
	defer c.slots.mu.Unlock()
	return c.slots.tab.heldBySource()
}
