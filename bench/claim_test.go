package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store/sqlite"
)

// BenchmarkDecideAndClaimSQLite times what a boot costs the control plane
// before the agent is involved: refresh the host view from the store's
// change stream, filter and weigh 10,000 hosts, and commit the claim in
// SQLite (WAL) against the provider generation the view holds — one
// decision at a time, as one scheduler makes them. It reports claims per
// second and the p50/p99 of one decide+claim, for synchronous=NORMAL (the
// default) and FULL (an fsync per commit).
func BenchmarkDecideAndClaimSQLite(b *testing.B) {
	for _, sync := range []string{"NORMAL", "FULL"} {
		b.Run("hosts=10000/synchronous="+sync, func(b *testing.B) {
			ctx := context.Background()
			st, err := sqlite.OpenWith(ctx, filepath.Join(b.TempDir(), "keel.db"), sqlite.Options{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			clk := clock.NewVirtual(clock.Epoch)
			r := rand.New(rand.NewPCG(1, 1))
			for i := 0; i < 10000; i++ {
				name := fmt.Sprintf("host%05d", i)
				cpu := placement.NewInventory(32)
				cpu.AllocationRatio = 4
				mem := placement.NewInventory(131072)
				mem.Reserved = 512
				p, err := st.CreateProvider(ctx, placement.Provider{UUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i), Name: name,
					Inventories: placement.Inventories{placement.VCPU: cpu, placement.MemoryMB: mem, placement.DiskGB: placement.NewInventory(2000)}})
				if err != nil {
					b.Fatal(err)
				}
				if err := st.PutService(ctx, records.Service{Host: name, Zone: "nova", LastSeenUp: clk.Now()}); err != nil {
					b.Fatal(err)
				}
				n := int64(r.IntN(12))
				if n > 0 {
					if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "seed-" + name,
						Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: n, placement.MemoryMB: n * 4096, placement.DiskGB: n * 40}}}); err != nil {
						b.Fatal(err)
					}
				}
			}
			view, err := scheduler.NewView(ctx, st, scheduler.PolicyClaim)
			if err != nil {
				b.Fatal(err)
			}
			cfg := scheduler.DefaultConfig()
			cfg.HostSubsetSize = 3
			s, err := scheduler.New(cfg, view, clk, rand.New(rand.NewPCG(2, 2)))
			if err != nil {
				b.Fatal(err)
			}
			flavor := placement.Resources{placement.VCPU: 1, placement.MemoryMB: 2048, placement.DiskGB: 20}
			lat := make([]time.Duration, 0, b.N)
			conflicts := 0
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				consumer := fmt.Sprintf("claim-%d", i)
				t0 := time.Now()
				sel, err := s.Select(ctx, &scheduler.Request{Resources: flavor}, func(ctx context.Context, c scheduler.Candidate) (int64, error) {
					plan, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumer,
						Allocations: map[string]placement.Resources{c.ProviderUUID: flavor}, ProviderGenerations: map[string]int64{c.ProviderUUID: c.Generation}})
					return plan.Providers[c.ProviderUUID], err
				})
				if err != nil {
					b.Fatal(err)
				}
				conflicts += sel.Conflicts
				lat = append(lat, time.Since(t0))
			}
			elapsed := time.Since(start)
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "claims/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(conflicts), "conflicts")
		})
	}
}
