package sim

import (
	"context"
	"math"
	"sort"

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
	return f, nil
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
