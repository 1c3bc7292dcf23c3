package sim

import (
	"context"
	"fmt"

	"keel/internal/plan"
	"keel/internal/rebalance"
	"keel/internal/records"
	"keel/internal/sim/scenario"
)

// RebalanceOptions ask a run for a rebalance: planned by the rebalance
// planner on the simulated cloud once every drain has ended (at t=0 when
// the scenario has none), and its moves run as live migrations to the
// planned destinations, InFlight at a time.
type RebalanceOptions struct {
	// Planner are the planner's options (Now, Scheduler and Exclude are
	// set by the run: the virtual clock, the scenario's scheduler, the
	// drained hosts).
	Planner rebalance.Options
	// InFlight is how many moves run at once (0 means 1).
	InFlight int
}

// RebalanceReport is what a run's rebalance did.
type RebalanceReport struct {
	// At is when it was planned, in seconds.
	At float64 `json:"at_s"`
	// Metric, CVBefore and CVPlanned are the planner's: its metric's CV
	// over the enabled hosts when planned, and after its moves.
	Metric    string  `json:"metric"`
	CVBefore  float64 `json:"cv_before"`
	CVPlanned float64 `json:"cv_planned"`
	Planned   int     `json:"planned"`
	// Moved and Failed count the moves that ran (a move whose instance is
	// no longer on its source, or busy, is Skipped).
	Moved   int    `json:"moved"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	Stopped string `json:"stopped"`
	// Moves are the planned moves, in order.
	Moves []rebalance.Move `json:"moves"`
}

// scheduleRebalance plans the rebalance when the drains are done.
func (w *world) scheduleRebalance(ctx context.Context, opts *RebalanceOptions) {
	if opts == nil {
		return
	}
	w.rebalance = &rebalanceRun{opts: *opts}
	if len(w.drains) == 0 {
		w.at(0, func() { w.planRebalance(ctx) })
		return
	}
	// Checked after each migration ends and once every drain has started.
	last := 0.0
	for _, d := range w.sc.Drains {
		last = max(last, d.Start)
	}
	w.at(last, func() { w.clock.AfterFunc(0, func() { w.rebalanceWhenDrained(ctx) }) })
}

type rebalanceRun struct {
	opts    RebalanceOptions
	planned bool
	run     *drainRun
	report  *RebalanceReport
	sources map[string]string // instance → planned source
}

// rebalanceWhenDrained plans the rebalance once no drain has anything
// queued or in flight.
func (w *world) rebalanceWhenDrained(ctx context.Context) {
	rb := w.rebalance
	if rb == nil || rb.planned {
		return
	}
	for _, d := range w.drains {
		if d == rb.run || !d.d.started {
			continue
		}
		if len(d.d.queue) > 0 || d.d.inFlight > 0 {
			return
		}
	}
	for _, d := range w.drains {
		if d != rb.run && !d.d.started {
			return
		}
	}
	w.planRebalance(ctx)
}

func (w *world) planRebalance(ctx context.Context) {
	rb := w.rebalance
	rb.planned = true
	now := w.clock.Now()
	rep := &RebalanceReport{At: now.Sub(clockEpoch).Seconds()}
	rb.report = rep
	cloud, err := rebalance.FromStore(ctx, w.store)
	if err != nil {
		rep.Stopped = "reading the cloud: " + err.Error()
		return
	}
	o := rb.opts.Planner
	o.Now = now
	o.Scheduler = schedulerConfig(w.sc.Scheduler)
	for _, d := range w.sc.Drains {
		o.Exclude = append(o.Exclude, d.Hosts...)
	}
	p, err := rebalance.New(o)
	if err != nil {
		rep.Stopped = err.Error()
		return
	}
	plan, err := p.Plan(cloud)
	if err != nil {
		rep.Stopped = err.Error()
		return
	}
	rep.Metric, rep.CVBefore, rep.CVPlanned, rep.Stopped = string(plan.Metric), plan.Before, plan.After, plan.Stopped
	rep.Planned, rep.Moves = len(plan.Moves), plan.Moves
	dr := &drainRun{d: &drain{spec: rebalanceDrainSpec(rb.opts.InFlight), started: true, targets: map[string]string{}}, owns: map[int64]bool{}}
	rb.run, rb.sources = dr, map[string]string{}
	for _, m := range plan.Moves {
		dr.d.queue = append(dr.d.queue, m.Instance)
		dr.d.targets[m.Instance] = m.Destination
		rb.sources[m.Instance] = m.Source
	}
	w.drains = append(w.drains, dr)
	w.drainNext(ctx, dr)
}

func rebalanceDrainSpec(inFlight int) scenario.Drain {
	return scenario.Drain{InFlight: max(inFlight, 1)}
}

// rebalanceMove reports whether a rebalance's move may start: its instance
// is still on the planned source (a drain's move always may).
func (w *world) rebalanceMove(dr *drainRun, inst records.Instance) bool {
	rb := w.rebalance
	if rb == nil || rb.run != dr {
		return true
	}
	if src := rb.sources[inst.UUID]; inst.Host != src {
		rb.report.Skipped++
		return false
	}
	return true
}

// rebalanceEnded counts a rebalance's move that ended.
func (w *world) rebalanceEnded(m records.Migration) {
	rb := w.rebalance
	if rb == nil || rb.run == nil || !rb.run.owns[m.ID] {
		return
	}
	if m.Status == records.MigrationCompleted {
		rb.report.Moved++
	} else {
		rb.report.Failed++
	}
}

// String is the report's line in the table.
func (r *RebalanceReport) String() string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf("rebalance at t=%.0fs: %s planned (%s cv %.3f → %.3f), %d done, %d failed, %d skipped; %s",
		r.At, plan.Count(r.Planned, "move", "moves"), r.Metric, r.CVBefore, r.CVPlanned, r.Moved, r.Failed, r.Skipped, r.Stopped)
}
