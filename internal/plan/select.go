package plan

import (
	"cmp"
	"slices"

	"keel/internal/records"
)

// Caps limit the moves in flight; 0 means no limit.
type Caps struct {
	// PerSource is max_concurrent_live_migrations (out of one host).
	PerSource int
	// PerDest is [keel] max_concurrent_incoming_live_migrations.
	PerDest int
	// Total is [keel] max_concurrent_live_migrations_total (the cloud).
	Total int
}

// Usage is what is in flight now: every active migration of the cloud,
// by source and by destination, and in all.
type Usage struct {
	BySource map[string]int
	ByDest   map[string]int
	Total    int
}

// Add counts one more move in flight from src to dst (dst may be "").
func (u *Usage) Add(src, dst string) {
	if u.BySource == nil {
		u.BySource = map[string]int{}
	}
	if u.ByDest == nil {
		u.ByDest = map[string]int{}
	}
	u.BySource[src]++
	if dst != "" {
		u.ByDest[dst]++
	}
	u.Total++
}

// DestFull reports whether dst takes no more incoming moves under caps.
func (u Usage) DestFull(dst string, c Caps) bool {
	return c.PerDest > 0 && u.ByDest[dst] >= c.PerDest
}

// Pick is a move Select chose to start.
type Pick struct {
	Plan int64
	Move int
}

// Priority orders purposes: lower goes first (evacuation, drain, then
// rebalance and return).
func Priority(purpose string) int {
	switch purpose {
	case records.PlanEvacuateAll:
		return 0
	case records.PlanDrain:
		return 1
	}
	return 2
}

// Select chooses the pending moves that may start now: running plans in
// priority order (then oldest first), each plan's moves in its order, as
// long as the plan's own parallelism, the source's and (for a planned
// destination) the destination's caps and the cloud's cap leave room.
// A move whose source or destination is full is passed over for the
// plan's next one, so one busy host does not hold the others back. It
// counts its picks in u.
func Select(plans []records.Plan, u *Usage, c Caps) []Pick {
	order := slices.Clone(plans)
	slices.SortStableFunc(order, func(a, b records.Plan) int {
		return cmp.Or(cmp.Compare(Priority(a.Purpose), Priority(b.Purpose)), cmp.Compare(a.ID, b.ID))
	})
	var picks []Pick
	for _, p := range order {
		if p.State != records.PlanRunning || p.CancelRequested {
			continue
		}
		inFlight := 0
		for _, mv := range p.Moves {
			if mv.State == records.MoveStarting || mv.State == records.MoveRunning {
				inFlight++
			}
		}
		for i, mv := range p.Moves {
			if c.Total > 0 && u.Total >= c.Total {
				return picks
			}
			if p.Options.Parallel > 0 && inFlight >= p.Options.Parallel {
				break
			}
			if mv.State != records.MovePending {
				continue
			}
			// An evacuation copies nothing off its source (it is down):
			// the per-source cap of live migrations does not hold it back.
			if c.PerSource > 0 && p.Purpose != records.PlanEvacuateAll && u.BySource[mv.Source] >= c.PerSource {
				continue
			}
			if mv.Dest != "" && u.DestFull(mv.Dest, c) {
				continue
			}
			u.Add(mv.Source, mv.Dest)
			inFlight++
			picks = append(picks, Pick{Plan: p.ID, Move: i})
		}
	}
	return picks
}

// Order sorts a drain's moves: "largest" (most RAM first; the default),
// "smallest", or "given" (as listed). Ties keep the given order.
func Order(moves []records.PlanMove, order string) error {
	switch order {
	case "", "largest":
		slices.SortStableFunc(moves, func(a, b records.PlanMove) int { return cmp.Compare(b.RAMMB, a.RAMMB) })
	case "smallest":
		slices.SortStableFunc(moves, func(a, b records.PlanMove) int { return cmp.Compare(a.RAMMB, b.RAMMB) })
	case "given":
	default:
		return &OrderError{Order: order}
	}
	return nil
}

// OrderError is an order Order does not know.
type OrderError struct{ Order string }

func (e *OrderError) Error() string {
	return "unknown move order " + e.Order + " (want largest, smallest or given)"
}
