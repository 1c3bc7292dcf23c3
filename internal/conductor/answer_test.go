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

// TestColdMovesAnswerBeforeAgentCalls: a cold migration, a resize and an
// evacuation started as the API starts them (StartColdMigration,
// StartResize, StartEvacuation) answer once the store decided — the
// migration recorded, its destination chosen and claimed — before the
// destination's first call (prep_resize, rebuild): the answer is in that
// call's phase. The rest runs at the clock's current instant: the cold
// moves wait for their confirmation on the destination, the evacuated
// server runs there. Before, the first agent calls ran in the request
// (the API's ColdMigrate, Resize, Evacuate).
func TestColdMovesAnswerBeforeAgentCalls(t *testing.T) {
	c := newCloud(t, hosts(3))
	cold := c.seed("h1", "cold", small)
	resized := c.seed("h1", "resized", small)
	evacuated := c.seed("h2", "evacuated", small)
	c.forceDown("h2", true)
	for _, tc := range []struct {
		what  string
		start func() (records.Migration, error)
		phase records.MigrationPhase
		uuid  string
	}{
		{"cold migration", func() (records.Migration, error) { return c.cond.StartColdMigration(ctx, cold.UUID, "h3") }, migration.PhasePrepResize, cold.UUID},
		{"resize", func() (records.Migration, error) {
			return c.cond.StartResize(ctx, resized.UUID, medium, func(in *records.Instance) { in.DiskConfig = "AUTO" })
		}, migration.PhasePrepResize, resized.UUID},
		{"evacuation", func() (records.Migration, error) { return c.cond.StartEvacuation(ctx, evacuated.UUID, "h3") }, migration.PhaseRebuild, evacuated.UUID},
	} {
		m, err := tc.start()
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if m.DestHost != "h3" || m.Phase != tc.phase {
			t.Fatalf("%s answered in phase %s to %q, want phase %s to h3: its destination claimed, not yet called", tc.what, m.Phase, m.DestHost, tc.phase)
		}
		if g := c.guest("h3", tc.uuid); g != "" {
			t.Fatalf("%s: the guest is %q on h3 when the request answered: the destination's call ran in the request", tc.what, g)
		}
	}
	c.advance(0)
	c.advance(time.Minute)
	for _, id := range []string{cold.UUID, resized.UUID} {
		if in := c.instance(id); in.VMState != records.VMResized || in.Host != "h3" {
			t.Fatalf("%s is %s on %s, want resized (waiting for its confirmation) on h3", in.Name, in.VMState, in.Host)
		}
	}
	if in := c.instance(resized.UUID); in.DiskConfig != "AUTO" || in.Flavor.ID != medium.ID {
		t.Fatalf("the resized server has disk config %q, flavor %s; want AUTO, %s", in.DiskConfig, in.Flavor.ID, medium.ID)
	}
	if in := c.instance(evacuated.UUID); in.VMState != records.VMActive || in.Host != "h3" || in.TaskState != records.TaskNone {
		t.Fatalf("the evacuated server is %s/%q on %s, want active on h3", in.VMState, in.TaskState, in.Host)
	}
}
