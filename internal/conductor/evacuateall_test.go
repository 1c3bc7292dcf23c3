package conductor_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"keel/internal/conductor"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/store"
)

// TestEvacuateAllPlanBeforeADrain: an evacuate-all plan of a host that is
// down rebuilds every instance of it elsewhere (never on a draining
// host), and under a cluster-wide cap it is served before a drain created
// at the same time: no move of the drain starts before the last
// evacuation did. The per-source cap does not hold evacuations back.
func TestEvacuateAllPlanBeforeADrain(t *testing.T) {
	c := newCloud(t, hosts(5), maxConcurrent(1), planCaps(0, 2))
	var evacuated, drained []records.Instance
	for i := 0; i < 4; i++ {
		evacuated = append(evacuated, c.seed("h1", "dead-vm", small))
	}
	for i := 0; i < 3; i++ {
		drained = append(drained, c.seed("h2", "drained-vm", small))
	}
	var bad *conductor.BadRequestError
	if _, err := c.cond.EvacuateAll(ctx, conductor.EvacuateAllRequest{Host: "h1"}); !errors.As(err, &bad) {
		t.Fatalf("evacuating a host that is up: %v, want Nova's refusal (still in use)", err)
	}
	d, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	c.forceDown("h1", true)
	e, err := c.cond.EvacuateAll(ctx, conductor.EvacuateAllRequest{Host: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Purpose != records.PlanEvacuateAll || e.State != records.PlanApproved || len(e.Moves) != 4 || !slices.Equal(e.Hosts, []string{"h1"}) {
		t.Fatalf("evacuate-all plan: %+v", e)
	}
	if _, err := c.cond.EvacuateAll(ctx, conductor.EvacuateAllRequest{Host: "h1"}); err == nil {
		t.Fatal("a second evacuation of h1 while the first runs was accepted")
	}
	maxEvac := 0
	for i := 0; ; i++ {
		if i == 600 {
			t.Fatal("the plans did not end in 600 s")
		}
		if _, err := c.cond.TickPlans(ctx); err != nil {
			t.Fatal(err)
		}
		ms, err := c.st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		busy, evac := 0, 0
		for _, m := range ms {
			if m.Status != records.MigrationDone { // a done evacuation waits for its source only
				busy++
				if m.Type == records.MigrationTypeEvac {
					evac++
				}
			}
		}
		maxEvac = max(maxEvac, evac)
		if busy > 2 {
			t.Fatalf("%d moves in flight, cap 2: %+v", busy, ms)
		}
		ep, _ := c.st.GetPlan(ctx, e.ID)
		dp, _ := c.st.GetPlan(ctx, d.ID)
		if records.PlanTerminal(ep.State) && records.PlanTerminal(dp.State) {
			e, d = ep, dp
			break
		}
		c.advance(time.Second)
	}
	if maxEvac != 2 {
		t.Errorf("at most %d evacuations at once, want 2 (the cluster cap; max_concurrent_live_migrations=1 is for live copies)", maxEvac)
	}
	if e.State != records.PlanDone || d.State != records.PlanDone {
		t.Fatalf("evacuation %s (%s), drain %s (%s)", e.State, e.Reason, d.State, d.Reason)
	}
	ms, err := c.st.ListMigrations(ctx, store.MigrationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var lastEvac, firstLive time.Time
	for _, m := range ms {
		switch m.Type {
		case records.MigrationTypeEvac:
			if m.PlanMove == nil || m.PlanMove.Plan != e.ID {
				t.Errorf("evacuation %d names plan %+v, want %d", m.ID, m.PlanMove, e.ID)
			}
			if m.CreatedAt.After(lastEvac) {
				lastEvac = m.CreatedAt
			}
		case records.MigrationTypeLive:
			if firstLive.IsZero() || m.CreatedAt.Before(firstLive) {
				firstLive = m.CreatedAt
			}
		}
	}
	if firstLive.Before(lastEvac) {
		t.Errorf("the drain's first move started at %s, before the last evacuation (%s)", firstLive, lastEvac)
	}
	for _, in := range evacuated {
		got := c.instance(in.UUID)
		if got.Host == "h1" || got.Host == "h2" || got.VMState != records.VMActive {
			t.Errorf("evacuated %s on %s (%s): want it active off h1 and off draining h2", in.UUID, got.Host, got.VMState)
		}
	}
	for _, in := range drained {
		if got := c.instance(in.UUID); got.Host == "h2" || got.Host == "h1" {
			t.Errorf("drained %s still on %s", in.UUID, got.Host)
		}
	}
	if s := plan.Summarise(e, c.clk.Now()); s.Done != 4 || s.Failed != 0 {
		t.Errorf("evacuation summary %+v", s)
	}
	c.forceDown("h1", false)
	c.advance(3 * time.Second)
	c.checkInvariants()
}
