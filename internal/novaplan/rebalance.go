package novaplan

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"keel/internal/client"
	"keel/internal/plan"
	"keel/internal/rebalance"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// RebalanceCloud is the rebalance planner's view of a Nova cloud read at
// now: each host's Placement inventories and usage (everything on it,
// moves in flight included), its compute service, zone, traits and
// aggregates; every server on a host, pinned (counted, never moved)
// unless it is ACTIVE with no task; the server groups.
func RebalanceCloud(nc *client.NovaCloud, now time.Time) rebalance.Cloud {
	aggs := map[string][]map[string]string{}
	for _, a := range nc.Aggregates {
		for _, h := range a.Hosts {
			aggs[h] = append(aggs[h], a.Metadata)
		}
	}
	var c rebalance.Cloud
	for _, h := range nc.Hosts {
		rh := rebalance.Host{Name: h.Name, ProviderUUID: h.ProviderUUID, Inventories: h.Inventories, Used: h.Used,
			Disabled: h.Disabled, ForcedDown: h.ForcedDown, Zone: h.Zone, Traits: h.Traits, Aggregates: aggs[h.Name],
			LastSeenUp: now}
		if !h.Up {
			rh.LastSeenUp = time.Unix(0, 1) // down: ComputeFilter refuses it
		}
		c.Hosts = append(c.Hosts, rh)
	}
	group := map[string]string{}
	for _, g := range nc.Groups {
		c.Groups = append(c.Groups, rebalance.Group{UUID: g.UUID, Policy: g.Policy, MaxServerPerHost: g.MaxServerPerHost})
		for _, m := range g.Members {
			group[m] = g.UUID
		}
	}
	for _, s := range nc.Servers {
		if s.Host == "" {
			continue
		}
		c.Instances = append(c.Instances, rebalance.Instance{UUID: s.UUID, Host: s.Host, Flavor: s.Flavor, Group: group[s.UUID],
			Pinned: s.Status != "ACTIVE" || s.TaskState != ""})
	}
	slices.SortFunc(c.Instances, func(a, b rebalance.Instance) int { return strings.Compare(a.UUID, b.UUID) })
	return c
}

// RebalanceOptions are a rebalance's policy on a Nova cloud.
type RebalanceOptions struct {
	Metric    string
	Threshold float64
	MaxMoves  int
	Seed      uint64
	Parallel  int
	// Sched are the filters in force (the cloud's nova.conf, or Nova's
	// defaults).
	Sched scheduler.Config
}

// PlanRebalance runs keel's rebalance planner on the Nova cloud nc (hosts
// being drained by an active plan of st neither counted nor a
// destination) and stores its moves as a recommended plan: nothing moves
// until it is approved (Approve). With no move to make, the plan is the
// zero Plan and nothing is stored.
func PlanRebalance(ctx context.Context, st Store, nc *client.NovaCloud, o RebalanceOptions) (records.Plan, rebalance.Plan, error) {
	metric, err := rebalance.ParseMetric(cmpOr(o.Metric, "ram"))
	if err != nil {
		return records.Plan{}, rebalance.Plan{}, err
	}
	active, err := st.ListPlans(ctx, true)
	if err != nil {
		return records.Plan{}, rebalance.Plan{}, fmt.Errorf("listing plans: %w", err)
	}
	var draining []string
	for _, p := range active {
		if p.Purpose == records.PlanDrain && p.State != records.PlanRecommended {
			draining = append(draining, p.Hosts...)
		}
	}
	now := time.Now()
	planner, err := rebalance.New(rebalance.Options{Metric: metric, Threshold: o.Threshold, MaxMoves: o.MaxMoves,
		Scheduler: o.Sched, Now: now, Exclude: draining, Seed: o.Seed})
	if err != nil {
		return records.Plan{}, rebalance.Plan{}, err
	}
	rp, err := planner.Plan(RebalanceCloud(nc, now))
	if err != nil {
		return records.Plan{}, rp, fmt.Errorf("planning a rebalance: %w", err)
	}
	if len(rp.Moves) == 0 {
		return records.Plan{}, rp, nil
	}
	p := records.Plan{Purpose: records.PlanRebalance, State: records.PlanRecommended, Options: records.PlanOptions{Parallel: o.Parallel},
		CreatedAt: now.UTC(),
		Reason: fmt.Sprintf("%s CV %.4f → %.4f over %s in %s (%s)", rp.Metric, rp.Before, rp.After,
			plan.Count(rp.Hosts, "host", "hosts"), plan.Count(len(rp.Moves), "move", "moves"), rp.Stopped)}
	for _, m := range rp.Moves {
		p.Moves = append(p.Moves, records.PlanMove{Instance: m.Instance, Source: m.Source, Dest: m.Destination, RAMMB: m.RAMMB, State: records.MovePending})
	}
	p, err = st.CreatePlan(ctx, p)
	if err != nil {
		return records.Plan{}, rp, fmt.Errorf("storing the plan: %w", err)
	}
	return p, rp, nil
}

// Approve approves recommended plan id (the executor then runs it) and
// supersedes the older recommended rebalance plans, which were made on a
// cloud this one's moves change.
func Approve(ctx context.Context, st Store, id int64) (records.Plan, error) {
	p, err := st.GetPlan(ctx, id)
	if err != nil {
		return records.Plan{}, fmt.Errorf("plan %d: %w", id, err)
	}
	now := time.Now().UTC()
	next, _, err := machine.Step(p, plan.Event{Kind: plan.Approve, Now: now})
	if err != nil {
		return p, fmt.Errorf("plan %d is %s: only a recommended plan is applied", id, p.State)
	}
	next.UpdatedAt = now
	if next, err = st.UpdatePlan(ctx, next); err != nil {
		return p, fmt.Errorf("plan %d: saving its approval: %w", id, err)
	}
	others, err := st.ListPlans(ctx, true)
	if err != nil {
		return next, fmt.Errorf("listing plans: %w", err)
	}
	for _, o := range others {
		if o.ID == id || o.Purpose != records.PlanRebalance || o.State != records.PlanRecommended {
			continue
		}
		s, _, err := machine.Step(o, plan.Event{Kind: plan.Supersede, Now: now, Reason: fmt.Sprintf("superseded by plan %d", id)})
		if err == nil {
			s.UpdatedAt = now
			_, err = st.UpdatePlan(ctx, s)
		}
		if err != nil {
			return next, fmt.Errorf("superseding plan %d: %w", o.ID, err)
		}
	}
	return next, nil
}

func cmpOr(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
