package conductor_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/conductor"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/store"
)

func planCaps(perDest, total int) option {
	return func(o *cloudOptions) { o.perDest, o.total = perDest, total }
}

// runPlan ticks the executor and the clock until plan id ends, checking
// the caps after every tick, and returns the plan.
func (c *cloud) runPlan(id int64, caps plan.Caps) records.Plan {
	c.t.Helper()
	for i := 0; i < 600; i++ {
		if _, err := c.cond.TickPlans(ctx); err != nil {
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

func TestDrainEmptiesHostsUnderCaps(t *testing.T) {
	c := newCloud(t, hosts(6), maxConcurrent(1), planCaps(1, 3))
	var drained []records.Instance
	for _, h := range []string{"h1", "h2"} {
		for i := 0; i < 3; i++ {
			drained = append(drained, c.seed(h, h+"-vm", medium))
		}
	}
	c.seed("h3", "other", small)
	p, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1", "h2"}, Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	if p.State != records.PlanApproved || len(p.Moves) != 6 {
		t.Fatalf("drain plan %s with %d moves", p.State, len(p.Moves))
	}
	for _, h := range []string{"h1", "h2"} {
		svc, _ := c.st.GetService(ctx, h)
		if !svc.Disabled || !strings.Contains(svc.DisabledReason, "drain plan") {
			t.Errorf("%s service disabled=%v reason %q", h, svc.Disabled, svc.DisabledReason)
		}
	}
	p = c.runPlan(p.ID, plan.Caps{PerSource: 1, PerDest: 1, Total: 3})
	if p.State != records.PlanDone {
		t.Fatalf("plan ended %s (%s): %+v", p.State, p.Reason, p.Moves)
	}
	moves := c.movesOf()
	for _, in := range drained {
		got := c.instance(in.UUID)
		if got.Host == "h1" || got.Host == "h2" || got.VMState != records.VMActive {
			t.Errorf("instance %s on %s (%s) after the drain", in.UUID, got.Host, got.VMState)
		}
		if moves[in.UUID] != 1 {
			t.Errorf("instance %s moved %d times, want once", in.UUID, moves[in.UUID])
		}
	}
	s := plan.Summarise(p, c.clk.Now())
	if s.Done != 6 || s.BytesCopied != 6*medium.RAMMB<<20 || s.Left != 0 {
		t.Errorf("summary %+v", s)
	}
	c.checkInvariants()
}

func TestDrainDryRunAndCapacityRefusal(t *testing.T) {
	c := newCloud(t, hosts(3))
	for i := 0; i < 2; i++ {
		c.seed("h1", "a", medium)
		c.seed("h2", "b", medium)
		c.seed("h3", "c", medium)
	}
	dry, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1"}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, mv := range dry.Moves {
		if mv.Dest != "h2" && mv.Dest != "h3" {
			t.Errorf("dry run sends %s to %q", mv.Instance, mv.Dest)
		}
	}
	if ps, _ := c.st.ListPlans(ctx, false); len(ps) != 0 {
		t.Fatalf("a dry run stored %d plans", len(ps))
	}
	// 32 GiB hosts with 2×8 GiB each: draining two leaves one host with
	// 15.5 GiB free for 32 GiB.
	_, err = c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1", "h2"}})
	var cerr *conductor.CapacityError
	if !errors.As(err, &cerr) {
		t.Fatalf("drain of two of three full hosts = %v, want a CapacityError", err)
	}
	if !strings.Contains(err.Error(), "MEMORY_MB: need 32768, free 15872") || len(cerr.Unplaced) == 0 {
		t.Errorf("refusal %q", err)
	}
	if ps, _ := c.st.ListPlans(ctx, false); len(ps) != 0 {
		t.Fatalf("a refused drain stored %d plans", len(ps))
	}
	if ms := c.movesOf(); len(ms) != 0 {
		t.Fatalf("a refused drain moved %v", ms)
	}
	for _, h := range c.hosts {
		if svc, _ := c.st.GetService(ctx, h); svc.Disabled {
			t.Errorf("a refused drain disabled %s", h)
		}
	}
}

func TestTwoDrainsNeverTargetADrainingHost(t *testing.T) {
	c := newCloud(t, hosts(6), maxConcurrent(2))
	for _, h := range []string{"h1", "h2"} {
		for i := 0; i < 3; i++ {
			c.seed(h, h, small)
		}
	}
	a, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1"}, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h2"}, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h2"}}); err == nil {
		t.Fatal("a host already draining was accepted for a second drain")
	}
	c.runPlan(a.ID, plan.Caps{PerSource: 2})
	c.runPlan(b.ID, plan.Caps{PerSource: 2})
	ms, _ := c.st.ListMigrations(ctx, store.MigrationFilter{})
	for _, m := range ms {
		if m.DestHost == "h1" || m.DestHost == "h2" {
			t.Errorf("migration %d of %s went to draining host %s", m.ID, m.InstanceUUID, m.DestHost)
		}
	}
	if len(ms) != 6 {
		t.Errorf("%d migrations, want 6", len(ms))
	}
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
	p, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1"}, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cond.TickPlans(ctx); err != nil {
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

func TestCancelAbortsRunningMoves(t *testing.T) {
	c := newCloud(t, hosts(4), maxConcurrent(2))
	for i := 0; i < 3; i++ {
		c.seed("h1", "vm", medium)
	}
	p, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1"}, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	c.cond.TickPlans(ctx)
	c.advance(2 * time.Second)
	if p, err = c.cond.CancelPlan(ctx, p.ID, true); err != nil {
		t.Fatal(err)
	}
	p = c.runPlan(p.ID, plan.Caps{})
	if p.State != records.PlanCancelled {
		t.Fatalf("plan %s", p.State)
	}
	n := 0
	for _, mv := range p.Moves {
		if mv.State != records.MoveCancelled {
			t.Errorf("move %s is %s, want cancelled", mv.Instance, mv.State)
		}
		if c.instance(mv.Instance).Host == "h1" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d of 3 instances still on h1 after an abort", n)
	}
	if _, err := c.cond.CancelPlan(ctx, p.ID, false); err == nil {
		t.Error("an ended plan was cancelled again")
	}
	c.checkInvariants()
}

func TestRebalancePlanRechecksDestinations(t *testing.T) {
	c := newCloud(t, hosts(3), maxConcurrent(2))
	a := c.seed("h1", "a", small)
	b := c.seed("h1", "b", small)
	gone := c.seed("h1", "gone", small)
	p, err := c.cond.CreatePlan(ctx, records.Plan{Purpose: records.PlanRebalance, Moves: []records.PlanMove{
		{Instance: a.UUID, Source: "h1", Dest: "h2", RAMMB: small.RAMMB},
		{Instance: b.UUID, Source: "h1", Dest: "h3", RAMMB: small.RAMMB},
		{Instance: gone.UUID, Source: "h1", Dest: "h2", RAMMB: small.RAMMB},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := c.cond.TickPlans(ctx); n != 0 {
		t.Fatalf("a recommended plan started %d moves", n)
	}
	// h3 is disabled and "gone" is deleted before the plan is approved.
	if _, err := c.st.UpdateService(ctx, "h3", func(s *records.Service) error { s.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := c.cond.Delete(ctx, gone.UUID); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Minute)
	if _, err := c.cond.ApprovePlan(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	p = c.runPlan(p.ID, plan.Caps{PerSource: 2})
	got := []records.MoveState{p.Moves[0].State, p.Moves[1].State, p.Moves[2].State}
	if !slices.Equal(got, []records.MoveState{records.MoveDone, records.MoveSkipped, records.MoveSkipped}) {
		t.Fatalf("moves %v: %+v", got, p.Moves)
	}
	if !strings.Contains(p.Moves[1].Reason, "ComputeFilter") || !strings.Contains(p.Moves[2].Reason, "gone") {
		t.Errorf("reasons %q, %q", p.Moves[1].Reason, p.Moves[2].Reason)
	}
	if c.instance(a.UUID).Host != "h2" || c.instance(b.UUID).Host != "h1" {
		t.Errorf("a on %s, b on %s", c.instance(a.UUID).Host, c.instance(b.UUID).Host)
	}
	if p.State != records.PlanDone {
		t.Errorf("plan %s, want done (skips are not failures)", p.State)
	}
}

// TestRebalancePlanFromThePlanner: on a skewed cloud the planner's moves
// are stored as a recommended plan; applied, they even the hosts out; a
// second plan on the balanced cloud proposes nothing.
func TestRebalancePlanFromThePlanner(t *testing.T) {
	c := newCloud(t, hosts(4), maxConcurrent(2))
	for i := 0; i < 3; i++ {
		c.seed("h1", "packed", medium)
	}
	p, rp, err := c.cond.PlanRebalance(ctx, conductor.RebalanceRequest{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID == 0 || p.State != records.PlanRecommended || len(p.Moves) == 0 || rp.After >= rp.Before {
		t.Fatalf("plan %d %s with %d moves, CV %.3f → %.3f", p.ID, p.State, len(p.Moves), rp.Before, rp.After)
	}
	if _, err := c.cond.ApprovePlan(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	p = c.runPlan(p.ID, plan.Caps{PerSource: 2})
	if p.State != records.PlanDone {
		t.Fatalf("plan %s (%s)", p.State, p.Reason)
	}
	for _, mv := range p.Moves {
		if got := c.instance(mv.Instance).Host; got != mv.Dest {
			t.Errorf("instance %s on %s, planned %s", mv.Instance, got, mv.Dest)
		}
	}
	again, rp2, err := c.cond.PlanRebalance(ctx, conductor.RebalanceRequest{Seed: 1})
	if err != nil || again.ID != 0 || len(rp2.Moves) != 0 {
		t.Fatalf("on the balanced cloud: plan %d, %d moves (%s), %v", again.ID, len(rp2.Moves), rp2.Stopped, err)
	}
	c.checkInvariants()
}

// TestPlanTakenOverFromADeadReplica: replica a starts a drain and dies
// (no more heartbeats); replica b, once a's heartbeat is older than
// service_down_time, takes the plan over as it takes a's migrations, and
// finishes it: every instance moved once.
func TestPlanTakenOverFromADeadReplica(t *testing.T) {
	c := newCloud(t, hosts(4), maxConcurrent(1), owned("a", downTime))
	for i := 0; i < 3; i++ {
		c.seed("h1", "vm", small)
	}
	if err := c.cond.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := c.cond.Drain(ctx, conductor.DrainRequest{Hosts: []string{"h1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cond.TickPlans(ctx); err != nil {
		t.Fatal(err)
	}
	b := c.replica("b", c.st)
	// b while a is alive: a's plan is left alone.
	if err := b.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TickPlans(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.st.GetPlan(ctx, p.ID); got.Owner != "a" {
		t.Fatalf("a live replica's plan went to %q", got.Owner)
	}
	// a dies; b takes over after service_down_time.
	c.advance(downTime + time.Second)
	if err := b.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	c.cond = b
	c.Route(b)
	p = c.runPlan(p.ID, plan.Caps{PerSource: 1})
	if p.State != records.PlanDone || p.Owner != "b" {
		t.Fatalf("plan %s owned by %q (%s)", p.State, p.Owner, p.Reason)
	}
	moved := c.movesOf()
	for _, mv := range p.Moves {
		if moved[mv.Instance] != 1 || c.instance(mv.Instance).Host == "h1" {
			t.Errorf("instance %s moved %d times, now on %s", mv.Instance, moved[mv.Instance], c.instance(mv.Instance).Host)
		}
	}
	c.checkInvariants()
}
