package conductor_test

import (
	"log/slog"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/placement"
	"keel/internal/records"
)

// TestRecoverResumesInterruptedBoots: a server killed mid-boot leaves
// records in each phase; a new server's Recover ends every one: a boot
// whose claim committed before its host was recorded is scheduled again
// (the stale claim given back), one whose cast may not have reached the
// agent is cast again, and each ends ACTIVE with exactly its flavor.
func TestRecoverResumesInterruptedBoots(t *testing.T) {
	c := newCloud(t)
	now := c.clk.Now()
	mk := func(name string, phase records.BuildPhase, host string, claimOn string) records.Instance {
		in, err := c.st.CreateInstance(ctx, records.Instance{UUID: c.newID(), Name: name, Flavor: small, Host: host,
			VMState: records.VMBuilding, TaskState: records.TaskSpawning, BuildPhase: phase, CreatedAt: now, UpdatedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		if claimOn != "" {
			if _, err := c.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: in.UUID, Type: placement.ConsumerInstance,
				Allocations: only(claimOn, small)}); err != nil {
				t.Fatal(err)
			}
		}
		return in
	}
	never := mk("never-stepped", "", "", "")
	claimed := mk("claimed", "schedule", "", "h3")
	cast := mk("cast", "cast", "h2", "h2")
	// Cast, and already built: the repeated cast must not spawn again (nor
	// destroy the guest as a failed spawn): the agent reports it again.
	built := mk("built", "cast", "h1", "h1")
	c.drivers["h1"].AddGuest(compute.Guest{UUID: built.UUID, Name: built.Name, Flavor: small, State: compute.GuestRunning})
	c.trackers["h1"].Track(built.UUID, small)
	fresh := conductor.New(conductor.Config{}, c.st, c.newScheduler(9), c.agents, c.clk, slog.New(slog.DiscardHandler), conductor.Hooks{})
	c.Route(fresh)
	n, err := fresh.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("Recover resumed %d, want the 4 boots", n)
	}
	c.advance(spawnTime + time.Second)
	for _, in := range []records.Instance{never, claimed, cast, built} {
		got := c.instance(in.UUID)
		if got.VMState != records.VMActive || got.Host == "" {
			t.Fatalf("%s after recovery: %s on %q (%s)", in.Name, got.VMState, got.Host, got.Fault)
		}
		if a := c.allocations(in.UUID); !sameAllocations(a, only(got.Host, small)) {
			t.Fatalf("%s holds %v, want its flavor on %s only", in.Name, a, got.Host)
		}
	}
	if got := c.instance(cast.UUID); got.Host != "h2" {
		t.Fatalf("the cast boot moved to %s, want it built where it was cast", got.Host)
	}
	if got := c.instance(built.UUID); got.Host != "h1" || c.guest("h1", built.UUID) != compute.GuestRunning {
		t.Fatalf("the built boot is on %s with guest %q, want its running guest kept on h1", got.Host, c.guest("h1", built.UUID))
	}
	c.checkInvariants()
}
