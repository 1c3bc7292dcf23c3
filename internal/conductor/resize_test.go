package conductor_test

import (
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/records"
)

// diskTime is how long the fake driver moves small's 20 GB disk (at its
// default 1 GiB/s).
const diskTime = 20 * time.Second

func (c *cloud) wantUsage(t *testing.T, when string, want map[string]records.Flavor) {
	t.Helper()
	for _, h := range c.hosts {
		got := c.usage(h)
		f, ok := want[h]
		switch {
		case !ok && !got.Equal(nil):
			t.Fatalf("%s: %s uses %v, want nothing", when, h, got)
		case ok && !got.Equal(f.Resources()):
			t.Fatalf("%s: %s uses %v, want %s's %v", when, h, got, f.Name, f.Resources())
		}
	}
}

// TestResizeConfirm: a resize small → medium holds both hosts exactly at
// every step: from the decision the source holds small for the migration
// and the destination medium for the instance; VERIFY_RESIZE runs the
// guest on the destination with medium; confirm drops the source side.
func TestResizeConfirm(t *testing.T) {
	c := newCloud(t)
	a := c.seed("h1", "a", small)
	m, err := c.cond.Resize(ctx, a.UUID, medium)
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != records.MigrationTypeResize || m.Status != records.MigrationMigrating || m.DestHost == "" || m.DestHost == "h1" {
		t.Fatalf("resize %s %s to %q", m.Type, m.Status, m.DestHost)
	}
	dst := m.DestHost
	c.wantUsage(t, "decided", map[string]records.Flavor{"h1": small, dst: medium})
	if !sameAllocations(c.allocations(m.UUID), only("h1", small)) || !sameAllocations(c.allocations(a.UUID), only(dst, medium)) {
		t.Fatalf("migration holds %v, instance %v", c.allocations(m.UUID), c.allocations(a.UUID))
	}
	if in := c.instance(a.UUID); in.TaskState != records.TaskResizePrep {
		t.Fatalf("task %q while the disk moves", in.TaskState)
	}
	c.advance(diskTime + time.Second)
	in := c.instance(a.UUID)
	if got := c.migration(m.ID); got.Status != records.MigrationFinished || in.VMState != records.VMResized || in.Host != dst || in.Flavor.ID != medium.ID {
		t.Fatalf("after the disk moved: migration %s, instance %s on %s with %s", got.Status, in.VMState, in.Host, in.Flavor.ID)
	}
	if c.guest(dst, a.UUID) != compute.GuestRunning || c.guest("h1", a.UUID) != compute.GuestResized {
		t.Fatalf("guests: destination %q, source %q", c.guest(dst, a.UUID), c.guest("h1", a.UUID))
	}
	if rec := c.hostRecord(dst); rec.MemoryMBUsed < medium.RAMMB {
		t.Fatalf("the destination's record says %d MiB used, want at least medium's", rec.MemoryMBUsed)
	}
	c.wantUsage(t, "VERIFY_RESIZE", map[string]records.Flavor{"h1": small, dst: medium})
	if err := c.cond.ConfirmResize(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	if got := c.migration(m.ID); got.Status != records.MigrationConfirmed {
		t.Fatalf("after confirm: %s (%s)", got.Status, got.Error)
	}
	if in := c.instance(a.UUID); in.VMState != records.VMActive || in.TaskState != records.TaskNone || in.Host != dst {
		t.Fatalf("after confirm: %s task %q on %s", in.VMState, in.TaskState, in.Host)
	}
	c.wantUsage(t, "confirmed", map[string]records.Flavor{dst: medium})
	if err := c.cond.ConfirmResize(ctx, a.UUID); err == nil {
		t.Fatal("a second confirm was accepted")
	}
	c.checkInvariants()
}

// TestColdMigrationRevert: a cold migration reverted puts the guest back
// on its source with its flavor, the destination's claim and guest gone.
func TestColdMigrationRevert(t *testing.T) {
	c := newCloud(t)
	a := c.seed("h1", "a", small)
	m, err := c.cond.ColdMigrate(ctx, a.UUID, "h3")
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != records.MigrationTypeCold || m.DestHost != "h3" {
		t.Fatalf("cold migration %s to %q", m.Type, m.DestHost)
	}
	c.advance(diskTime + time.Second)
	if err := c.cond.RevertResize(ctx, a.UUID); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	if got := c.migration(m.ID); got.Status != records.MigrationReverted {
		t.Fatalf("after revert: %s (%s)", got.Status, got.Error)
	}
	in := c.instance(a.UUID)
	if in.VMState != records.VMActive || in.Host != "h1" || in.Flavor.ID != small.ID || in.TaskState != records.TaskNone {
		t.Fatalf("after revert: %s on %s with %s task %q", in.VMState, in.Host, in.Flavor.ID, in.TaskState)
	}
	c.wantUsage(t, "reverted", map[string]records.Flavor{"h1": small})
	if c.guest("h3", a.UUID) != "" || c.guest("h1", a.UUID) != compute.GuestRunning {
		t.Fatalf("guests after revert: h3 %q, h1 %q", c.guest("h3", a.UUID), c.guest("h1", a.UUID))
	}
	c.checkInvariants()
}

// TestResizeConfirmWindow: a resize left in VERIFY_RESIZE is confirmed by
// the sweep once resize_confirm_window passes.
func TestResizeConfirmWindow(t *testing.T) {
	c := newCloud(t, func(o *cloudOptions) { o.confirmWindow, o.stallAfter = 10*time.Second, 2*time.Second })
	c.runSweeps(t)
	a := c.seed("h1", "a", small)
	m, err := c.cond.ColdMigrate(ctx, a.UUID, "")
	if err != nil {
		t.Fatal(err)
	}
	c.advance(diskTime + time.Second)
	if got := c.migration(m.ID); got.Status != records.MigrationFinished {
		t.Fatalf("migration %s, want finished", got.Status)
	}
	c.advance(15 * time.Second)
	if got := c.migration(m.ID); got.Status != records.MigrationConfirmed {
		t.Fatalf("after the window: %s, want confirmed by the sweep", got.Status)
	}
	c.checkInvariants()
}

// TestResizeFailuresRollBack: each step that can fail before the guest
// runs on the destination rolls the move back: the instance ACTIVE on its
// source with its old flavor, holding it there only.
func TestResizeFailuresRollBack(t *testing.T) {
	for _, step := range []string{fake.StepPrepResize, fake.StepResize, fake.StepFinishResize} {
		t.Run(step, func(t *testing.T) {
			c := newCloud(t)
			a := c.seed("h1", "a", small)
			for _, h := range c.hosts {
				c.drivers[h].FailNext(step, a.UUID, "injected "+step+" failure")
			}
			m, err := c.cond.Resize(ctx, a.UUID, medium)
			if err != nil {
				t.Fatal(err)
			}
			c.advance(diskTime + time.Second)
			got := c.migration(m.ID)
			if got.Status != records.MigrationFailed || !strings.Contains(got.Error, "injected "+step) {
				t.Fatalf("migration %s (%q), want failed with the injected reason", got.Status, got.Error)
			}
			in := c.instance(a.UUID)
			if in.VMState != records.VMActive || in.Host != "h1" || in.Flavor.ID != small.ID || in.TaskState != records.TaskNone {
				t.Fatalf("instance %s on %s with %s task %q", in.VMState, in.Host, in.Flavor.ID, in.TaskState)
			}
			c.wantUsage(t, "rolled back", map[string]records.Flavor{"h1": small})
			c.checkInvariants()
		})
	}
}

// TestResizeRefusals: Nova's refusals, before anything is recorded.
func TestResizeRefusals(t *testing.T) {
	c := newCloud(t)
	a := c.seed("h1", "a", small)
	if _, err := c.cond.Resize(ctx, a.UUID, small); err == nil || !strings.Contains(err.Error(), "must change flavor") {
		t.Fatalf("resize to the same flavor: %v", err)
	}
	if _, err := c.cond.ColdMigrate(ctx, a.UUID, "h1"); err == nil {
		t.Fatal("a cold migration to the instance's own host was accepted")
	}
	if err := c.cond.ConfirmResize(ctx, a.UUID); err == nil {
		t.Fatal("confirm with nothing to confirm was accepted")
	}
	if _, err := c.cond.Resize(ctx, a.UUID, huge); err != nil {
		t.Fatal(err)
	}
	got := c.instance(a.UUID)
	if got.VMState != records.VMActive || got.TaskState != records.TaskNone || got.Flavor.ID != small.ID {
		t.Fatalf("a resize no host can take left %s task %q with %s", got.VMState, got.TaskState, got.Flavor.ID)
	}
	c.checkInvariants()
}
