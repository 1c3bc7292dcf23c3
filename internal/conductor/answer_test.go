package conductor_test

import (
	"testing"
	"time"

	"keel/internal/boot"
	"keel/internal/migration"
	"keel/internal/records"
)

// TestRequestsAnswerBeforeAgentCalls: a boot and a live migration started
// as requests start them (StartBoot; StartLiveMigration, Nova's 2.34)
// answer once the store alone has
// decided what it can — the instance scheduled and claimed, the migration
// recorded with its destination claimed — and call no agent in the
// request: the boot's guest is not on its host yet and the migration's
// destination has not been checked. The rest runs at the clock's current
// instant (here, when the test runs it) and both finish. Before, the
// boot's cast and the destination's pre-check ran in the request, each up
// to rpc_timeout with an agent slow to answer.
func TestRequestsAnswerBeforeAgentCalls(t *testing.T) {
	c := newCloud(t, hosts(2))
	in, err := c.cond.StartBoot(ctx, records.Instance{Name: "b", Flavor: small, Zone: "nova"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if in.Host == "" || in.VMState != records.VMBuilding || in.BuildPhase != boot.PhaseCast {
		t.Fatalf("StartBoot answered %s on %q in phase %q, want BUILDING, scheduled, its cast not yet made", in.VMState, in.Host, in.BuildPhase)
	}
	if g := c.Guest(in.Host, in.UUID); g != "" {
		t.Fatalf("the boot's guest is %q on %s when StartBoot answered: its cast ran in the request", g, in.Host)
	}
	c.advance(0)
	if g := c.Guest(in.Host, in.UUID); g == "" {
		t.Fatal("the boot's cast did not run once the clock ran")
	}

	v := c.seed("h1", "v", small)
	m, err := c.cond.StartLiveMigration(ctx, v.UUID, "")
	if err != nil {
		t.Fatal(err)
	}
	if m.DestHost == "" || m.Phase != migration.PhaseCheck || m.Status != records.MigrationAccepted {
		t.Fatalf("StartLiveMigration answered %s in phase %s to %q, want accepted, its destination claimed and not yet checked", m.Status, m.Phase, m.DestHost)
	}
	c.advance(0)
	if got, _ := c.st.GetMigration(ctx, m.ID); got.Phase == migration.PhaseCheck {
		t.Fatalf("the migration is still in phase %s once the clock ran", got.Phase)
	}
	c.advance(time.Minute)
	if got, _ := c.st.GetMigration(ctx, m.ID); got.Status != records.MigrationCompleted {
		t.Fatalf("the migration ended %s (%s), want completed", got.Status, got.Error)
	}
	if got := c.instance(in.UUID); got.VMState != records.VMActive {
		t.Fatalf("the boot ended %s (%s), want ACTIVE", got.VMState, got.Fault)
	}
}
