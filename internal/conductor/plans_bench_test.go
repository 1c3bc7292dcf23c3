package conductor_test

import (
	"fmt"
	"testing"
	"time"

	"keel/internal/cloudtest"
	"keel/internal/conductor"
	"keel/internal/records"
	"keel/internal/store"
)

// benchDrain builds a cloud of hosts hosts with perHost small instances
// on each of the first drained ones, drains them with parallel moves in
// flight, and runs the executor on the virtual clock (a tick every
// 100 ms) until the plan ends. It returns the plan and the virtual time
// the drain took.
func benchDrain(b *testing.B, hosts, drained, perHost, parallel int) (records.Plan, time.Duration) {
	b.Helper()
	c := cloudtest.New(b, cloudtest.Options{Hosts: hosts, NoProgress: true,
		Conductor: conductor.Config{MaxConcurrentLiveMigrations: parallel}})
	var names []string
	for h := 1; h <= drained; h++ {
		name := fmt.Sprintf("h%d", h)
		names = append(names, name)
		for i := 0; i < perHost; i++ {
			c.Seed(name, "vm", cloudtest.Small)
		}
	}
	p, err := c.Cond.Plans().Drain(ctx, conductor.DrainRequest{Hosts: names, Parallel: parallel})
	if err != nil {
		b.Fatal(err)
	}
	start := c.Clock.Now()
	for {
		if _, err := c.Cond.Plans().TickPlans(ctx); err != nil {
			b.Fatal(err)
		}
		cur, err := c.Store.GetPlan(ctx, p.ID)
		if err != nil {
			b.Fatal(err)
		}
		if records.PlanTerminal(cur.State) {
			if cur.State != records.PlanDone {
				b.Fatalf("plan ended %s: %s", cur.State, cur.Reason)
			}
			return cur, c.Clock.Now().Sub(start)
		}
		c.Clock.Advance(100 * time.Millisecond)
	}
}

// BenchmarkPlanExecutorPerMove is the executor's cost per move on the
// fake driver at a virtual clock (the copies take no wall time): the wall
// time of a drain of 40 instances, divided by 40, against the same 40
// live migrations started one by one with LiveMigrate (the baseline: the
// migration flow alone). The difference is the executor's overhead.
func BenchmarkPlanExecutorPerMove(b *testing.B) {
	const moves = 40
	b.Run("drain", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			benchDrain(b, 12, 4, moves/4, 8)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*moves)/1e6, "ms/move")
	})
	b.Run("live-migrate-loop", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c := cloudtest.New(b, cloudtest.Options{Hosts: 12, NoProgress: true,
				Conductor: conductor.Config{MaxConcurrentLiveMigrations: 8}})
			var insts []records.Instance
			for h := 1; h <= 4; h++ {
				for j := 0; j < moves/4; j++ {
					insts = append(insts, c.Seed(fmt.Sprintf("h%d", h), "vm", cloudtest.Small))
				}
			}
			for h := 1; h <= 4; h++ {
				host := fmt.Sprintf("h%d", h)
				if _, err := c.Store.UpdateService(ctx, host, func(s *records.Service) error { s.Disabled = true; return nil }); err != nil {
					b.Fatal(err)
				}
			}
			for _, in := range insts {
				if _, err := c.Cond.LiveMigrate(ctx, in.UUID, ""); err != nil {
					b.Fatal(err)
				}
			}
			for n := 0; n < 10000 && active(b, c) > 0; n++ {
				c.Clock.Advance(100 * time.Millisecond)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*moves)/1e6, "ms/move")
	})
}

func active(b *testing.B, c *cloudtest.Cloud) int {
	ms, err := c.Store.ListMigrations(ctx, storeActive)
	if err != nil {
		b.Fatal(err)
	}
	return len(ms)
}

// BenchmarkDrain100With16InFlight drains 100 small instances (10 hosts
// of 10) onto 10 others with 16 moves in flight, and reports the drain's
// (virtual) wall time against the sum of its moves' times and of their
// copies (RAM at the fake driver's 1 GiB/s): the parallelism achieved.
func BenchmarkDrain100With16InFlight(b *testing.B) {
	var wall, sumMoves time.Duration
	for i := 0; i < b.N; i++ {
		p, took := benchDrain(b, 20, 10, 10, 16)
		wall = took
		sumMoves = 0
		for _, mv := range p.Moves {
			sumMoves += mv.EndedAt.Sub(mv.StartedAt)
		}
	}
	sumCopy := time.Duration(100*cloudtest.Small.RAMMB) * time.Second / 1024
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(sumMoves.Seconds(), "sum-move-s")
	b.ReportMetric(sumCopy.Seconds(), "sum-copy-s")
	b.ReportMetric(sumMoves.Seconds()/wall.Seconds(), "in-flight-avg")
}

var storeActive = store.MigrationFilter{ActiveOnly: true}
