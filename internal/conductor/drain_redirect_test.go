package conductor_test

import (
	"testing"
	"time"

	"keel/internal/conductor"
	"keel/internal/records"
	"keel/internal/store"
)

// TestSecondDrainRedirectsAMoveInFlight: drain a's move is copying onto
// host D when drain b of D is created. The move's migration is aborted
// and the move tried again on another host, so no migration completes
// onto D, every instance of a's host completes exactly one migration, and
// both plans end done.
func TestSecondDrainRedirectsAMoveInFlight(t *testing.T) {
	c := newCloud(t, hosts(4), maxConcurrent(2))
	var drained []records.Instance
	for i := 0; i < 2; i++ {
		drained = append(drained, c.seed("h1", "vm", medium))
	}
	a, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1"}, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cond.TickPlans(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(copyTime / 2) // the first move is copying
	p, _ := c.st.GetPlan(ctx, a.ID)
	first := p.Moves[0]
	m := c.migration(first.Migration)
	if first.State != records.MoveRunning || m.Status != records.MigrationRunning || m.DestHost == "" {
		t.Fatalf("first move %s, its migration %s to %q: want it copying", first.State, m.Status, m.DestHost)
	}
	dest := m.DestHost
	b, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{dest}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 600; i++ {
		if _, err := c.cond.TickPlans(ctx); err != nil {
			t.Fatal(err)
		}
		pa, _ := c.st.GetPlan(ctx, a.ID)
		pb, _ := c.st.GetPlan(ctx, b.ID)
		if records.PlanTerminal(pa.State) && records.PlanTerminal(pb.State) {
			a, b = pa, pb
			break
		}
		c.advance(time.Second)
	}
	if a.State != records.PlanDone || b.State != records.PlanDone {
		t.Fatalf("drain a %s (%s), drain b %s (%s)", a.State, a.Reason, b.State, b.Reason)
	}
	if st := c.migration(first.Migration).Status; st != records.MigrationCancelled {
		t.Errorf("the migration onto %s ended %s, want cancelled (redirected)", dest, st)
	}
	ms, err := c.st.ListMigrations(ctx, store.MigrationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.DestHost == dest && m.Status == records.MigrationCompleted {
			t.Errorf("migration %d of %s completed onto %s, drained since before it ended", m.ID, m.InstanceUUID, dest)
		}
	}
	moves := c.movesOf()
	for _, in := range drained {
		if moves[in.UUID] != 1 {
			t.Errorf("instance %s moved %d times, want once", in.UUID, moves[in.UUID])
		}
		if h := c.instance(in.UUID).Host; h == "h1" || h == dest {
			t.Errorf("instance %s on %s after both drains", in.UUID, h)
		}
	}
	if mv := a.Moves[0]; mv.State != records.MoveDone || mv.Attempts != 1 || mv.Result == dest {
		t.Errorf("the redirected move: %+v, want done elsewhere, one attempt counted", mv)
	}
	c.checkInvariants()
}
