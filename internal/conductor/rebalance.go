package conductor

import (
	"context"
	"fmt"
	"keel/internal/plan"
	"time"

	"keel/internal/rebalance"
	"keel/internal/records"
	"keel/internal/store"
)

// RebalanceRequest asks the rebalance planner for a plan (`keel rebalance
// plan`).
type RebalanceRequest struct {
	// Metric is ram (default), vcpu, disk or max of the claims, or
	// measured (the hosts' measured CPU, `keel rebalance plan --by
	// measured`).
	Metric string
	// Threshold: act above it, stop below half of it (0: 0.10).
	Threshold float64
	// MaxMoves caps the plan (0: no cap).
	MaxMoves int
	// Seed breaks ties between equally good moves.
	Seed uint64
	// Cooldown: an instance moved within it is not moved again (0: 1 h).
	Cooldown time.Duration
	// Parallel is the plan's moves in flight at once (0: the caps).
	Parallel int
}

// PlanRebalance runs the rebalance planner (package rebalance) on the
// live cloud — the scheduler's filters in force, draining hosts neither
// destinations nor counted, instances moved within the cooldown left
// alone — and stores its moves as a recommended plan (ApprovePlan runs
// it). With no move to make it stores nothing and returns the planner's
// answer alone (the returned plan's ID is 0). The older recommended
// rebalance plans are superseded: they were computed on an older view of
// the cloud, and left alone they would pile up.
func (ps *Plans) PlanRebalance(ctx context.Context, req RebalanceRequest) (records.Plan, rebalance.Plan, error) {
	p, rp, err := ps.planRebalance(ctx, req)
	if err == nil && p.ID != 0 {
		ps.supersedeOlder(context.WithoutCancel(ctx), p, "a newer recommendation")
	}
	return p, rp, err
}

// planRebalance is PlanRebalance without superseding the older
// recommendations (the periodic rebalance leaves an operator's alone).
func (ps *Plans) planRebalance(ctx context.Context, req RebalanceRequest) (records.Plan, rebalance.Plan, error) {
	ctx = context.WithoutCancel(ctx)
	if req.Metric == "" {
		req.Metric = "ram"
	}
	metric, err := rebalance.ParseMetric(req.Metric)
	if err != nil {
		return records.Plan{}, rebalance.Plan{}, &InvalidStateError{Msg: err.Error()}
	}
	cloud, err := rebalance.FromStore(ctx, ps.store)
	if err != nil {
		return records.Plan{}, rebalance.Plan{}, fmt.Errorf("reading the cloud for a rebalance: %w", err)
	}
	draining, err := drainingHosts(ctx, ps.store)
	if err != nil {
		return records.Plan{}, rebalance.Plan{}, err
	}
	cooldown := req.Cooldown
	if cooldown <= 0 {
		cooldown = time.Hour
	}
	movedAt, err := ps.lastMoves(ctx)
	if err != nil {
		return records.Plan{}, rebalance.Plan{}, err
	}
	planner, err := rebalance.New(rebalance.Options{Metric: metric, Threshold: req.Threshold, MaxMoves: req.MaxMoves,
		Scheduler: ps.sched.Config(), Now: ps.clock.Now(), Cooldown: cooldown, MovedAt: movedAt, Exclude: draining, Seed: req.Seed,
		MaxAge: ps.sched.Config().Metrics.MaxAge})
	if err != nil {
		return records.Plan{}, rebalance.Plan{}, &InvalidStateError{Msg: err.Error()}
	}
	rp, err := planner.Plan(cloud)
	if err != nil {
		return records.Plan{}, rp, fmt.Errorf("planning a rebalance: %w", err)
	}
	if len(rp.Moves) == 0 {
		return records.Plan{}, rp, nil
	}
	p := records.Plan{Purpose: records.PlanRebalance, Options: records.PlanOptions{Parallel: req.Parallel},
		Reason: fmt.Sprintf("%s CV %.4f → %.4f over %s in %s (%s)", rp.Metric, rp.Before, rp.After,
			plan.Count(rp.Hosts, "host", "hosts"), plan.Count(len(rp.Moves), "move", "moves"), rp.Stopped)}
	for _, m := range rp.Moves {
		p.Moves = append(p.Moves, records.PlanMove{Instance: m.Instance, Source: m.Source, Dest: m.Destination, RAMMB: m.RAMMB})
	}
	saved, err := ps.CreatePlan(ctx, p)
	return saved, rp, err
}

// lastMoves is when each instance last completed a move.
func (ps *Plans) lastMoves(ctx context.Context) (map[string]time.Time, error) {
	ms, err := ps.store.ListMigrations(ctx, store.MigrationFilter{})
	if err != nil {
		return nil, fmt.Errorf("reading past moves: %w", err)
	}
	out := map[string]time.Time{}
	for _, m := range ms {
		switch m.Status {
		case records.MigrationCompleted, records.MigrationConfirmed, records.MigrationDone:
			if m.UpdatedAt.After(out[m.InstanceUUID]) {
				out[m.InstanceUUID] = m.UpdatedAt
			}
		}
	}
	return out, nil
}

// rebalanceMetric is the periodic rebalance's metric: measured use when
// [keel] rebalance_by says so, else the RAM claimed.
func (ps *Plans) rebalanceMetric() string {
	if ps.cfg.RebalanceBy == "measured" {
		return string(rebalance.MetricMeasured)
	}
	return string(rebalance.MetricRAM)
}

// RunRebalance runs the periodic rebalance until ctx ends, when
// Config.RebalanceInterval turns it on (it is off by default):
// PeriodicRebalance every interval on the conductor's clock.
func (ps *Plans) RunRebalance(ctx context.Context) {
	if ps.cfg.RebalanceInterval <= 0 {
		return
	}
	ps.log.Info("periodic rebalance on", "interval", ps.cfg.RebalanceInterval, "threshold", ps.cfg.RebalanceThreshold,
		"max_moves", ps.cfg.RebalanceMaxMoves, "by", ps.rebalanceMetric())
	ps.tasks.repeat(ctx, ps.clock, ps.cfg.RebalanceInterval, func() {
		if _, err := ps.PeriodicRebalance(ctx); err != nil && ctx.Err() == nil {
			ps.log.Warn("periodic rebalance", "err", err)
		}
	})
}

// PeriodicRebalance is one run of the periodic rebalance: unless a plan
// has not ended (a drain, an evacuation, the last rebalance, or one an
// operator has yet to approve: nothing is planned on a cloud in motion,
// nor over an operator's pending plan), it runs the rebalance planner as
// PlanRebalance does (RAM claimed, or measured use when [keel]
// rebalance_by = measured; the configured threshold and move cap) and
// approves the plan it proposes, which the executor then runs under the
// same caps as any plan. Every replica runs it: of plans made at once the
// first recorded (the lowest ID) is the one approved, the others are
// superseded at once. It returns that plan (ID 0: nothing to do).
func (ps *Plans) PeriodicRebalance(ctx context.Context) (records.Plan, error) {
	ctx = context.WithoutCancel(ctx)
	plans, err := ps.store.ListPlans(ctx, true)
	if err != nil {
		return records.Plan{}, fmt.Errorf("listing plans: %w", err)
	}
	if len(plans) > 0 {
		ps.log.Debug("periodic rebalance skipped: a plan has not ended", "plan", plans[0].ID, "purpose", plans[0].Purpose, "state", plans[0].State)
		return records.Plan{}, nil
	}
	p, rp, err := ps.planRebalance(ctx, RebalanceRequest{Metric: ps.rebalanceMetric(), Threshold: ps.cfg.RebalanceThreshold,
		MaxMoves: ps.cfg.RebalanceMaxMoves, Seed: uint64(ps.clock.Now().Unix())})
	if err != nil {
		return records.Plan{}, err
	}
	if p.ID == 0 {
		ps.log.Debug("periodic rebalance: nothing to do", "metric", rp.Metric, "cv", rp.Before, "stopped", rp.Stopped)
		return p, nil
	}
	// Another replica may have planned at the same time: whichever plan
	// was recorded later sees the earlier one here, and yields.
	if plans, err = ps.store.ListPlans(ctx, true); err != nil {
		return records.Plan{}, fmt.Errorf("listing plans: %w", err)
	}
	for _, o := range plans {
		if o.ID < p.ID {
			if _, err := ps.stepPlan(ctx, p.ID, plan.Event{Kind: plan.Supersede, Reason: fmt.Sprintf("plan %d came first", o.ID)}); err != nil {
				return records.Plan{}, fmt.Errorf("yielding periodic rebalance plan %d to plan %d: %w", p.ID, o.ID, err)
			}
			ps.log.Info("periodic rebalance yields to a plan recorded first", "plan", p.ID, "first", o.ID)
			return records.Plan{}, nil
		}
	}
	if p, err = ps.ApprovePlan(ctx, p.ID); err != nil {
		return p, fmt.Errorf("approving periodic rebalance plan %d: %w", p.ID, err)
	}
	ps.log.Info("periodic rebalance planned", "plan", p.ID, "moves", len(p.Moves), "cv_before", rp.Before, "cv_after", rp.After)
	return p, nil
}
