package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// cloud is a small builder: hosts with the seed scenario's sizes in a
// memory store.
type cloud struct {
	t   *testing.T
	st  *memory.Store
	clk *clock.Virtual
}

func newCloud(t testing.TB, n int) *cloud {
	c := &cloud{st: memory.New(), clk: clock.NewVirtual(clock.Epoch)}
	if tt, ok := t.(*testing.T); ok {
		c.t = tt
	}
	for i := 1; i <= n; i++ {
		c.addHost(t, fmt.Sprintf("h%02d", i))
	}
	return c
}

func (c *cloud) addHost(t testing.TB, name string) {
	ctx := context.Background()
	mem := placement.NewInventory(131072)
	mem.Reserved = 512
	cpu := placement.NewInventory(32)
	cpu.AllocationRatio = 4.0
	if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: "rp-" + name, Name: name, Inventories: placement.Inventories{
		placement.VCPU: cpu, placement.MemoryMB: mem, placement.DiskGB: placement.NewInventory(2000),
	}}); err != nil {
		t.Fatal(err)
	}
	c.addService(t, name)
}

func (c *cloud) addService(t testing.TB, name string) {
	if err := c.st.PutService(context.Background(), records.Service{Host: name, Binary: "nova-compute", Zone: "nova", LastSeenUp: c.clk.Now()}); err != nil {
		t.Fatal(err)
	}
}

func (c *cloud) use(t testing.TB, host, consumer string, r placement.Resources) {
	if _, err := c.st.WriteAllocations(context.Background(), placement.AllocationWrite{ConsumerUUID: consumer, Allocations: map[string]placement.Resources{"rp-" + host: r}}); err != nil {
		t.Fatal(err)
	}
}

func (c *cloud) scheduler(t testing.TB, cfg Config, policy Policy, seed uint64) *Scheduler {
	v, err := NewView(context.Background(), c.st, policy)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, v, c.clk, rand.New(rand.NewPCG(seed, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func small() placement.Resources {
	return placement.Resources{placement.VCPU: 1, placement.MemoryMB: 2048, placement.DiskGB: 20}
}

// storeClaim claims req's resources for consumer on the candidate with the
// view's generation.
func storeClaim(st store.Store, consumer string, r placement.Resources) ClaimFunc {
	return func(ctx context.Context, c Candidate) (int64, error) {
		plan, err := st.WriteAllocations(ctx, placement.AllocationWrite{
			ConsumerUUID: consumer, Allocations: map[string]placement.Resources{c.ProviderUUID: r},
			ProviderGenerations: map[string]int64{c.ProviderUUID: c.Generation},
		})
		return plan.Providers[c.ProviderUUID], err
	}
}

func TestNormalizeAsNova(t *testing.T) {
	cases := []struct {
		name     string
		raw      []float64
		fixedMin bool
		want     []float64
	}{
		{"fixed min at zero", []float64{50, 100}, true, []float64{0.5, 1}},
		{"free min", []float64{50, 100}, false, []float64{0, 1}},
		{"all equal positive with fixed min", []float64{7, 7}, true, []float64{1, 1}},
		{"all equal without fixed min", []float64{7, 7}, false, []float64{0, 0}},
		{"all zero", []float64{0, 0, 0}, true, []float64{0, 0, 0}},
		{"negative clamped at the fixed min", []float64{-100, 100}, true, []float64{0, 1}},
		// Nova clamps at minval before normalising: -4000 free RAM counts
		// as 0, it does not stretch the range.
		{"clamping keeps the other hosts' weights", []float64{4000, 0, -4000}, true, []float64{1, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]float64, len(tc.raw))
			lo, hi := bounds(tc.raw, tc.fixedMin)
			for i, v := range tc.raw {
				out[i] = normalized(v, lo, hi)
			}
			for i := range out {
				if out[i] != tc.want[i] {
					t.Fatalf("normalize(%v) = %v, want %v", tc.raw, out, tc.want)
				}
			}
		})
	}
}

func TestTopKEqualsFullSort(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 500; trial++ {
		n := 1 + r.IntN(40)
		w := make([]float64, n)
		for i := range w {
			w[i] = float64(r.IntN(6)) // many ties
		}
		k := 1 + r.IntN(8)
		got := topK(w, k)
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return w[idx[a]] > w[idx[b]] })
		want := idx[:min(k, n)]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("topK(%v, %d) = %v, want %v", w, k, got, want)
		}
	}
}

func TestSelectPrefersFreeHostAndClaims(t *testing.T) {
	c := newCloud(t, 3)
	c.use(t, "h01", "busy1", placement.Resources{placement.VCPU: 8, placement.MemoryMB: 65536, placement.DiskGB: 500})
	c.use(t, "h03", "busy3", placement.Resources{placement.VCPU: 2, placement.MemoryMB: 8192, placement.DiskGB: 40})
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	sel, err := s.Select(context.Background(), &Request{Resources: small()}, storeClaim(c.st, "i1", small()))
	if err != nil {
		t.Fatal(err)
	}
	if sel.Host != "h02" || sel.Claims != 1 {
		t.Fatalf("chose %s after %d claims, want the empty h02 on the first claim", sel.Host, sel.Claims)
	}
	got, _ := c.st.GetConsumer(context.Background(), "i1")
	if !got.Allocations["rp-h02"].Equal(small()) {
		t.Fatalf("allocation in store = %v", got.Allocations)
	}
	h, _ := s.View().Host("h02")
	if !h.Used().Equal(small()) {
		t.Fatalf("view did not assume the claim: used %v", h.Used())
	}
}

func TestTiesKeepNameOrderAndSubsetIsSeeded(t *testing.T) {
	c := newCloud(t, 6)
	cfg := DefaultConfig()
	cfg.HostSubsetSize = 3
	picks := func(seed uint64) []string {
		var out []string
		s := c.scheduler(t, cfg, PolicyClaim, seed)
		for i := 0; i < 20; i++ {
			sel, err := s.Select(context.Background(), &Request{Resources: small()}, func(context.Context, Candidate) (int64, error) {
				return 0, &placement.ConflictError{Kind: placement.ProviderGeneration} // never commit: the view stays equal
			})
			if err == nil || !IsNoValidHost(err) {
				t.Fatalf("expected NoValidHost after refused claims, got %v", err)
			}
			_ = sel
		}
		exp, err := s.Explain(context.Background(), &Request{Resources: small()})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range exp.Hosts {
			if h.Rank >= 1 && h.Rank <= 3 {
				out = append(out, h.Host)
			}
		}
		return out
	}
	if got := picks(1); strings.Join(got, ",") != "h01,h02,h03" {
		t.Fatalf("top 3 of equal hosts = %v, want h01,h02,h03 (name order)", got)
	}

	chosen := map[string]int{}
	s := c.scheduler(t, cfg, PolicyClaim, 42)
	for i := 0; i < 300; i++ {
		var first string
		s.Select(context.Background(), &Request{Resources: small()}, func(_ context.Context, cand Candidate) (int64, error) {
			if first == "" {
				first = cand.Host
			}
			return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
		})
		chosen[first]++
	}
	if len(chosen) != 3 || chosen["h01"] == 0 || chosen["h02"] == 0 || chosen["h03"] == 0 {
		t.Fatalf("first choices over 300 decisions = %v, want a spread over h01..h03 only", chosen)
	}
}

func TestRefusedClaimsMoveOnAndRankAgain(t *testing.T) {
	c := newCloud(t, 5)
	cfg := DefaultConfig()
	cfg.MaxAttempts = 2
	s := c.scheduler(t, cfg, PolicyClaim, 1)
	var tried []string
	_, err := s.Select(context.Background(), &Request{Resources: small()}, func(_ context.Context, cand Candidate) (int64, error) {
		tried = append(tried, cand.Host)
		return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
	})
	// The ranking holds host_subset_size (1) + max_attempts (2) hosts; each
	// is tried once.
	if !IsNoValidHost(err) || len(tried) != 3 || tried[0] == tried[1] || tried[1] == tried[2] || tried[0] == tried[2] {
		t.Fatalf("tried %v, err %v; want the 3 ranked hosts once each, then NoValidHost", tried, err)
	}
	if !strings.Contains(err.Error(), "claim refused") {
		t.Fatalf("NoValidHost %q does not say the claims were refused", err)
	}

	// Refusals up to the last ranked host, then a claim: the boot is
	// placed (max_attempts refusals in a row no longer fail it).
	tried = nil
	sel, err := s.Select(context.Background(), &Request{Resources: small()}, func(_ context.Context, cand Candidate) (int64, error) {
		tried = append(tried, cand.Host)
		if len(tried) < 3 {
			return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
		}
		return 1, nil
	})
	if err != nil || sel.Claims != 3 || sel.Conflicts != 2 || sel.Host != tried[2] {
		t.Fatalf("sel=%+v err=%v tried %v; want the third claim to commit", sel, err, tried)
	}

	// A stale generation in the view: someone else claimed h01 behind the
	// scheduler's back; the store refuses, the scheduler moves on.
	s2 := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	if err := s2.View().Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	sel, err = s2.Select(context.Background(), &Request{Resources: small()}, func(ctx context.Context, cand Candidate) (int64, error) {
		if cand.Host == "h01" {
			c.use(t, "h01", "intruder", placement.Resources{placement.VCPU: 1}) // bumps the generation
		}
		return storeClaim(c.st, "i-conflict", small())(ctx, cand)
	})
	if err != nil || sel.Conflicts != 1 || sel.Host == "h01" {
		t.Fatalf("sel=%+v err=%v; want one conflict on h01 then another host", sel, err)
	}
}

func TestFiltersRejectWithReasons(t *testing.T) {
	c := newCloud(t, 4)
	ctx := context.Background()
	if err := c.st.PutService(ctx, records.Service{Host: "h01", Disabled: true, Zone: "nova", LastSeenUp: c.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := c.st.PutService(ctx, records.Service{Host: "h02", Zone: "nova", LastSeenUp: c.clk.Now().Add(-10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	c.use(t, "h03", "hog", placement.Resources{placement.MemoryMB: 130000})
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	exp, err := s.Explain(ctx, &Request{Resources: small(), IgnoreHosts: []string{"h04"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"h01": "ComputeFilter", "h02": "ComputeFilter", "h03": "ResourceFilter", "h04": "ignored"}
	for _, h := range exp.Hosts {
		if h.RejectedBy != want[h.Host] || h.Reason == "" {
			t.Errorf("%s rejected by %q (%s), want %q with a reason", h.Host, h.RejectedBy, h.Reason, want[h.Host])
		}
	}
	if !strings.Contains(exp.Hosts[2].Reason, "MEMORY_MB") || !strings.Contains(exp.Hosts[1].Reason, "down") {
		t.Errorf("reasons do not name the cause: %q / %q", exp.Hosts[2].Reason, exp.Hosts[1].Reason)
	}
	_, err = s.Select(ctx, &Request{Resources: small(), IgnoreHosts: []string{"h04"}}, storeClaim(c.st, "x", small()))
	if !IsNoValidHost(err) || !strings.Contains(err.Error(), "2 by ComputeFilter") || !strings.Contains(err.Error(), "1 by ResourceFilter") {
		t.Fatalf("error %q does not count rejections per filter", err)
	}
}

func TestLegacyWeighersReadRecordsButFitReadsAllocations(t *testing.T) {
	c := newCloud(t, 2)
	ctx := context.Background()
	// Records say h01 is empty, h02 half full; allocations say the opposite.
	for _, h := range []struct {
		name string
		used int64
	}{{"h01", 512}, {"h02", 65536}} {
		if err := c.st.PutHostRecord(ctx, records.HostRecord{Host: h.name, VCPUs: 32, MemoryMB: 131072, MemoryMBUsed: h.used, FreeRAMMB: 131072 - h.used, LocalGB: 2000, FreeDiskGB: 2000, CPUAllocationRatio: 4}); err != nil {
			t.Fatal(err)
		}
	}
	c.use(t, "h01", "big", placement.Resources{placement.MemoryMB: 100000})
	for _, tc := range []struct {
		policy Policy
		want   string
	}{{PolicyLegacy, "h01"}, {PolicyClaim, "h02"}} {
		s := c.scheduler(t, DefaultConfig(), tc.policy, 1)
		exp, err := s.Explain(ctx, &Request{Resources: small()})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range exp.Hosts {
			if h.Rank == 1 && h.Host != tc.want {
				t.Errorf("%s: best host %s, want %s", tc.policy, h.Host, tc.want)
			}
		}
	}
	// Fit still comes from allocations under legacy: 40000 MiB does not fit
	// h01 even though its record says it is empty.
	s := c.scheduler(t, DefaultConfig(), PolicyLegacy, 1)
	sel, err := s.Select(ctx, &Request{Resources: placement.Resources{placement.MemoryMB: 40000}}, storeClaim(c.st, "y", placement.Resources{placement.MemoryMB: 40000}))
	if err != nil || sel.Host != "h02" {
		t.Fatalf("legacy placed a 40000 MiB request on %q (err %v), want h02", sel.Host, err)
	}
}

func TestExtraSpecOperatorsAsNova(t *testing.T) {
	cases := []struct {
		have, want string
		ok         bool
	}{
		{"16", "= 8", true}, {"4", "= 8", false}, {"8", "== 8", true}, {"8", "!= 8", false},
		{"8", ">= 9", false}, {"8", "<= 9", true},
		{"x86_64", "s== x86_64", true}, {"x86_64", "s!= x86_64", false},
		{"b", "s< c", true}, {"c", "s<= c", true}, {"d", "s> c", true}, {"b", "s>= c", false},
		{"avx2 sse4", "<in> avx2", true}, {"sse4", "<in> avx2", false},
		{"avx2 sse4 aes", "<all-in> aes avx2", true}, {"avx2 sse4", "<all-in> aes avx2", false},
		{"kvm", "<or> qemu <or> kvm", true}, {"xen", "<or> qemu <or> kvm", false},
		{"fast", "fast", true}, {"fast", "slow", false},
		// Nova's quirks: an operator without an argument matches nothing,
		// an operator reads only its first argument, "<or>" compares whole
		// words.
		{"=", "=", false}, {"a b", "<in> b c", true}, {"x", "s== x y", true},
		{"gold", "<or> silver gold", false}, {"a b", "<or> a b", false},
	}
	for _, tc := range cases {
		if got := matchSpec(tc.have, tc.want); got != tc.ok {
			t.Errorf("matchSpec(%q, %q) = %v, want %v", tc.have, tc.want, got, tc.ok)
		}
	}
}

// TestOnPhaseReportsEachPart: a decision reports its parts in order — the
// refresh, the ranking, each claim (a refused one followed by the
// refresh it causes), the committed claim's application — so that a
// benchmark can time them.
func TestOnPhaseReportsEachPart(t *testing.T) {
	c := newCloud(t, 4)
	s := c.scheduler(t, DefaultConfig(), PolicyClaim, 1)
	var got []Phase
	s.OnPhase(func(p Phase) { got = append(got, p) })
	claims := 0
	if _, err := s.Select(context.Background(), &Request{Resources: small()}, func(ctx context.Context, cand Candidate) (int64, error) {
		if claims++; claims < 3 {
			return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
		}
		return storeClaim(c.st, "i-phases", small())(ctx, cand)
	}); err != nil {
		t.Fatal(err)
	}
	want := []Phase{PhaseRefresh, PhaseRank, PhaseClaim, PhaseRefresh, PhaseClaim, PhaseRefresh, PhaseClaim, PhaseApply}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("phases %v, want %v", got, want)
	}
	got = nil
	s.OnPhase(nil)
	if _, err := s.Select(context.Background(), &Request{Resources: small()}, storeClaim(c.st, "i-quiet", small())); err != nil || got != nil {
		t.Fatalf("with OnPhase(nil): phases %v, err %v; want none", got, err)
	}
}
