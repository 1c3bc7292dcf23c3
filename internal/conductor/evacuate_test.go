package conductor_test

import (
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/records"
	"keel/internal/scheduler"
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

// TestEvacuationSpreads: 40 instances of a dead host evacuated onto 10
// empty hosts land as 40 fresh boots would, from the claim-time view: no
// host takes more than 1.25 times the mean (the seed's skew would put
// them on the top host_subset_size hosts).
func TestEvacuationSpreads(t *testing.T) {
	c := newCloud(t, hosts(11), func(o *cloudOptions) {
		o.schedulerConfig = func(s *scheduler.Config) { s.HostSubsetSize = 3 }
		o.cpuRatio = 4
	})
	tiny := records.Flavor{ID: "tiny", Name: "tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1}
	var insts []records.Instance
	for i := 0; i < 40; i++ {
		insts = append(insts, c.seed("h1", "vm", tiny))
	}
	c.forceDown("h1", true)
	for _, in := range insts {
		if _, err := c.cond.Evacuate(ctx, in.UUID, ""); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(spawnTime + time.Second)
	per := map[string]int{}
	for _, in := range insts {
		per[c.instance(in.UUID).Host]++
	}
	most := 0
	for _, n := range per {
		most = max(most, n)
	}
	t.Logf("40 evacuated onto 10 hosts: %v (max/mean %.2f)", per, float64(most)/4)
	if len(per) != 10 || float64(most)/4 > 1.25 {
		t.Fatalf("evacuation spread %v: max/mean %.2f, want ≤ 1.25 over all 10 hosts", per, float64(most)/4)
	}
}

// BenchmarkColdMoves measures the control plane's own time per move on
// the in-process cloud (memory store, fake driver with instant disks and
// spawns on the virtual clock): a resize round trip (resize, then
// confirm), a cold migration round trip (migrate, then revert) and an
// evacuation.
func BenchmarkColdMoves(b *testing.B) {
	for _, kind := range []string{"resize+confirm", "migrate+revert", "evacuate"} {
		b.Run(kind, func(b *testing.B) {
			t := &testing.T{}
			c := newCloud(t, hosts(3))
			in := c.seed("h1", "vm", small)
			if kind == "evacuate" {
				b.StopTimer()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				switch kind {
				case "resize+confirm":
					f := medium
					if c.instance(in.UUID).Flavor.ID == medium.ID {
						f = small
					}
					if _, err := c.cond.Resize(ctx, in.UUID, f); err != nil {
						b.Fatal(err)
					}
					c.advance(time.Minute)
					if err := c.cond.ConfirmResize(ctx, in.UUID); err != nil {
						b.Fatal(err)
					}
				case "migrate+revert":
					if _, err := c.cond.ColdMigrate(ctx, in.UUID, ""); err != nil {
						b.Fatal(err)
					}
					c.advance(time.Minute)
					if err := c.cond.RevertResize(ctx, in.UUID); err != nil {
						b.Fatal(err)
					}
				case "evacuate":
					b.StopTimer()
					src := c.instance(in.UUID).Host
					c.forceDown(src, true)
					b.StartTimer()
					if _, err := c.cond.Evacuate(ctx, in.UUID, ""); err != nil {
						b.Fatal(err)
					}
					c.advance(time.Minute)
					b.StopTimer()
					c.forceDown(src, false)
					if _, err := c.cond.SweepStalled(ctx); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				c.advance(time.Second)
			}
		})
	}
}
