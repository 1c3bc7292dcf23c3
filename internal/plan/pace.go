package plan

import (
	"fmt"
	"time"

	"keel/internal/records"
)

// Pace is how a plan's moves left can go when it runs alone: how many at
// once at most, the limit that holds them there, and how long they are
// expected to take.
type Pace struct {
	// AtOnce is the most moves of the plan in flight at once.
	AtOnce int `json:"at_once"`
	// BoundBy names the limit that binds AtOnce as an operator sets it
	// ("max_concurrent_live_migrations = 1 per source host"), or says
	// that none does.
	BoundBy string `json:"bound_by"`
	// Expected is how long the moves left take at that pace, each copying
	// its RAM at the expected bandwidth; 0 when the bandwidth is unknown,
	// nothing is left, or the plan is an evacuation (a rebuild copies no
	// memory).
	Expected time.Duration `json:"expected_ns,omitempty"`
}

// PaceOf plays p's moves left through Select under caps, on a clock of
// its own with nothing else in flight, each move lasting its RAM (less
// what it copied) at bandwidthMiBps (0: unknown; the moves are then
// timed by their RAM alone, to find the pace, and Expected is 0). A
// destination chosen as the move starts is not counted against the
// per-destination cap. On a tie, BoundBy names --parallel, then the
// per-source, per-destination and cloud-wide caps.
func PaceOf(p records.Plan, caps Caps, bandwidthMiBps float64) Pace {
	bw := bandwidthMiBps
	if bw <= 0 {
		bw = 1
	}
	dur := func(mv records.PlanMove) time.Duration {
		left := max(float64(mv.RAMMB)-float64(mv.BytesCopied)/(1<<20), 0)
		return time.Duration(left / bw * float64(time.Second))
	}
	run := p
	run.State, run.CancelRequested = records.PlanRunning, false
	run.Moves = append([]records.PlanMove(nil), p.Moves...)
	ends := map[int]time.Duration{}
	sources, dests := map[string]bool{}, map[string]bool{}
	allDests := true
	left := 0
	for i, mv := range run.Moves {
		switch mv.State {
		case records.MoveStarting, records.MoveRunning:
			ends[i] = dur(mv)
		case records.MovePending:
		default:
			continue
		}
		left++
		sources[mv.Source] = true
		if mv.Dest != "" {
			dests[mv.Dest] = true
		}
		allDests = allDests && mv.Dest != ""
	}
	var now time.Duration
	pace := Pace{}
	for {
		u := Usage{}
		for i := range ends {
			u.Add(run.Moves[i].Source, run.Moves[i].Dest)
		}
		for _, pk := range Select([]records.Plan{run}, &u, caps) {
			run.Moves[pk.Move].State = records.MoveRunning
			ends[pk.Move] = now + dur(run.Moves[pk.Move])
		}
		pace.AtOnce = max(pace.AtOnce, len(ends))
		if len(ends) == 0 {
			break
		}
		next := time.Duration(-1)
		for _, e := range ends {
			if next < 0 || e < next {
				next = e
			}
		}
		now = next
		for i, e := range ends {
			if e == now {
				run.Moves[i].State = records.MoveDone
				delete(ends, i)
			}
		}
	}
	if bandwidthMiBps > 0 && p.Purpose != records.PlanEvacuateAll {
		pace.Expected = now
	}
	pace.BoundBy = boundBy(p, caps, pace.AtOnce, left, len(sources), len(dests), allDests)
	return pace
}

// boundBy names the limit that holds a plan's moves at atOnce in flight.
func boundBy(p records.Plan, caps Caps, atOnce, left, sources, dests int, allDests bool) string {
	switch {
	case left == 0:
		return "nothing left to move"
	case left == 1:
		return "a single move"
	case atOnce == left:
		return "no cap binds"
	case p.Options.Parallel > 0 && atOnce == p.Options.Parallel:
		return fmt.Sprintf("--parallel %d", p.Options.Parallel)
	case caps.PerSource > 0 && p.Purpose != records.PlanEvacuateAll && atOnce == caps.PerSource*sources:
		why := fmt.Sprintf("max_concurrent_live_migrations = %d per source host", caps.PerSource)
		if sources > 1 {
			why += fmt.Sprintf(", %d sources", sources)
		}
		return why
	case caps.PerDest > 0 && allDests && atOnce == caps.PerDest*dests:
		why := fmt.Sprintf("max_concurrent_incoming_live_migrations = %d per destination host", caps.PerDest)
		if dests > 1 {
			why += fmt.Sprintf(", %d destinations", dests)
		}
		return why
	case caps.Total > 0 && atOnce == caps.Total:
		return fmt.Sprintf("max_concurrent_live_migrations_total = %d", caps.Total)
	}
	return "the caps, as the sources and destinations of the moves left allow"
}
