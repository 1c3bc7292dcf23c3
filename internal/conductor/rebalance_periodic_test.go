package conductor_test

import (
	"context"
	"testing"
	"time"

	"keel/internal/conductor"
	"keel/internal/records"
)

func periodicRebalance(every time.Duration) option {
	return func(o *cloudOptions) { o.rebalanceEvery = every }
}

// plansOf lists the cloud's plans of a purpose.
func (c *cloud) plansOf(purpose string) []records.Plan {
	c.t.Helper()
	ps, err := c.st.ListPlans(ctx, false)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []records.Plan
	for _, p := range ps {
		if p.Purpose == purpose {
			out = append(out, p)
		}
	}
	return out
}

// TestPeriodicRebalance, on the virtual clock: with rebalance_interval
// set, nothing happens before the first interval ends; then a rebalance
// plan is planned and approved on its own, and the executor balances the
// packed host; a run while a drain runs plans nothing, the next one acts
// on the new skew (never touching the drained host); once no move helps,
// runs plan nothing.
func TestPeriodicRebalance(t *testing.T) {
	const every = 10 * time.Minute
	c := newCloud(t, hosts(5), maxConcurrent(2), periodicRebalance(every))
	for i := 0; i < 3; i++ {
		c.seed("h1", "packed", medium)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c.cond.RunRebalance(runCtx)
	c.advance(every - time.Second)
	if ps := c.plansOf(records.PlanRebalance); len(ps) != 0 {
		t.Fatalf("%d rebalance plans before the first interval ended", len(ps))
	}
	c.advance(time.Second)
	ps := c.plansOf(records.PlanRebalance)
	if len(ps) != 1 || ps[0].State != records.PlanApproved || len(ps[0].Moves) == 0 {
		t.Fatalf("after one interval: %+v, want one approved rebalance plan with moves", ps)
	}
	// The executor runs it (ticks every second of the virtual clock are
	// driven here; runPlan checks the caps after each).
	p := c.runPlan(ps[0].ID, c.cond.PlanCaps())
	if p.State != records.PlanDone {
		t.Fatalf("periodic rebalance plan %s (%s)", p.State, p.Reason)
	}
	perHost := map[string]int{}
	for _, mv := range p.Moves {
		perHost[c.instance(mv.Instance).Host]++
	}
	if len(perHost) != len(p.Moves) {
		t.Errorf("the packed instances ended %v, want each on its own host", perHost)
	}
	// Skewed again (three new ones on a host), but a drain (of an empty
	// host) has not run yet: the next run plans nothing; the first run
	// after the drain ended rebalances, without the drained host.
	var empty []string
	for _, h := range c.hosts {
		if perHost[h] == 0 && h != "h1" {
			empty = append(empty, h)
		}
	}
	if len(empty) < 2 {
		t.Fatalf("after the first rebalance: %v", perHost)
	}
	drained, packed := empty[0], empty[1]
	for i := 0; i < 3; i++ {
		c.seed(packed, "repacked", medium)
	}
	d, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{drained}})
	if err != nil {
		t.Fatal(err)
	}
	c.advance(every)
	if ps := c.plansOf(records.PlanRebalance); len(ps) != 1 {
		t.Fatalf("a periodic run during drain plan %d planned %d more rebalances", d.ID, len(ps)-1)
	}
	if d = c.runPlan(d.ID, c.cond.PlanCaps()); d.State != records.PlanDone {
		t.Fatalf("drain %s (%s)", d.State, d.Reason)
	}
	c.advance(every)
	ps = c.plansOf(records.PlanRebalance)
	if len(ps) != 2 || ps[1].State != records.PlanApproved {
		t.Fatalf("after the drain: %+v, want a second approved rebalance", ps)
	}
	for _, mv := range ps[1].Moves {
		if mv.Dest == drained || mv.Source != packed {
			t.Errorf("periodic rebalance move %+v: want it off %s, never onto the drained %s", mv, packed, drained)
		}
	}
	if p = c.runPlan(ps[1].ID, c.cond.PlanCaps()); p.State != records.PlanDone {
		t.Fatalf("second periodic rebalance %s (%s)", p.State, p.Reason)
	}
	// No move lowers the spread any more: later runs plan nothing.
	c.advance(3 * every)
	if ps := c.plansOf(records.PlanRebalance); len(ps) != 2 {
		t.Errorf("periodic runs after the rebalance planned %d more: %+v", len(ps)-2, ps[2:])
	}
	c.checkInvariants()
}

// TestPeriodicRebalanceOffByDefault: without rebalance_interval nothing
// plans a rebalance, however skewed the cloud and however long it runs.
func TestPeriodicRebalanceOffByDefault(t *testing.T) {
	c := newCloud(t, hosts(4), maxConcurrent(2))
	for i := 0; i < 3; i++ {
		c.seed("h1", "packed", medium)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c.cond.RunRebalance(runCtx)
	c.advance(24 * time.Hour)
	if ps := c.plansOf(records.PlanRebalance); len(ps) != 0 {
		t.Fatalf("%d rebalance plans with the periodic rebalance off", len(ps))
	}
}
