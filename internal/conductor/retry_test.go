package conductor_test

import (
	"errors"
	"testing"
	"time"

	"keel/internal/conductor"
	"keel/internal/records"
)

// TestUnansweredCastIsRepeatedSoon: a boot whose cast reached no agent
// (the agent reconnecting after a restart of the server, as in e2e's
// TestServerFaultKilledDuringBoots under load) is cast again by the sweep
// within seconds of the agent coming back — not at the boot's stall
// deadline, StallAfter (here a minute) after its last step — and ends
// ACTIVE on its host well before that deadline.
func TestUnansweredCastIsRepeatedSoon(t *testing.T) {
	c := newCloud(t, hosts(1))
	c.Cut("h1", true)
	// The cast is handed over at once on the virtual clock: the boot's
	// caller sees it reach nobody.
	in, err := c.cond.Boot(ctx, records.Instance{Name: "vm", Flavor: small})
	if !errors.Is(err, conductor.ErrAgentUnreachable) || in.UUID == "" {
		t.Fatalf("boot with h1's agent cut off: %+v, %v; want the instance and an unreachable agent", in, err)
	}
	c.Settle()
	if got := c.instance(in.UUID); got.VMState != records.VMBuilding || got.Host != "h1" {
		t.Fatalf("after the unanswered cast: %s on %q (%s), want building on h1", got.VMState, got.Host, got.Fault)
	}
	c.Cut("h1", false)
	// Sweeps every 5 s, as RunOwnership's would at a 20 s StallAfter
	// (here StallAfter is the conductor's default, a minute).
	var active time.Duration
	for waited := time.Duration(0); waited < 45*time.Second && active == 0; waited += 5 * time.Second {
		c.advance(5 * time.Second)
		if _, err := c.cond.SweepStalled(ctx); err != nil {
			t.Fatal(err)
		}
		c.Settle()
		if got := c.instance(in.UUID); got.VMState == records.VMActive {
			active = waited + 5*time.Second
		}
	}
	got := c.instance(in.UUID)
	if active == 0 {
		t.Fatalf("45 s after the agent came back the boot is still %s (phase %q): its cast was not repeated before the stall deadline", got.VMState, got.BuildPhase)
	}
	if got.Host != "h1" || !sameAllocations(c.allocations(in.UUID), only("h1", small)) {
		t.Fatalf("ACTIVE on %q holding %v, want h1 holding small", got.Host, c.allocations(in.UUID))
	}
	t.Logf("ACTIVE %s after the agent came back (spawn %s)", active, spawnTime)
}
