package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
)

// TestSelectRanksLikeExplain checks the fast decision path (dense rows,
// bounds gathered while filtering, partial top-k, two-way split above
// parallelMin hosts) against Explain's straightforward one — every filter
// asked per host, every weigher normalised on its own, a full stable sort —
// on random clouds and requests.
func TestSelectRanksLikeExplain(t *testing.T) {
	for _, tc := range []struct {
		n      int
		levels int // distinct usage levels: few levels, many exact ties
	}{{7, 8}, {150, 8}, {rankedMin + 100, 8}, {rankedMin + 100, 2}, {parallelMin + 300, 8}} {
		n := tc.n
		t.Run(fmt.Sprintf("hosts=%d/levels=%d", n, tc.levels), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(n), uint64(tc.levels)))
			c := newCloud(t, 0)
			ctx := context.Background()
			for i := 0; i < n; i++ {
				name := fmt.Sprintf("h%05d", i)
				c.addHost(t, name)
				if lv := r.IntN(tc.levels); lv > 0 {
					c.use(t, name, "u-"+name, placement.Resources{placement.VCPU: int64(4 * lv), placement.MemoryMB: int64(lv * 14000), placement.DiskGB: int64(lv * 200)})
				}
				if lv := r.IntN(tc.levels); lv > 0 && r.IntN(10) == 0 {
					// Shrink the inventory below usage: free RAM and disk go
					// negative, so the fixed-min bound drops below 0.
					p, err := c.st.GetProvider(ctx, "rp-"+name)
					if err != nil {
						t.Fatal(err)
					}
					invs := p.Inventories.Clone()
					mem := invs[placement.MemoryMB]
					mem.Total, mem.MaxUnit = 1024, 1024
					invs[placement.MemoryMB] = mem
					if _, err := c.st.SetInventories(ctx, p.UUID, p.Generation, invs); err != nil {
						t.Fatal(err)
					}
				}
				if r.IntN(8) == 0 {
					if err := c.st.PutService(ctx, records.Service{Host: name, Disabled: true, LastSeenUp: c.clk.Now()}); err != nil {
						t.Fatal(err)
					}
				}
				// Records (what legacy's weighers read) disagree with the
				// allocations, some claim more RAM than the host has, and
				// some hosts are busy (IoOps varies).
				rec := records.HostRecord{Host: name, VCPUs: 32, CPUAllocationRatio: 4, MemoryMB: 131072, LocalGB: 2000,
					FreeRAMMB: int64(r.IntN(tc.levels)*20000 - 20000), FreeDiskGB: int64(r.IntN(tc.levels) * 250), VCPUsUsed: int64(r.IntN(tc.levels) * 9)}
				if r.IntN(6) == 0 {
					rec.NumIOOps, rec.RunningVMs = int64(r.IntN(4)), int64(r.IntN(30))
				}
				if err := c.st.PutHostRecord(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			cfg := DefaultConfig()
			cfg.MaxAttempts = 5
			for trial := 0; trial < 40; trial++ {
				policy := PolicyClaim
				if trial%2 == 1 {
					policy = PolicyLegacy
				}
				s := c.scheduler(t, cfg, policy, 1)
				req := &Request{Resources: placement.Resources{placement.VCPU: int64(1 + r.IntN(16)), placement.MemoryMB: int64(512 * (1 + r.IntN(64)))}}
				if r.IntN(3) == 0 {
					req.IgnoreHosts = []string{fmt.Sprintf("h%05d", r.IntN(n))}
				}
				exp, err := s.Explain(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				// Every ranked host is tried once while the store refuses:
				// host_subset_size + max_attempts of them.
				want := make([]string, cfg.HostSubsetSize+cfg.MaxAttempts)
				for _, h := range exp.Hosts {
					if h.Rank >= 1 && h.Rank <= len(want) {
						want[h.Rank-1] = h.Host
					}
				}
				var got []string
				_, err = s.Select(ctx, req, func(_ context.Context, cand Candidate) (int64, error) {
					got = append(got, cand.Host)
					return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
				})
				if !IsNoValidHost(err) {
					t.Fatalf("want NoValidHost after refused claims, got %v", err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want[:min(len(want), exp.Candidates)]) {
					t.Fatalf("trial %d: Select tried %v, Explain ranks %v", trial, got, want)
				}
			}
		})
	}
}
