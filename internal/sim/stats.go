package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// stats accumulates one policy's run.
type stats struct {
	migrations       int
	failedMigrations int
	migrationErrors  map[string]int
	destinations     map[string]int
	decisions        int
	staleDecisions   int
	conflicts        int
	noValidHost      int
	boots            int
	failedBoots      int
	deletes          int
	audits           int
	driftFound       int
	auditsWithDrift  int
}

func newStats() *stats {
	return &stats{destinations: map[string]int{}, migrationErrors: map[string]int{}}
}

// hooks observes the conductor's decisions and outcomes.
func (w *world) hooks() conductor.Hooks {
	return conductor.Hooks{
		Decision: func(kind string, inst records.Instance, sel scheduler.Selection, err error) {
			st := w.stats
			st.decisions++
			st.conflicts += sel.Conflicts
			if err != nil {
				if scheduler.IsNoValidHost(err) {
					st.noValidHost++
				}
				return
			}
			if w.stale(sel, w.claimedOn(inst, sel)) {
				st.staleDecisions++
			}
		},
		MigrationDone: func(m records.Migration) {
			if m.Status == records.MigrationCompleted {
				w.stats.destinations[m.DestHost]++
			} else {
				w.stats.failedMigrations++
				w.stats.migrationErrors[string(m.Status)]++
			}
			w.migrationEnded(m)
		},
		BuildDone: func(inst records.Instance) {
			if inst.VMState == records.VMActive {
				w.active.add(inst.UUID)
			} else {
				w.stats.failedBoots++
			}
		},
	}
}

// stale reports whether the weighers saw a usage for the chosen host other
// than its true usage (its allocations in the store, before this claim).
func (w *world) stale(sel scheduler.Selection, claimed placement.Resources) bool {
	sums, err := w.store.ProviderSummaries(context.Background(), w.treeOf(sel))
	if err != nil || len(sums) == 0 {
		return false
	}
	truth := placement.Resources{}
	for _, s := range sums {
		truth.Add(s.Usage)
	}
	truth = truth.Sub(claimed)
	for _, rc := range []placement.ResourceClass{placement.VCPU, placement.MemoryMB, placement.DiskGB} {
		if sel.ViewUsed[rc] != truth[rc] {
			return true
		}
	}
	return false
}

// Final is the state of the hosts enabled at the end of a run, from their
// allocations. Every figure is over hosts, each host's tree summed (its
// child providers are part of it; sharing pools are no host's), as the
// web view counts them.
type Final struct {
	VCPUCV         float64 `json:"vcpu_cv"`
	RAMCV          float64 `json:"ram_cv"`
	RAMMaxOverMean float64 `json:"ram_max_over_mean"`
	// RAMUsedMB is each enabled host's RAM in use at the end.
	RAMUsedMB map[string]int64 `json:"ram_used_mb"`
	// Measured is the enabled hosts' measured CPU at the end, when the
	// scenario has [metrics].
	Measured *MeasuredFinal `json:"measured,omitempty"`
}

// MeasuredFinal is what MetricsWeigher balances, measured at the end of a
// run by each enabled host's driver (its guests' workload models at that
// time; not the record the weigher last read).
type MeasuredFinal struct {
	// CPUCV is σ/μ of the hosts' cpu.percent.
	CPUCV float64 `json:"cpu_percent_cv"`
	// CPUMaxOverMean is the busiest host's cpu.percent over the mean.
	CPUMaxOverMean float64 `json:"cpu_percent_max_over_mean"`
	// CPUPercent is each enabled host's cpu.percent (a fraction).
	CPUPercent map[string]float64 `json:"cpu_percent"`
}

func (w *world) final(ctx context.Context) (Final, error) {
	sums, err := w.store.ProviderSummaries(ctx, nil)
	if err != nil {
		return Final{}, err
	}
	f := Final{RAMUsedMB: map[string]int64{}}
	var cpu, ram []float64
	for _, h := range store.HostTrees(sums) {
		name := h.Root.Name
		if w.disabled[name] {
			continue
		}
		cpu = append(cpu, float64(h.Used[placement.VCPU]))
		ram = append(ram, float64(h.Used[placement.MemoryMB]))
		f.RAMUsedMB[name] = h.Used[placement.MemoryMB]
	}
	f.VCPUCV, _ = cv(cpu)
	var mean float64
	f.RAMCV, mean = cv(ram)
	if mean > 0 {
		f.RAMMaxOverMean = maxOf(ram) / mean
	}
	if w.sc.Metrics.Enabled() {
		if f.Measured, err = w.measuredFinal(ctx); err != nil {
			return Final{}, err
		}
	}
	return f, nil
}

// measuredFinal measures every enabled host's CPU now with its driver.
func (w *world) measuredFinal(ctx context.Context) (*MeasuredFinal, error) {
	out := &MeasuredFinal{CPUPercent: map[string]float64{}}
	var cpu []float64
	for _, h := range w.hosts {
		if w.disabled[h.Name] {
			continue
		}
		a := w.agents[h.Name]
		if a == nil {
			continue
		}
		ms, ok := a.Driver().(compute.Measurer)
		if !ok {
			continue
		}
		m, err := ms.Measure(ctx)
		if errors.Is(err, compute.ErrUnmeasured) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("measuring %s at the end: %w", h.Name, err)
		}
		for _, x := range m.Host {
			if x.Name == records.MetricCPUPercent {
				out.CPUPercent[h.Name] = x.Value
				cpu = append(cpu, x.Value)
			}
		}
	}
	var mean float64
	out.CPUCV, mean = cv(cpu)
	if mean > 0 {
		out.CPUMaxOverMean = maxOf(cpu) / mean
	}
	return out, nil
}

// cv returns σ/μ (population σ) and μ; 0 when μ is 0.
func cv(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	if mean == 0 {
		return 0, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss/float64(len(xs))) / mean, mean
}

func maxOf(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}

// initiallyBest returns the host_subset_size best-weighed hosts at t=0 for
// a request of the first flavor.
func (w *world) initiallyBest(ctx context.Context) ([]string, error) {
	req := &scheduler.Request{}
	if len(w.sc.Flavors) > 0 {
		req.Resources = w.flavors[w.sc.Flavors[0].Name].Resources()
	}
	exp, err := w.sched.Explain(ctx, req)
	if err != nil {
		return nil, err
	}
	type ranked struct {
		host string
		rank int
	}
	var rs []ranked
	for _, h := range exp.Hosts {
		if h.Rank > 0 && h.Rank <= w.sc.Scheduler.HostSubsetSize {
			rs = append(rs, ranked{h.Host, h.Rank})
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].rank < rs[j].rank })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.host
	}
	return out, nil
}
