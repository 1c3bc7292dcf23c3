package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"keel/internal/placement"
)

// BenchmarkDecision times one decision (refresh, default filters and
// weighers, selection, claim in the memory store) and reports p50 and p99
// besides the mean. Hosts get random, uncorrelated usage per class, the
// hard case for the ranked walk; "full-pass" forces weighing every
// candidate (as shuffle_best_same_weighed_hosts does).
func BenchmarkDecision(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) { benchDecision(b, n, false) })
		b.Run(fmt.Sprintf("hosts=%d/full-pass", n), func(b *testing.B) { benchDecision(b, n, true) })
	}
}

func benchDecision(b *testing.B, n int, fullPass bool) {
	c := newCloud(b, 0)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("h%06d", i)
		c.addHost(b, name)
		c.use(b, name, "init-"+name, placement.Resources{placement.VCPU: int64(r.IntN(30)) + 1, placement.MemoryMB: int64(r.IntN(60000)) + 1, placement.DiskGB: int64(r.IntN(900)) + 1})
	}
	cfg := DefaultConfig()
	cfg.HostSubsetSize = 3
	cfg.ShuffleBestSameWeighedHosts = fullPass
	s := c.scheduler(b, cfg, PolicyClaim, 1)
	req := &Request{Resources: small()}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := s.Select(context.Background(), req, storeClaim(c.st, fmt.Sprint("b", i), small())); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
