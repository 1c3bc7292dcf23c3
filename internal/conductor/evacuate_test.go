package conductor_test

import (
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/records"
)

func (c *cloud) forceDown(host string, down bool) {
	c.t.Helper()
	if _, err := c.st.UpdateService(ctx, host, func(s *records.Service) error { s.ForcedDown = down; return nil }); err != nil {
		c.t.Fatal(err)
	}
}

// TestEvacuateADeadHost: the instances of a host forced down are rebuilt
// on the others, spread by the claim-time view as fresh boots would be;
// the migration consumers keep the dead host's resources until it comes
// back, and then its guests and those allocations go.
func TestEvacuateADeadHost(t *testing.T) {
	c := newCloud(t, hosts(4), sweeps(0, 0, 2*time.Second))
	c.runSweeps(t)
	var insts []records.Instance
	for i := 0; i < 6; i++ {
		insts = append(insts, c.seed("h1", "vm", small))
	}
	if _, err := c.cond.Evacuate(ctx, insts[0].UUID, ""); err == nil || !strings.Contains(err.Error(), "still in use") {
		t.Fatalf("evacuating from a live host: %v, want Nova's refusal", err)
	}
	c.forceDown("h1", true)
	var migs []records.Migration
	for _, in := range insts {
		m, err := c.cond.Evacuate(ctx, in.UUID, "")
		if err != nil {
			t.Fatal(err)
		}
		migs = append(migs, m)
	}
	c.advance(spawnTime + time.Second)
	per := map[string]int{}
	for i, in := range insts {
		got, m := c.instance(in.UUID), c.migration(migs[i].ID)
		if m.Status != records.MigrationDone || got.VMState != records.VMActive || got.Host == "h1" || got.Host == "" {
			t.Fatalf("evacuated %d: migration %s (%s), instance %s on %q", i, m.Status, m.Error, got.VMState, got.Host)
		}
		if !sameAllocations(c.allocations(in.UUID), only(got.Host, small)) || !sameAllocations(c.allocations(m.UUID), only("h1", small)) {
			t.Fatalf("evacuated %d: instance holds %v, its migration %v", i, c.allocations(in.UUID), c.allocations(m.UUID))
		}
		if c.guest(got.Host, in.UUID) != compute.GuestRunning {
			t.Fatalf("evacuated %d: no running guest on %s", i, got.Host)
		}
		per[got.Host]++
	}
	for h, n := range per {
		if n > 2 {
			t.Fatalf("evacuation put %d of 6 on %s (%v): want them spread over the three hosts", n, h, per)
		}
	}
	c.forceDown("h1", false) // the host comes back
	c.advance(3 * time.Second)
	for i, in := range insts {
		if m := c.migration(migs[i].ID); m.Status != records.MigrationCompleted || c.allocations(m.UUID) != nil {
			t.Fatalf("after the source came back: migration %s, its consumer holds %v", m.Status, c.allocations(m.UUID))
		}
		if g := c.guest("h1", in.UUID); g != "" {
			t.Fatalf("the source still has the evacuated guest %s (%s)", in.UUID, g)
		}
	}
	c.checkInvariants()
}

// TestEvacuateRebuildFails: a rebuild that fails leaves the instance on
// its dead source as it was, its allocation back there, nothing on the
// destination; evacuating it again then works.
func TestEvacuateRebuildFails(t *testing.T) {
	c := newCloud(t, hosts(2))
	in := c.seed("h1", "vm", small)
	c.forceDown("h1", true)
	c.drivers["h2"].FailNext(compute.StepSpawn, in.UUID, "no image")
	m, err := c.cond.Evacuate(ctx, in.UUID, "h2")
	if err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime + time.Second)
	got := c.migration(m.ID)
	if got.Status != records.MigrationError || !strings.Contains(got.Error, "no image") {
		t.Fatalf("migration %s (%q)", got.Status, got.Error)
	}
	inst := c.instance(in.UUID)
	if inst.VMState != records.VMActive || inst.TaskState != records.TaskNone || inst.Host != "h1" || !sameAllocations(c.allocations(in.UUID), only("h1", small)) {
		t.Fatalf("instance %s task %q on %s holding %v", inst.VMState, inst.TaskState, inst.Host, c.allocations(in.UUID))
	}
	if g := c.guest("h2", in.UUID); g != "" {
		t.Fatalf("the failed rebuild left a %s guest on h2", g)
	}
	again, err := c.cond.Evacuate(ctx, in.UUID, "h2")
	if err != nil {
		t.Fatal(err)
	}
	c.advance(spawnTime + time.Second)
	if got := c.migration(again.ID); got.Status != records.MigrationDone || c.instance(in.UUID).Host != "h2" {
		t.Fatalf("evacuating again: %s, instance on %s", got.Status, c.instance(in.UUID).Host)
	}
}
