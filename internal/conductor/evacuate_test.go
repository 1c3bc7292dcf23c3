package conductor_test

import (
	"testing"
	"time"

	"keel/internal/records"
	"keel/internal/scheduler"
)

func (c *cloud) forceDown(host string, down bool) {
	c.t.Helper()
	if _, err := c.st.UpdateService(ctx, host, func(s *records.Service) error { s.ForcedDown = down; return nil }); err != nil {
		c.t.Fatal(err)
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
