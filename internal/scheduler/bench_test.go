package scheduler

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"keel/internal/placement"
	"keel/internal/records"
)

// BenchmarkDecision times one decision (refresh, default filters and
// weighers, selection, claim in the memory store) and reports p50 and p99
// besides the mean. Hosts get random, uncorrelated usage per class, the
// hard case for the ranked walk; "full-pass" forces weighing every
// candidate (as shuffle_best_same_weighed_hosts does).
func BenchmarkDecision(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) { benchDecision(b, n, false) })
	}
	// Apart, so that 'BenchmarkDecision$/^hosts=100000$' runs the ranked
	// walk alone (a full pass at 100,000 hosts takes 4 ms a decision).
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("full-pass/hosts=%d", n), func(b *testing.B) { benchDecision(b, n, true) })
	}
}

func benchDecision(b *testing.B, n int, fullPass bool) {
	benchDecisionWith(b, n, fullPass, false)
}

// BenchmarkDecisionMetrics is the cost of MetricsWeigher (issue 28): the
// same decision as BenchmarkDecision on the same hosts, each with a host
// record measured 0–100 % busy, without and with [metrics]
// weight_setting = cpu.percent=-1.0 (every weigher of Nova's default
// weight_classes runs in both; with no weight_setting MetricsWeigher
// weighs nothing). MetricsWeigher's value is a host's, kept in the dense
// rows and the ranked walk's orders like RAMWeigher's (each claim's
// assumed load re-syncs its host; nothing ages, the virtual clock does
// not move); its share of a decision is (with − without) ÷ with.
func BenchmarkDecisionMetrics(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("hosts=%d/without", n), func(b *testing.B) { benchDecisionWith(b, n, false, false) })
		b.Run(fmt.Sprintf("hosts=%d/with", n), func(b *testing.B) { benchDecisionWith(b, n, false, true) })
	}
}

// benchDecisionWith is BenchmarkDecision's decision; measured gives every
// host a measured record, and metrics weighs it (MetricsWeigher).
func benchDecisionWith(b *testing.B, n int, fullPass, metrics bool) {
	c := newCloud(b, 0)
	r := rand.New(rand.NewPCG(1, 2))
	now := c.clk.Now()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("h%06d", i)
		c.addHost(b, name)
		c.use(b, name, "init-"+name, placement.Resources{placement.VCPU: int64(r.IntN(30)) + 1, placement.MemoryMB: int64(r.IntN(60000)) + 1, placement.DiskGB: int64(r.IntN(900)) + 1})
		cpu := r.Float64()
		if err := c.st.PutHostRecord(context.Background(), records.HostRecord{Host: name, ProviderUUID: "rp-" + name, VCPUs: 32, MemoryMB: 131072,
			Metrics: []records.Metric{{Name: records.MetricCPUPercent, Value: cpu, Timestamp: now, Source: "bench"},
				{Name: records.MetricCPUIdlePercent, Value: 1 - cpu, Timestamp: now, Source: "bench"}}}); err != nil {
			b.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.HostSubsetSize = 3
	cfg.ShuffleBestSameWeighedHosts = fullPass
	if metrics {
		cfg.Metrics.WeightSetting = []MetricWeight{{Name: records.MetricCPUPercent, Ratio: -1}}
	}
	s := c.scheduler(b, cfg, PolicyClaim, 1)
	req := &Request{Resources: small()}
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	var claimed []string
	// Settle before timing: the first decision builds the view's dense
	// rows and orders (about 200 MB at 100,000 hosts), and the hosts'
	// setup leaves its garbage; a collection they start would run during
	// the timed decisions and be counted in their tail (at 100,000 hosts
	// one mark of the ~400 MB heap overlapped the 3,000 decisions). Every
	// collection during the timed decisions is reported (gcs).
	if _, err := s.Select(ctx, req, storeClaim(c.st, "warm", small())); err != nil {
		b.Fatal(err)
	}
	claimed = append(claimed, "warm")
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	cpu0 := processCPU(b)
	tr := newPhaseTrace(b.N, *traceCPU)
	if *traceCPU {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	s.OnPhase(tr.phase)
	for i := 0; i < b.N; i++ {
		consumer := fmt.Sprint("b", i)
		tr.start()
		_, err := s.Select(ctx, req, storeClaim(c.st, consumer, small()))
		if nv := (*NoValidHostError)(nil); errors.As(err, &nv) {
			// The cloud is full (b.N decisions of small on 1,000 hosts):
			// release this run's claims, untimed, and decide again.
			b.StopTimer()
			for _, u := range claimed {
				if _, err := c.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: u, AnyConsumerGeneration: true}); err != nil {
					b.Fatal(err)
				}
			}
			claimed = claimed[:0]
			b.StartTimer()
			tr.start()
			_, err = s.Select(ctx, req, storeClaim(c.st, consumer, small()))
		}
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, tr.end())
		claimed = append(claimed, consumer)
	}
	b.StopTimer()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(ms1.NumGC-ms0.NumGC), "gcs")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(b.N), "allocs/decision")
	// The process's CPU time per decision (the garbage collector's
	// included): unlike the wall time, it does not grow with the time the
	// decision waited for a CPU on a loaded machine.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds()), "p90-µs")
	// The share of decisions the ranked walk answered (the rest weighed
	// every candidate).
	b.ReportMetric(100*float64(s.walks)/float64(b.N), "walked-%")
	tr.report(b)
}

// phaseTrace times each decision's parts on the wall clock, through
// Scheduler.OnPhase: the view's refresh, the ranking (filters, weighers,
// pick), the claim (the store's write), its application to the view, and
// the rest (returning, unlocking).
type phaseTrace struct {
	now  func() time.Duration
	last time.Duration
	cur  [numTraceParts]time.Duration
	all  [][numTraceParts]time.Duration
}

// traceCPU has BenchmarkDecision time the parts on the thread's CPU clock
// rather than the wall clock (the benchmark's goroutine locked to its
// thread): the time the decision ran, without the time it waited for a
// CPU — on a shared machine, the decision's own tail.
var traceCPU = flag.Bool("decision.cpu", false, "time BenchmarkDecision's parts on the thread's CPU clock, not the wall clock")

// wallSince is the wall clock, as a duration since the trace's epoch.
func wallSince(epoch time.Time) func() time.Duration {
	return func() time.Duration { return time.Since(epoch) }
}

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(e)
	}
	return time.Duration(ts.Nano())
}

const numTraceParts = 5

var traceParts = [numTraceParts]string{"refresh", "rank", "claim", "apply", "rest"}

// newPhaseTrace traces n decisions; cpu: on the thread's CPU clock (the
// caller locks its goroutine to its thread).
func newPhaseTrace(n int, cpu bool) *phaseTrace {
	t := &phaseTrace{now: wallSince(time.Now()), all: make([][numTraceParts]time.Duration, 0, n)}
	if cpu {
		t.now = threadCPU
	}
	return t
}

func (t *phaseTrace) start() {
	t.cur = [numTraceParts]time.Duration{}
	t.last = t.now()
}

func (t *phaseTrace) phase(p Phase) {
	now := t.now()
	t.cur[p] += now - t.last
	t.last = now
}

// end closes the decision and returns its latency.
func (t *phaseTrace) end() time.Duration {
	t.phase(numTraceParts - 1)
	var total time.Duration
	for _, d := range t.cur {
		total += d
	}
	t.all = append(t.all, t.cur)
	return total
}

// tail returns, for the slowest 1 % of the decisions, the mean of each
// part, and for all of them each part's median.
func (t *phaseTrace) tail() (slow, median [numTraceParts]time.Duration, n int) {
	all := slices.Clone(t.all)
	sum := func(d [numTraceParts]time.Duration) (s time.Duration) {
		for _, x := range d {
			s += x
		}
		return s
	}
	slices.SortFunc(all, func(a, b [numTraceParts]time.Duration) int { return cmp.Compare(sum(b), sum(a)) })
	n = max(len(all)/100, 1)
	for _, d := range all[:n] {
		for p := range d {
			slow[p] += d[p] / time.Duration(n)
		}
	}
	col := make([]time.Duration, len(all))
	for p := range median {
		for i, d := range all {
			col[i] = d[p]
		}
		slices.Sort(col)
		median[p] = col[len(col)/2]
	}
	return slow, median, n
}

// report reports the slowest 1 %'s mean part (tail-PART-µs) and each
// part's median (PART-p50-µs), and logs the slowest ten decisions.
func (t *phaseTrace) report(b *testing.B) {
	slow, median, _ := t.tail()
	for p, name := range traceParts {
		b.ReportMetric(float64(slow[p].Nanoseconds())/1e3, "tail-"+name+"-µs")
		b.ReportMetric(float64(median[p].Nanoseconds())/1e3, name+"-p50-µs")
	}
	all := slices.Clone(t.all)
	slices.SortFunc(all, func(a, b [numTraceParts]time.Duration) int {
		return cmp.Compare(b[0]+b[1]+b[2]+b[3]+b[4], a[0]+a[1]+a[2]+a[3]+a[4])
	})
	for _, d := range all[:min(10, len(all))] {
		b.Logf("slow decision: refresh %v rank %v claim %v apply %v rest %v", d[0], d[1], d[2], d[3], d[4])
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecisionTrees sets one decision on provider trees beside the
// same decision on flat hosts, 1,000 hosts each: "flat" is keel's flat
// path; "flat/granular" the same hosts asked with a granular group (the
// candidate search, every host one provider); "trees" hosts whose VCPU
// and MEMORY_MB sit on two NUMA children, with a shared DISK_GB pool per
// 100 hosts (placement's candidate search for every decision, the claim
// across the tree), plain and with the group granular.
func BenchmarkDecisionTrees(b *testing.B) {
	const n = 1000
	granular := map[string]string{"resources1:VCPU": "1", "resources1:MEMORY_MB": "2048", "resources:VCPU": "0", "resources:MEMORY_MB": "0"}
	for _, bc := range []struct {
		name  string
		trees bool
		specs map[string]string
	}{
		{"flat", false, nil},
		{"flat/granular", false, granular},
		{"trees", true, nil},
		{"trees/granular", true, granular},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newCloud(b, 0)
			ctx := context.Background()
			for i := 0; i < n; i++ {
				name := fmt.Sprintf("h%06d", i)
				if !bc.trees {
					c.addHost(b, name)
					continue
				}
				root := "rp-" + name
				if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: root, Name: name}); err != nil {
					b.Fatal(err)
				}
				for _, cell := range []string{"numa0", "numa1"} {
					if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: root + "-" + cell, Name: name + "_" + cell, ParentUUID: root, Inventories: placement.Inventories{
						placement.VCPU: placement.NewInventory(64), placement.MemoryMB: placement.NewInventory(65536)}}); err != nil {
						b.Fatal(err)
					}
				}
				agg := fmt.Sprintf("agg-%d", i/100)
				if i%100 == 0 {
					pool := fmt.Sprintf("rp-pool-%d", i/100)
					if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: pool, Name: pool, Traits: []string{placement.SharesViaAggregate},
						Inventories: placement.Inventories{placement.DiskGB: placement.NewInventory(1000000)}}); err != nil {
						b.Fatal(err)
					}
					if _, err := c.st.SetProviderAggregates(ctx, pool, nil, []string{agg}); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := c.st.SetProviderAggregates(ctx, root, nil, []string{agg}); err != nil {
					b.Fatal(err)
				}
				c.addService(b, name)
			}
			cfg := DefaultConfig()
			cfg.HostSubsetSize = 3
			s := c.scheduler(b, cfg, PolicyClaim, 1)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				req := &Request{Resources: small(), ExtraSpecs: bc.specs}
				if _, err := s.Select(ctx, req, treeClaim(c.st, fmt.Sprint("b", i))); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
