package conductor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/audit"
	"keel/internal/clock"
	"keel/internal/cloudtest"
	"keel/internal/compute/fake"
	"keel/internal/conductor"
	"keel/internal/inproc"
	"keel/internal/records"
	"keel/internal/store"
)

// TestWallClockStress runs boots, deletes, live migrations and periodic
// audits at once from several goroutines on the wall clock — the
// interleavings the virtual-clock tests never produce — and then checks
// the store's invariants and that every guest belongs to an instance
// recorded on its host.
func TestWallClockStress(t *testing.T) {
	if testing.Short() {
		t.Skip("wall-clock stress test skipped in -short mode")
	}
	// The in-process cloud on the wall clock: four hosts, claim policy.
	spec := inproc.Spec{SchedulerSeeds: [2]uint64{3, 4}, Conductor: conductor.Config{MaxConcurrentLiveMigrations: 2}, Clock: clock.Real{}}
	for i := 1; i <= 4; i++ {
		cfg := cloudtest.HostConfig(fmt.Sprintf("h%d", i))
		cfg.WriteDestRecord = true
		spec.Hosts = append(spec.Hosts, inproc.Host{Config: cfg, Driver: fake.Config{SpawnTime: time.Millisecond, BandwidthMiBps: 1 << 20}})
	}
	c, err := inproc.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	st, cond, ag, drivers, hosts := c.Store, c.Cond, c.Agents, c.Drivers, c.Hosts
	runCtx, stop := context.WithCancel(ctx)
	for _, h := range hosts {
		ag[h].StartPeriodicAudit(runCtx, 3*time.Millisecond, time.Millisecond, nil)
	}

	var (
		mu      sync.Mutex
		created []string
		ops     atomic.Int64
		booted  atomic.Int64
		deleted atomic.Int64
		moved   atomic.Int64
	)
	pick := func(r *rand.Rand) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(created) == 0 {
			return "", false
		}
		return created[r.IntN(len(created))], true
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			for time.Now().Before(deadline) {
				ops.Add(1)
				switch r.IntN(5) {
				case 0, 1:
					in, err := cond.Boot(ctx, records.Instance{Name: "vm", Flavor: small})
					if err == nil && in.VMState != records.VMError {
						booted.Add(1)
						mu.Lock()
						created = append(created, in.UUID)
						mu.Unlock()
					}
				case 2:
					if u, ok := pick(r); ok {
						if cond.Delete(ctx, u) == nil {
							deleted.Add(1)
							mu.Lock()
							for i, x := range created {
								if x == u {
									created[i] = created[len(created)-1]
									created = created[:len(created)-1]
									break
								}
							}
							mu.Unlock()
						}
					}
				case 3, 4:
					if u, ok := pick(r); ok {
						if m, err := cond.LiveMigrate(ctx, u, ""); err == nil && !records.MigrationTerminal(m.Status) {
							moved.Add(1)
						}
					}
				}
			}
		}(w)
	}
	wg.Wait()
	stop()
	for _, h := range hosts {
		ag[h].StopPeriodicAudit()
	}
	// Let every build and copy in flight finish.
	settled := func() bool {
		ms, _ := st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
		ins, _ := st.ListInstances(ctx, "")
		for _, in := range ins {
			if in.VMState == records.VMBuilding {
				return false
			}
		}
		return len(ms) == 0
	}
	for end := time.Now().Add(10 * time.Second); !settled(); {
		if time.Now().After(end) {
			t.Fatal("builds or migrations still in flight 10 s after the load stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // a last callback may still be returning
	t.Logf("%d operations: %d boots, %d deletes, %d migrations started", ops.Load(), booted.Load(), deleted.Load(), moved.Load())

	v, err := audit.Check(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) > 0 {
		t.Errorf("%d invariant violations, first ones:\n%s", len(v), strings.Join(v[:min(len(v), 10)], "\n"))
	}
	for _, h := range hosts {
		gs, _ := drivers[h].Guests(ctx)
		for _, g := range gs {
			in, err := st.GetInstance(ctx, g.UUID)
			if err != nil || in.Host != h {
				t.Errorf("guest %s (%s) on %s belongs to no instance recorded there (%v, host %q)", g.UUID, g.State, h, err, in.Host)
			}
		}
	}
}
