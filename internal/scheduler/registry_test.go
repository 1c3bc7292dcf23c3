package scheduler

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/placement"
)

// agreeNow is the virtual time of the agreement tests' decisions.
var agreeNow = time.Unix(1_800_000_000, 0)

// randomView builds a view of n hosts that differ in everything some
// filter or weigher reads: inventories and usage (over capacity too),
// unit constraints, a custom class, traits, service state and heartbeat,
// capabilities, zones, the weighers' fields (negative free amounts too),
// and aggregates with zones, metadata and per-host multipliers.
func randomView(r *rand.Rand, n int) *View {
	v := &View{src: nopSource{}, byName: map[string]*HostState{}, byUUID: map[string]*HostState{}}
	byHost := map[string][]map[string]string{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("h%04d", i)
		h := &HostState{Name: name, Zone: pick(r, "nova", "nova", "az2"), HasService: r.IntN(20) > 0,
			Disabled: r.IntN(10) == 0, ForcedDown: r.IntN(20) == 0,
			LastSeenUp: agreeNow.Add(time.Duration(r.IntN(181)-90) * time.Second),
			FreeRAMMB:  int64(r.IntN(9)*16000 - 16000), FreeDiskMB: int64(r.IntN(5) * 500_000), VCPUsTotal: 32,
			VCPUsUsed: int64(r.IntN(6) * 30), CPUAllocationRatio: pick(r, 1.0, 4.0),
			NumIOOps: int64(r.IntN(10)), NumInstances: int64(r.IntN(60)), FailedBuilds: int64(r.IntN(4) / 3),
			Capabilities: map[string]string{"hypervisor_type": pick(r, "QEMU", "qemu", "xen"), "cpu_info.arch": pick(r, "x86_64", "aarch64")},
		}
		invs := placement.Inventories{
			placement.VCPU:     {Total: 32, MinUnit: 1, MaxUnit: int64(pick(r, 32, 8)), StepSize: 1, AllocationRatio: 4},
			placement.MemoryMB: {Total: 131072, Reserved: 512, MinUnit: int64(pick(r, 1, 1024)), MaxUnit: 131072, StepSize: int64(pick(r, 1, 1, 512)), AllocationRatio: 1},
		}
		if r.IntN(10) == 0 { // units past 2^30: the dense rows keep them exact
			invs[placement.VCPU] = placement.Inventory{Total: 1 << 33, MinUnit: int64(pick(r, 1, 1<<31-1)), MaxUnit: 1 << 33,
				StepSize: int64(pick(r, 1, 1<<31)), AllocationRatio: 1}
		}
		if r.IntN(8) > 0 {
			invs[placement.DiskGB] = placement.Inventory{Total: 2000, MinUnit: 1, MaxUnit: 2000, StepSize: 1, AllocationRatio: 1}
		}
		if r.IntN(3) == 0 {
			invs["CUSTOM_GPU"] = placement.Inventory{Total: 2, MinUnit: 1, MaxUnit: 2, StepSize: 1, AllocationRatio: 1}
		}
		usage := placement.Resources{placement.VCPU: int64(r.IntN(9) * 16), placement.MemoryMB: int64(r.IntN(10) * 14000)}
		if _, ok := invs["CUSTOM_GPU"]; ok {
			usage["CUSTOM_GPU"] = int64(r.IntN(3))
		}
		var traits []string
		for _, tr := range []string{"CUSTOM_FAST", "HW_CPU_X86_AVX2"} {
			if r.IntN(2) == 0 {
				traits = append(traits, tr)
			}
		}
		h.setProvider(placement.Provider{UUID: "rp-" + name, Name: name, Inventories: invs, Traits: traits}, usage)
		v.add(h)
		var aggs []map[string]string
		if r.IntN(4) == 0 {
			md := map[string]string{}
			if r.IntN(2) == 0 {
				md[ZoneKey] = pick(r, "az1", "az2", "az1,az3")
			}
			if r.IntN(2) == 0 {
				md["ssd"] = pick(r, "true", "false")
			}
			if r.IntN(3) == 0 {
				w := &weigherTable[r.IntN(len(weigherTable))]
				md[w.Multiplier.Name] = pick(r, "2.0", "0.5", "0", "junk")
			}
			aggs = append(aggs, md)
		}
		byHost[name] = aggs
	}
	v.setAggregates(byHost)
	return v
}

// randomRequest asks for resources and, at random, for what activates the
// other filters and the per-request weighers.
func randomRequest(r *rand.Rand, hosts []string) *Request {
	req := &Request{Resources: placement.Resources{placement.VCPU: int64(1 + r.IntN(12)), placement.MemoryMB: int64(256 * (1 + r.IntN(80)))},
		ExtraSpecs: map[string]string{}, ImageProps: map[string]string{}}
	if r.IntN(8) == 0 {
		req.Resources[placement.VCPU] = int64(pick(r, 1<<30, 3<<30, 1<<31))
	}
	if r.IntN(2) == 0 {
		req.Resources[placement.DiskGB] = int64(r.IntN(400))
	}
	if r.IntN(6) == 0 {
		req.Resources["CUSTOM_GPU"] = 1
	}
	if r.IntN(4) == 0 {
		req.ExtraSpecs["trait:"+pick(r, "CUSTOM_FAST", "HW_CPU_X86_AVX2")] = pick(r, "required", "forbidden")
	}
	if r.IntN(3) == 0 {
		req.ExtraSpecs["capabilities:hypervisor_type"] = pick(r, "QEMU", "s== qemu", "<in> e")
	}
	if r.IntN(3) == 0 {
		req.ImageProps["hw_architecture"] = pick(r, "x86_64", "AARCH64")
	}
	if r.IntN(3) == 0 {
		req.ExtraSpecs[pick(r, "ssd", "aggregate_instance_extra_specs:ssd")] = pick(r, "true", "<or> true <or> false")
	}
	if r.IntN(3) == 0 {
		req.Zone = pick(r, "nova", "az1", "az2")
	}
	if r.IntN(2) == 0 {
		g := &Group{Policy: pick(r, "affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"), Members: map[string]int{}, MaxServerPerHost: r.IntN(3)}
		for k := r.IntN(6); k > 0; k-- {
			g.Members[pick(r, hosts...)] += 1 + r.IntN(2)
		}
		req.Group = g
	}
	if r.IntN(4) == 0 {
		req.SameHost = []string{pick(r, hosts...), pick(r, hosts...)}
	}
	if r.IntN(4) == 0 {
		req.DifferentHost = []string{pick(r, hosts...)}
	}
	if r.IntN(4) == 0 {
		req.IgnoreHosts = []string{pick(r, hosts...)}
	}
	return req
}

// fastPass runs the decision's filter pass and ranking on the dense rows,
// as Select does before its claims: the candidates (filter pass only), the
// rejections per filter, and the ranked hosts with their weights.
func fastPass(t *testing.T, s *Scheduler, req *Request) (cands []string, rejected map[string]int, top []ranked, hosts []*HostState) {
	t.Helper()
	v := s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.refreshLocked(context.Background()); err != nil {
		t.Fatal(err)
	}
	hosts = v.snapshot()
	s.prepareMetrics(req)
	req.prepare(s.clock.Now())
	v.dense.refreshMetrics(hosts, req.now)
	active := s.activeFilters(req)
	fast, _ := s.weighPlan(req)
	idx, rejected := s.filter(hosts, req, active, fast)
	for _, i := range idx {
		cands = append(cands, hosts[i].Name)
	}
	top, _ = s.rank(hosts, req, active)
	return cands, rejected, top, hosts
}

// TestFastPathAgreesWithExplain holds the fast path to Explain for every
// row of the registry on its own: for a filter, the same candidates and
// the same rejection counts; for a weigher (alone, at several multipliers,
// sometimes overridden per host by aggregates), the same hosts in the same
// order with the same weights, over few hosts (every candidate weighed)
// and many (the ranked walk).
func TestFastPathAgreesWithExplain(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, r *rand.Rand, cfg Config) {
		t.Helper()
		n := pick(r, 30, rankedMin+200)
		v := randomView(r, n)
		s, err := New(cfg, v, clock.NewVirtual(agreeNow), rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("h%04d", i)
		}
		req := randomRequest(r, names)
		exp, err := s.Explain(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var wantCands []string
		wantRej := map[string]int{}
		ranks := make([]HostExplanation, exp.Candidates)
		for _, h := range exp.Hosts {
			if h.RejectedBy == "" {
				wantCands = append(wantCands, h.Host)
				ranks[h.Rank-1] = h
			} else {
				wantRej[h.RejectedBy]++
			}
		}
		cands, rej, top, hosts := fastPass(t, s, req)
		if !slices.Equal(cands, wantCands) {
			t.Fatalf("%d hosts, request %+v: the filter pass keeps %d hosts, Explain %d\nfast:    %v\nExplain: %v", n, req, len(cands), len(wantCands), cands, wantCands)
		}
		if fmt.Sprint(rej) != fmt.Sprint(wantRej) {
			t.Fatalf("request %+v: the filter pass rejects %v, Explain %v", req, rej, wantRej)
		}
		if len(top) != min(len(ranks), cfg.HostSubsetSize+cfg.MaxAttempts) {
			t.Fatalf("ranked %d hosts, want %d", len(top), min(len(ranks), cfg.HostSubsetSize+cfg.MaxAttempts))
		}
		for k, c := range top {
			if got, want := hosts[c.idx].Name, ranks[k].Host; got != want || c.weight != ranks[k].Weight {
				t.Fatalf("%d hosts, rank %d: fast path %s (%v), Explain %s (%v)", n, k+1, got, c.weight, want, ranks[k].Weight)
			}
		}
	}
	for i := range filterTable {
		f := &filterTable[i]
		t.Run(f.Name, func(t *testing.T) {
			for trial := 0; trial < 24; trial++ {
				r := rand.New(rand.NewPCG(uint64(i), uint64(trial)))
				cfg := DefaultConfig()
				cfg.EnabledFilters = []string{f.Name}
				for _, o := range f.Options {
					cfg.Options[o.Name] = pick(r, o.Default, o.Default/2)
				}
				check(t, r, cfg)
			}
		})
	}
	for i := range weigherTable {
		w := &weigherTable[i]
		t.Run(w.Name, func(t *testing.T) {
			for trial := 0; trial < 24; trial++ {
				r := rand.New(rand.NewPCG(uint64(100+i), uint64(trial)))
				cfg := DefaultConfig()
				cfg.EnabledFilters = nil
				cfg.Weighers = []string{w.Name}
				m := pick(r, 1.0, 2.5, w.Multiplier.Default)
				if !w.Multiplier.HasMin {
					m = pick(r, m, -m)
				}
				cfg.Options[w.Multiplier.Name] = m
				check(t, r, cfg)
			}
		})
	}
}

// TestExplainReplaysThePick: Explain, given a decision's PickSeed, names
// the host that decision claimed first; a seed given to Select makes the
// same pick again.
func TestExplainReplaysThePick(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 5))
	v := randomView(r, 60)
	cfg := DefaultConfig()
	cfg.HostSubsetSize = 5
	s, err := New(cfg, v, clock.NewVirtual(agreeNow), rand.New(rand.NewPCG(9, 9)))
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(tried *[]string) ClaimFunc {
		return func(_ context.Context, c Candidate) (int64, error) {
			*tried = append(*tried, c.Host)
			return 0, &placement.ConflictError{Kind: placement.ProviderGeneration}
		}
	}
	picked := map[string]bool{}
	for trial := 0; trial < 40; trial++ {
		req := &Request{Resources: placement.Resources{placement.VCPU: 1, placement.MemoryMB: 512}}
		var tried []string
		sel, err := s.Select(ctx, req, refuse(&tried))
		if !IsNoValidHost(err) || len(tried) == 0 {
			t.Fatalf("want NoValidHost after refused claims, got %v (tried %v)", err, tried)
		}
		if sel.PickSeed == 0 {
			t.Fatal("Select reported no pick seed with host_subset_size 5")
		}
		req.PickSeed = sel.PickSeed
		exp, err := s.Explain(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if exp.Picked != tried[0] {
			t.Fatalf("seed %d: Select claimed %s first, Explain picks %s", sel.PickSeed, tried[0], exp.Picked)
		}
		var again []string
		sel2, _ := s.Select(ctx, req, refuse(&again))
		if sel2.PickSeed != sel.PickSeed || !slices.Equal(again, tried) {
			t.Fatalf("seed %d given: tried %v, first time %v", sel.PickSeed, again, tried)
		}
		picked[tried[0]] = true
	}
	if len(picked) < 3 {
		t.Fatalf("40 picks among the best 5 took only %v", picked)
	}
}

// TestPickIndexIsIntN: drawing the seed from the scheduler's source and
// picking with pickIndex makes the same choices as IntN on that source.
func TestPickIndexIsIntN(t *testing.T) {
	a, b := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100_000; i++ {
		n := 1 + i%12
		if got, want := pickIndex(a.Uint64(), n), b.IntN(n); got != want {
			t.Fatalf("draw %d, subset %d: pickIndex %d, IntN %d", i, n, got, want)
		}
	}
}

// TestRegistryDerivations checks what is derived from the tables: the
// known names, Config's defaults and checks.
func TestRegistryDerivations(t *testing.T) {
	d := DefaultConfig()
	if len(d.Options) != len(WeigherOptions())+len(FilterOptions()) {
		t.Fatalf("DefaultConfig has %d options, the registry %d", len(d.Options), len(WeigherOptions())+len(FilterOptions()))
	}
	for _, o := range append(WeigherOptions(), FilterOptions()...) {
		if d.Options[o.Name] != o.Default || d.Option(o.Name) != o.Default {
			t.Errorf("%s: default %v, DefaultConfig %v", o.Name, o.Default, d.Options[o.Name])
		}
		if o.Help == "" {
			t.Errorf("%s has no help text", o.Name)
		}
	}
	if want := []string{"ComputeFilter", "AvailabilityZoneFilter", "ComputeCapabilitiesFilter",
		"ImagePropertiesFilter", "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter"}; !slices.Equal(d.EnabledFilters, want) {
		t.Errorf("default filters %v, want %v", d.EnabledFilters, want)
	}
	for _, tc := range []struct {
		name string
		v    float64
		want string
	}{
		{"max_io_ops_per_host", 2.5, "whole number"},
		{"max_instances_per_host", 0, "at least 1"},
		{"soft_affinity_weight_multiplier", -1, "at least 0"},
		{"ram_weight_multiplier", -1e300, ""},
		{"no_such_weight_multiplier", 1, "unknown scheduler option"},
	} {
		c := DefaultConfig()
		c.Options[tc.name] = tc.v
		err := c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s = %v: Validate() = %v, want %q", tc.name, tc.v, err, tc.want)
		}
	}
}

var updateTable = flag.Bool("update-table", false, "rewrite docs/configuration.md's table of filters and weighers")

// TestDocsTableIsCurrent keeps the table of filters and weighers in
// docs/configuration.md equal to WriteTable's. Regenerate it with
// `go test ./internal/scheduler -run TestDocsTableIsCurrent -update-table`.
func TestDocsTableIsCurrent(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "configuration.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- scheduler registry: begin -->\n", "<!-- scheduler registry: end -->\n"
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("docs/configuration.md lacks the %q … %q markers", strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	var b bytes.Buffer
	if err := WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if got := doc[i+len(begin) : j]; !bytes.Equal(got, b.Bytes()) {
		if !*updateTable {
			t.Fatal("docs/configuration.md's table of filters and weighers is out of date: run `go test ./internal/scheduler -run TestDocsTableIsCurrent -update-table`")
		}
		out := append(append(append([]byte(nil), doc[:i+len(begin)]...), b.Bytes()...), doc[j:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
