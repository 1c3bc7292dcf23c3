package conductor_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/placement"
	"keel/internal/records"
)

// lostReports takes every report and drops it: a source cut off from the
// servers, or a report held only in the memory of an agent that died.
type lostReports struct{}

func (lostReports) BuildDone(context.Context, string, string, error) error   { return nil }
func (lostReports) CopyProgress(context.Context, int64, int64, int64, int64) {}
func (lostReports) CopyDone(context.Context, int64, error) error             { return nil }
func sweeps(buildTimeout, copyStall, stallAfter time.Duration) option {
	return func(o *cloudOptions) { o.buildTimeout, o.copyStall, o.stallAfter = buildTimeout, copyStall, stallAfter }
}
func (c *cloud) runSweeps(t *testing.T) {
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	c.cond.RunOwnership(ctx)
}

var _ compute.Reporter = lostReports{}

// TestHangUpChangesNothing: a boot and a live migration asked on a context
// the client already cancelled (it hung up right after sending) run to
// their end as if it had waited.
func TestHangUpChangesNothing(t *testing.T) {
	c := newCloud(t)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	in, err := c.cond.Boot(gone, records.Instance{Name: "b", Flavor: small})
	if err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime + time.Second)
	if got := c.instance(in.UUID); got.VMState != records.VMActive || got.Host == "" {
		t.Fatalf("boot after a hang-up: %s on %q (%s)", got.VMState, got.Host, got.Fault)
	}
	a := c.seed("h1", "a", medium)
	m, err := c.cond.LiveMigrate(gone, a.UUID, "")
	if err != nil {
		t.Fatal(err)
	}
	c.advance(copyTime + 2*time.Second)
	if got := c.migration(m.ID); got.Status != records.MigrationCompleted {
		t.Fatalf("migration after a hang-up: %s (%s)", got.Status, got.Error)
	}
	c.checkInvariants()
}

// TestABootStalledByAFullDiskIsResumed: the store refuses writes while a
// boot is asked for (a full disk); once it has room again the sweep
// resumes the boot from its record, and it ends ACTIVE holding exactly its
// flavor.
func TestABootStalledByAFullDiskIsResumed(t *testing.T) {
	c := newCloud(t, sweeps(0, 0, 2*time.Second))
	c.runSweeps(t)
	c.storeDown.Store(true)
	in, err := c.cond.Boot(ctx, records.Instance{Name: "b", Flavor: small})
	if err == nil || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("boot on a full disk: %v, want the store's error", err)
	}
	if got := c.instance(in.UUID); got.VMState != records.VMBuilding {
		t.Fatalf("instance %s, want BUILDING until the disk has room", got.VMState)
	}
	c.advance(5 * time.Second)
	c.storeDown.Store(false)
	c.advance(3 * time.Second) // the sweep resumes it
	c.advance(spawnTime + time.Second)
	got := c.instance(in.UUID)
	if got.VMState != records.VMActive || got.BuildPhase != "" {
		t.Fatalf("after the disk has room: %s phase %q (%s)", got.VMState, got.BuildPhase, got.Fault)
	}
	if a := c.allocations(in.UUID); !sameAllocations(a, only(got.Host, small)) {
		t.Fatalf("allocations %v, want only its flavor on %s", a, got.Host)
	}
	c.checkInvariants()
}

// TestALostBuildReportEndsAtTheBuildTimeout: the agent's report of a
// finished spawn never arrives; instance_build_timeout ends the boot in
// ERROR, its guest removed and its claim given back.
func TestALostBuildReportEndsAtTheBuildTimeout(t *testing.T) {
	c := newCloud(t, sweeps(30*time.Second, 0, 2*time.Second))
	c.runSweeps(t)
	c.Route(lostReports{})
	in, err := c.cond.Boot(ctx, records.Instance{Name: "b", Flavor: small})
	if err != nil {
		t.Fatal(err)
	}
	host := c.instance(in.UUID).Host
	c.advance(20 * time.Second)
	if got := c.instance(in.UUID); got.VMState != records.VMBuilding || c.guest(host, in.UUID) != compute.GuestRunning {
		t.Fatalf("before the timeout: %s, guest %q", got.VMState, c.guest(host, in.UUID))
	}
	c.advance(15 * time.Second)
	got := c.instance(in.UUID)
	if got.VMState != records.VMError || !strings.Contains(got.Fault, "instance_build_timeout") || got.Host != "" {
		t.Fatalf("after the timeout: %s on %q (%s), want ERROR off its host with the timeout as fault", got.VMState, got.Host, got.Fault)
	}
	if a := c.allocations(in.UUID); a != nil {
		t.Fatalf("a timed-out boot still holds %v", a)
	}
	if g := c.guest(host, in.UUID); g != "" {
		t.Fatalf("the timed-out boot's guest is still on %s (%s)", host, g)
	}
	c.Route(c.cond)
	c.checkInvariants()
}

// TestACopyWithoutReportsIsAbortedAndRolledBack: the source stops
// reporting during the copy (cut off, or crashed after an abort);
// migration_stall_timeout aborts the copy and rolls the migration back:
// the instance runs on the source, holding its flavor there only, and the
// source's slot is free for the next migration.
func TestACopyWithoutReportsIsAbortedAndRolledBack(t *testing.T) {
	c := newCloud(t, maxConcurrent(1), sweeps(0, 3*time.Second, 2*time.Second))
	c.runSweeps(t)
	a := c.seed("h1", "a", medium)
	c.Route(lostReports{})
	m := c.migrate(a, "h2")
	c.advance(time.Second)
	if got := c.migration(m.ID); got.Status != records.MigrationRunning {
		t.Fatalf("migration %s, want running", got.Status)
	}
	c.advance(5 * time.Second)
	got := c.migration(m.ID)
	if got.Status != records.MigrationError || !strings.Contains(got.Error, "no progress report from the source h1") {
		t.Fatalf("stalled migration: %s (%q)", got.Status, got.Error)
	}
	if in := c.instance(a.UUID); in.Host != "h1" || in.TaskState != records.TaskNone {
		t.Fatalf("instance on %q task %q, want back on h1", in.Host, in.TaskState)
	}
	if alloc := c.allocations(a.UUID); !sameAllocations(alloc, only("h1", medium)) {
		t.Fatalf("instance holds %v, want medium on h1 only", alloc)
	}
	if g := c.guest("h1", a.UUID); g != compute.GuestRunning {
		t.Fatalf("source guest %q, want running", g)
	}
	if g := c.guest("h2", a.UUID); g != "" {
		t.Fatalf("destination keeps a %q guest", g)
	}
	c.Route(c.cond)
	next := c.migrate(a, "h3")
	c.advance(copyTime + 2*time.Second)
	if st := c.migration(next.ID).Status; st != records.MigrationCompleted {
		t.Fatalf("the next migration from h1 ended %s: its slot was not freed", st)
	}
	c.checkInvariants()
}

// TestResetMigration: an operator resets a migration stuck in its copy
// (no report will come); it ends in error with the instance back on its
// source holding its flavor there only, and a second reset is refused.
func TestResetMigration(t *testing.T) {
	c := newCloud(t, maxConcurrent(1))
	a := c.seed("h1", "a", medium)
	c.Route(lostReports{})
	m := c.migrate(a, "h2")
	c.advance(3 * time.Second) // the copy runs; no report will come
	if got := c.migration(m.ID); got.Status != records.MigrationRunning {
		t.Fatalf("migration %s, want stuck running", got.Status)
	}
	got, err := c.cond.ResetMigration(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	got = c.migration(m.ID)
	if got.Status != records.MigrationError || !strings.Contains(got.Error, "reset by an operator") {
		t.Fatalf("after reset: %s (%q)", got.Status, got.Error)
	}
	if alloc := c.allocations(a.UUID); !sameAllocations(alloc, only("h1", medium)) {
		t.Fatalf("instance holds %v, want medium on h1 only", alloc)
	}
	if c.allocations(m.UUID) != nil {
		t.Fatal("the migration consumer still holds allocations")
	}
	if _, err := c.cond.ResetMigration(ctx, m.ID); err == nil {
		t.Fatal("a second reset of an ended migration was accepted")
	}
	c.Route(c.cond)
	c.checkInvariants()
}

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
