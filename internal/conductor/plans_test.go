package conductor_test

import (
	"testing"
	"time"

	"keel/internal/conductor"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/store"
)

// runPlan ticks the executor and the clock until plan id ends, checking
// the caps after every tick, and returns the plan.
func (c *cloud) runPlan(id int64, caps plan.Caps) records.Plan {
	c.t.Helper()
	for i := 0; i < 600; i++ {
		if _, err := c.cond.Plans().TickPlans(ctx); err != nil {
			c.t.Fatal(err)
		}
		c.checkCaps(caps)
		p, err := c.st.GetPlan(ctx, id)
		if err != nil {
			c.t.Fatal(err)
		}
		if records.PlanTerminal(p.State) {
			return p
		}
		c.advance(time.Second)
	}
	c.t.Fatalf("plan %d did not end in 600 s", id)
	return records.Plan{}
}

// checkCaps fails the test if more live migrations are active than the
// caps allow.
func (c *cloud) checkCaps(caps plan.Caps) {
	c.t.Helper()
	ms, err := c.st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		c.t.Fatal(err)
	}
	src, dst := map[string]int{}, map[string]int{}
	for _, m := range ms {
		src[m.SourceHost]++
		dst[m.DestHost]++
		if caps.PerSource > 0 && src[m.SourceHost] > caps.PerSource {
			c.t.Fatalf("%d migrations out of %s at once, cap %d", src[m.SourceHost], m.SourceHost, caps.PerSource)
		}
		if caps.PerDest > 0 && dst[m.DestHost] > caps.PerDest {
			c.t.Fatalf("%d migrations into %s at once, cap %d", dst[m.DestHost], m.DestHost, caps.PerDest)
		}
	}
	if caps.Total > 0 && len(ms) > caps.Total {
		c.t.Fatalf("%d migrations at once, cap %d", len(ms), caps.Total)
	}
}

// movesOf counts each instance's completed migrations (a migration
// rolled back before its copy moved nothing).
func (c *cloud) movesOf() map[string]int {
	c.t.Helper()
	ms, err := c.st.ListMigrations(ctx, store.MigrationFilter{})
	if err != nil {
		c.t.Fatal(err)
	}
	n := map[string]int{}
	for _, m := range ms {
		if m.Status == records.MigrationCompleted {
			n[m.InstanceUUID]++
		}
	}
	return n
}

// TestPlanResumesAfterRestart: a new conductor on the same store (a
// server restart) finds a starting move's migration (adopted, not started
// again), puts a starting move without one back to pending, and finishes
// the plan with every instance moved once.
func TestPlanResumesAfterRestart(t *testing.T) {
	c := newCloud(t, hosts(5), maxConcurrent(4))
	for i := 0; i < 4; i++ {
		c.seed("h1", "vm", small)
	}
	p, err := c.cond.Plans().Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1"}, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cond.Plans().TickPlans(ctx); err != nil {
		t.Fatal(err)
	}
	p, _ = c.st.GetPlan(ctx, p.ID)
	if got := plan.Summarise(p, c.clk.Now()); got.Running != 2 {
		t.Fatalf("after one tick %d running, want 2", got.Running)
	}
	// The crash came after move 0's migration was created but before the
	// plan said so, and after move 2 was saved starting but before its
	// migration was created.
	p.Moves[0].State, p.Moves[0].Migration = records.MoveStarting, 0
	p.Moves[2].State, p.Moves[2].Attempts = records.MoveStarting, 1
	if _, err := c.st.UpdatePlan(ctx, p); err != nil {
		t.Fatal(err)
	}
	c.cond = c.replica("", c.st)
	c.Route(c.cond)
	if _, err := c.cond.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	p = c.runPlan(p.ID, plan.Caps{PerSource: 4})
	if p.State != records.PlanDone {
		t.Fatalf("plan ended %s (%s)", p.State, p.Reason)
	}
	for inst, n := range c.movesOf() {
		if n != 1 {
			ms, _ := c.st.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: inst})
			for _, m := range ms {
				t.Logf("%d %s %s→%s %s %+v %s", m.ID, m.Status, m.SourceHost, m.DestHost, m.Error, m.PlanMove, m.Phase)
			}
			t.Errorf("instance %s moved %d times", inst, n)
		}
	}
	if len(c.movesOf()) != 4 {
		t.Errorf("%d instances moved, want 4", len(c.movesOf()))
	}
	if p.Moves[2].Attempts != 1 || p.Moves[2].Migration == 0 {
		t.Errorf("lost move: %d attempts, migration %d; want 1 attempt (it never had a migration)", p.Moves[2].Attempts, p.Moves[2].Migration)
	}
	c.checkInvariants()
}
