package conductor_test

import (
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
)

// TestLateBuildReport: a build report for an instance the conductor gave up
// on meanwhile (its build call timed out, the boot failed and the claim was
// released) removes the guest instead of marking the instance ACTIVE; a
// report repeated for an ACTIVE instance changes nothing.
func TestLateBuildReport(t *testing.T) {
	c := newCloud(t)
	in, err := c.cond.Boot(ctx, records.Instance{UUID: "inst-late", Name: "vm", Flavor: medium, Zone: "nova"})
	if err != nil || in.VMState != records.VMBuilding {
		t.Fatalf("Boot: %v, %s", err, in.VMState)
	}
	// What a timed-out build call does: the instance fails, its claim goes.
	in.VMState, in.Fault = records.VMError, "build_and_run_instance on h1: no agent answered within 30s"
	if _, err := c.st.UpdateInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	if _, err := c.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: in.UUID, AnyConsumerGeneration: true}); err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime) // the spawn ends and reports
	got := c.instance(in.UUID)
	if got.VMState != records.VMError {
		t.Fatalf("after the late report the instance is %s, want it left in error", got.VMState)
	}
	if g := c.guest(in.Host, in.UUID); g != "" {
		t.Fatalf("the abandoned build's guest is still on %s (%s)", in.Host, g)
	}

	ok, err := c.cond.Boot(ctx, records.Instance{UUID: "inst-ok", Name: "vm2", Flavor: medium, Zone: "nova"})
	if err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime)
	active := c.instance(ok.UUID)
	if active.VMState != records.VMActive {
		t.Fatalf("second boot: %s", active.VMState)
	}
	c.cond.BuildDone(ctx, ok.UUID, active.Host, nil) // a repeat
	if again := c.instance(ok.UUID); again.Version != active.Version || c.guest(active.Host, ok.UUID) == "" {
		t.Fatalf("a repeated report changed the instance (version %d → %d) or removed its guest", active.Version, again.Version)
	}
}
