package sim

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/compute/workload"
	"keel/internal/conductor"
	"keel/internal/inproc"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/sim/scenario"
	"keel/internal/store/memory"
)

// world is one policy's simulated cloud: the in-process cloud (package
// inproc) the scenario describes, and the run's own state.
type world struct {
	sc       *scenario.Scenario
	policy   scheduler.Policy
	clock    *clock.Virtual
	store    *memory.Store
	sched    *scheduler.Scheduler
	cond     *conductor.Conductor
	agents   inproc.Agents
	hosts    []scenario.HostSpec
	flavors  map[string]records.Flavor
	rnd      *rand.Rand // workload choices
	nextID   int
	stats    *stats
	active   *instanceSet // ACTIVE instances, for random picks
	disabled map[string]bool
	drains   []*drainRun
	// rebalance is the run's rebalance, if asked (rebalance.go).
	rebalance *rebalanceRun
	beats     *heartbeats
}

var clockEpoch = clock.Epoch

// id is the next instance or migration UUID: a counter in the last group
// (00000000-0000-4000-8000-000000000001, …), so creation order is UUID
// order.
func (w *world) id() string {
	w.nextID++
	return inproc.UUID(int64(w.nextID))
}

// secs converts seconds to a Duration, saturating instead of wrapping (a
// scenario's times are bounded by validation; a Poisson draw or 1/rate may
// still be huge).
func secs(s float64) time.Duration {
	ns := s * float64(time.Second)
	switch {
	case !(ns > 0): // also NaN
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// schedulerConfig maps the scenario's options onto Nova's defaults.
func schedulerConfig(s scenario.Scheduler) scheduler.Config {
	cfg := scheduler.DefaultConfig()
	if len(s.EnabledFilters) > 0 {
		cfg.EnabledFilters = s.EnabledFilters
	}
	if len(s.Weighers) > 0 {
		cfg.Weighers = s.Weighers
	}
	cfg.HostSubsetSize = s.HostSubsetSize
	cfg.ShuffleBestSameWeighedHosts = s.ShuffleBestSameWeighedHosts
	cfg.MaxAttempts = s.MaxAttempts
	for name, v := range s.Options { // the registry's names, checked by the scenario's parser
		cfg.Options[name] = v
	}
	// The simulated hosts heartbeat on the virtual clock (heartbeats.go).
	cfg.ServiceDownTime = secs(scenario.DefaultServiceDownTime)
	if s.ServiceDownTime != nil {
		cfg.ServiceDownTime = secs(*s.ServiceDownTime)
	}
	return cfg
}

// metricsConfig maps the scenario's [metrics] onto MetricsWeigher's
// options: max_age only under the claim policy (Nova weighs any age).
func metricsConfig(m scenario.Metrics, policy scheduler.Policy) scheduler.MetricsConfig {
	mc := scheduler.DefaultMetricsConfig()
	mc.WeightSetting, _ = scheduler.ParseWeightSetting(m.WeightSetting) // checked by the loader
	if m.Required != nil {
		mc.Required = *m.Required
	}
	if m.WeightOfUnavailable != nil {
		mc.WeightOfUnavailable = *m.WeightOfUnavailable
	}
	if m.MaxAge != nil {
		mc.MaxAge = secs(*m.MaxAge)
	}
	if policy != scheduler.PolicyClaim {
		mc.MaxAge = 0
	}
	return mc
}

// startMetrics starts the agents' measured-usage reports for the policy
// (scenario.Metrics): every host measured at t=0, then legacy at each
// audit, dest-update also after each move, claim every report_interval.
func (w *world) startMetrics(ctx context.Context) error {
	if !w.sc.Metrics.Enabled() {
		return nil
	}
	mc := compute.MetricsConfig{Interval: -1, AtAudit: true}
	switch w.policy {
	case scheduler.PolicyDestUpdate:
		mc.AfterMove = true
	case scheduler.PolicyClaim:
		mc.Interval = 10 * time.Second
		if v := w.sc.Metrics.ReportInterval; v != nil {
			mc.Interval = secs(*v)
		}
		mc.Sample = mc.Interval // the workloads change on the report's scale
	}
	for _, h := range w.hosts {
		a := w.agents[h.Name]
		a.SetMetricsConfig(mc)
		if _, err := a.ReportMetrics(ctx, true); err != nil {
			return fmt.Errorf("measuring %s at t=0: %w", h.Name, err)
		}
		if mc.Interval > 0 {
			a.StartMetrics(ctx)
		}
	}
	return nil
}

// build creates the world at t=0 on the in-process cloud (package
// inproc): hosts, their trees, the aggregates, their initial instances
// with exact allocations and records, the scheduler and the conductor.
func build(ctx context.Context, sc *scenario.Scenario, policy scheduler.Policy) (*world, error) {
	clk := clock.NewVirtual(clock.Epoch)
	w := &world{
		sc: sc, policy: policy, clock: clk,
		hosts: sc.Hosts(), flavors: map[string]records.Flavor{},
		rnd:   rand.New(rand.NewPCG(uint64(sc.Seed), 1)),
		stats: newStats(), active: newInstanceSet(), disabled: map[string]bool{},
	}
	for _, f := range sc.Flavors {
		specs := f.ExtraSpecs
		if f.Workload != "" {
			specs = maps.Clone(specs)
			if specs == nil {
				specs = map[string]string{}
			}
			specs[workload.Key] = f.Workload
		}
		w.flavors[f.Name] = records.Flavor{ID: f.Name, Name: f.Name, VCPUs: f.VCPUs, RAMMB: f.RAMMB, DiskGB: f.DiskGB, ExtraSpecs: specs}
	}
	scfg := schedulerConfig(sc.Scheduler)
	scfg.Metrics = metricsConfig(sc.Metrics, policy)
	spec := inproc.Spec{
		Policy: policy, Scheduler: &scfg, SchedulerSeeds: [2]uint64{uint64(sc.Seed), 2},
		Conductor: conductor.Config{
			MaxConcurrentLiveMigrations: sc.Compute.MaxConcurrentLiveMigrations,
			MaxAttempts:                 sc.Scheduler.MaxAttempts,
		},
		Hooks: w.hooks(), Clock: clk, NewID: w.id, Populate: w.seedInstances,
	}
	for _, h := range w.hosts {
		cfg := compute.HostConfig{
			Host: h.Name, ProviderUUID: "rp-" + h.Name,
			VCPUs: h.VCPUs, MemoryMB: h.MemoryMB, LocalGB: h.DiskGB,
			CPUAllocationRatio: h.CPUAllocationRatio, RAMAllocationRatio: h.RAMAllocationRatio, DiskAllocationRatio: h.DiskAllocationRatio,
			ReservedHostMemoryMB: h.ReservedMemoryMB, ReservedHostDiskMB: h.ReservedDiskMB,
			WriteDestRecord: policy != scheduler.PolicyLegacy,
		}
		physical := h.MemoryMB // a host overcommitting RAM relies on swap; do not cap it
		if h.RAMAllocationRatio > 1 {
			physical = 0
		}
		spec.Hosts = append(spec.Hosts, inproc.Host{
			Config: cfg, Service: records.Service{Zone: h.Zone, Disabled: h.Disabled}, Traits: h.Traits,
			Driver: fake.Config{BandwidthMiBps: sc.Compute.MigrationBandwidthMiBps, SpawnTime: secs(sc.Compute.SpawnSeconds), MemoryMB: physical,
				Workload: sc.Metrics.Workload, WorkloadSeed: uint64(sc.Seed)},
		})
		w.disabled[h.Name] = h.Disabled
	}
	w.treeSpec(&spec)
	for _, a := range sc.Aggregates {
		spec.Aggregates = append(spec.Aggregates, records.Aggregate{Name: a.Name, Hosts: a.Hosts, Metadata: a.Metadata})
	}
	cloud, err := inproc.New(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	w.store, w.sched, w.cond, w.agents = cloud.Store, cloud.Sched, cloud.Cond, cloud.Agents
	return w, nil
}

// seedInstances seeds each host's initial instances (inproc's Seed, one
// batch a host, every host's record written, as if every audit had just
// run at t=0) and creates the server groups with their members.
func (w *world) seedInstances(ctx context.Context, cloud *inproc.Cloud) error {
	now := w.clock.Now()
	// The one-by-one instances, by host, in file order; server groups
	// collect their members as they are created.
	own := map[string][]scenario.Instance{}
	for _, in := range w.sc.Instances {
		own[in.Host] = append(own[in.Host], in)
	}
	groups := make(map[string]*records.ServerGroup, len(w.sc.ServerGroups))
	for i, g := range w.sc.ServerGroups {
		groups[g.Name] = &records.ServerGroup{UUID: fmt.Sprintf("00000000-0000-4000-9000-%012d", i+1), Name: g.Name,
			Policy: g.Policy, MaxServerPerHost: g.MaxServerPerHost, CreatedAt: now}
	}
	var batch []records.Instance
	for _, h := range w.hosts {
		names := roundRobin(w.sc.Flavors, h.Instances)
		batch = batch[:0]
		for k := range len(names) + len(own[h.Name]) {
			var fname, name string
			var spec scenario.Instance
			if k < len(names) {
				fname = names[k]
			} else {
				spec = own[h.Name][k-len(names)]
				fname, name = spec.Flavor, spec.Name
			}
			uuid := w.id()
			if name == "" {
				name = h.Name + "-" + fname + "-" + strconv.Itoa(w.nextID)
			}
			inst := records.Instance{UUID: uuid, Name: name, Zone: h.Zone, RequestedZone: spec.Zone,
				Flavor: w.flavors[fname], CreatedAt: now, UpdatedAt: now}
			if g := groups[spec.Group]; g != nil {
				inst.Hints = &records.SchedulerHints{Group: g.UUID}
				g.Members = append(g.Members, uuid)
				g.Placements++
			}
			batch = append(batch, inst)
			w.active.add(uuid)
		}
		if err := cloud.Seed(ctx, h.Name, batch); err != nil {
			return fmt.Errorf("initial instances of %s: %w", h.Name, err)
		}
	}
	for _, g := range w.sc.ServerGroups {
		if _, err := cloud.Backing.CreateServerGroup(ctx, *groups[g.Name]); err != nil {
			return fmt.Errorf("creating server group %s: %w", g.Name, err)
		}
	}
	return nil
}

// roundRobin lists flavor names in creation order: one of each flavor (in
// the scenario's flavor order) per round, until each count is reached.
func roundRobin(flavors []scenario.Flavor, counts map[string]int) []string {
	left := map[string]int{}
	total := 0
	for k, v := range counts {
		left[k] = v
		total += v
	}
	out := make([]string, 0, total)
	for len(out) < total {
		for _, f := range flavors {
			if left[f.Name] > 0 {
				out = append(out, f.Name)
				left[f.Name]--
			}
		}
	}
	return out
}

// instanceSet holds UUIDs with O(1) add, remove and random pick, in a
// deterministic order.
type instanceSet struct {
	list []string
	idx  map[string]int
}

func newInstanceSet() *instanceSet { return &instanceSet{idx: map[string]int{}} }

func (s *instanceSet) add(u string) {
	if _, ok := s.idx[u]; ok {
		return
	}
	s.idx[u] = len(s.list)
	s.list = append(s.list, u)
}

func (s *instanceSet) remove(u string) {
	i, ok := s.idx[u]
	if !ok {
		return
	}
	last := s.list[len(s.list)-1]
	s.list[i] = last
	s.idx[last] = i
	s.list = s.list[:len(s.list)-1]
	delete(s.idx, u)
}

func (s *instanceSet) pick(r *rand.Rand) (string, bool) {
	if len(s.list) == 0 {
		return "", false
	}
	return s.list[r.IntN(len(s.list))], true
}
