package conductor_test

import (
	"testing"
	"time"

	"keel/internal/records"
)

func (c *cloud) forceDown(host string, down bool) {
	c.t.Helper()
	if _, err := c.st.UpdateService(ctx, host, func(s *records.Service) error { s.ForcedDown = down; return nil }); err != nil {
		c.t.Fatal(err)
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
