package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/conductor"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/sim/scenario"
	"keel/internal/store/memory"
)

// world is one policy's simulated cloud.
type world struct {
	sc       *scenario.Scenario
	policy   scheduler.Policy
	clock    *clock.Virtual
	store    *memory.Store
	sched    *scheduler.Scheduler
	cond     *conductor.Conductor
	agents   map[string]*compute.Manager
	trackers map[string]*compute.Tracker
	drivers  map[string]*fake.Driver
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

// agents adapts the map of managers to the conductor's and agents' lookup
// interfaces (in-process RPC).
type agentMap map[string]*compute.Manager

func (a agentMap) Compute(host string) (conductor.ComputeAPI, error) {
	m, ok := a[host]
	if !ok {
		return nil, fmt.Errorf("no agent for host %q", host)
	}
	return m, nil
}

func (a agentMap) Peer(host string) (compute.Peer, error) {
	m, ok := a[host]
	if !ok {
		return nil, fmt.Errorf("no agent for host %q", host)
	}
	return m, nil
}

// id is the next instance or migration UUID: a counter in the last group
// (00000000-0000-4000-8000-000000000001, …), so creation order is UUID
// order.
func (w *world) id() string {
	w.nextID++
	var b [36]byte
	copy(b[:], "00000000-0000-4000-8000-000000000000")
	n := w.nextID
	for i := len(b) - 1; i >= len(b)-12 && n > 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if n > 0 { // past 12 digits: as %012d would, widen
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", w.nextID)
	}
	return string(b[:])
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

// build creates the world at t=0: hosts, their initial instances with
// exact allocations and records, the scheduler and the conductor.
func build(ctx context.Context, sc *scenario.Scenario, policy scheduler.Policy) (*world, error) {
	clk := clock.NewVirtual(clock.Epoch)
	w := &world{
		sc: sc, policy: policy, clock: clk, store: memory.New(),
		agents: map[string]*compute.Manager{}, drivers: map[string]*fake.Driver{}, trackers: map[string]*compute.Tracker{},
		hosts: sc.Hosts(), flavors: map[string]records.Flavor{},
		rnd:   rand.New(rand.NewPCG(uint64(sc.Seed), 1)),
		stats: newStats(), active: newInstanceSet(), disabled: map[string]bool{},
	}
	for _, f := range sc.Flavors {
		w.flavors[f.Name] = records.Flavor{ID: f.Name, Name: f.Name, VCPUs: f.VCPUs, RAMMB: f.RAMMB, DiskGB: f.DiskGB, ExtraSpecs: f.ExtraSpecs}
	}
	quiet := slog.New(slog.DiscardHandler)
	agents := agentMap(w.agents)
	// The hosts' own custom traits exist before their providers do
	// (buildTrees creates the rest, and these again, harmlessly).
	for _, g := range sc.HostGroups {
		for _, t := range g.Traits {
			if !placement.IsStandardTrait(t) {
				if _, err := w.store.CreateTrait(ctx, t); err != nil {
					return nil, fmt.Errorf("creating trait %s: %w", t, err)
				}
			}
		}
	}

	for _, h := range w.hosts {
		cfg := compute.HostConfig{
			Host: h.Name, ProviderUUID: "rp-" + h.Name,
			VCPUs: h.VCPUs, MemoryMB: h.MemoryMB, LocalGB: h.DiskGB,
			CPUAllocationRatio: h.CPUAllocationRatio, RAMAllocationRatio: h.RAMAllocationRatio, DiskAllocationRatio: h.DiskAllocationRatio,
			ReservedHostMemoryMB: h.ReservedMemoryMB, ReservedHostDiskMB: h.ReservedDiskMB,
			WriteDestRecord: policy != scheduler.PolicyLegacy,
		}
		svc := records.Service{Zone: h.Zone, Disabled: h.Disabled, LastSeenUp: clk.Now()}
		if _, err := compute.RegisterHost(ctx, w.store, cfg, svc, func() string { return cfg.ProviderUUID }); err != nil {
			return nil, fmt.Errorf("creating host %s: %w", h.Name, err)
		}
		if len(h.Traits) > 0 {
			p, err := w.store.GetProvider(ctx, cfg.ProviderUUID)
			if err == nil {
				_, err = w.store.SetProviderTraits(ctx, cfg.ProviderUUID, p.Generation, h.Traits)
			}
			if err != nil {
				return nil, fmt.Errorf("setting the traits of host %s: %w", h.Name, err)
			}
		}
		w.disabled[h.Name] = h.Disabled
		physical := h.MemoryMB // a host overcommitting RAM relies on swap; do not cap it
		if h.RAMAllocationRatio > 1 {
			physical = 0
		}
		drv, err := fake.New(fake.Config{Clock: clk, BandwidthMiBps: sc.Compute.MigrationBandwidthMiBps, SpawnTime: secs(sc.Compute.SpawnSeconds), MemoryMB: physical})
		if err != nil {
			return nil, err
		}
		w.drivers[h.Name] = drv
		w.trackers[h.Name] = compute.NewTracker(cfg, w.store, drv, clk)
	}
	if err := w.buildTrees(ctx); err != nil {
		return nil, err
	}
	for _, a := range sc.Aggregates {
		if _, err := w.store.CreateAggregate(ctx, records.Aggregate{Name: a.Name, Hosts: a.Hosts, Metadata: a.Metadata, CreatedAt: clk.Now()}); err != nil {
			return nil, fmt.Errorf("creating aggregate %s: %w", a.Name, err)
		}
	}
	if err := w.seedInstances(ctx); err != nil {
		return nil, err
	}

	view, err := scheduler.NewView(ctx, w.store, policy)
	if err != nil {
		return nil, err
	}
	w.sched, err = scheduler.New(schedulerConfig(sc.Scheduler), view, clk, rand.New(rand.NewPCG(uint64(sc.Seed), 2)))
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	w.cond = conductor.New(conductor.Config{
		MaxConcurrentLiveMigrations: sc.Compute.MaxConcurrentLiveMigrations,
		MaxAttempts:                 sc.Scheduler.MaxAttempts,
		NewID:                       w.id,
	}, w.store, w.sched, agents, clk, quiet, w.hooks())
	// The agents report to the conductor, which reaches them through the
	// same map.
	for _, h := range w.hosts {
		w.agents[h.Name] = compute.NewManager(h.Name, w.drivers[h.Name], w.trackers[h.Name], agents, w.cond, clk, quiet)
	}
	return w, nil
}

// seedInstances creates each host's initial instances — records, exact
// allocations, running guests, tracked usage — and writes every host
// record, as if every audit had just run at t=0.
func (w *world) seedInstances(ctx context.Context) error {
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
	for _, h := range w.hosts {
		tracker := w.trackers[h.Name]
		drv := w.drivers[h.Name]
		names := roundRobin(w.sc.Flavors, h.Instances)
		writes := make([]placement.AllocationWrite, 0, len(names)+len(own[h.Name]))
		for k := range len(names) + len(own[h.Name]) {
			var fname, name string
			var spec scenario.Instance
			if k < len(names) {
				fname = names[k]
			} else {
				spec = own[h.Name][k-len(names)]
				fname, name = spec.Flavor, spec.Name
			}
			f := w.flavors[fname]
			uuid := w.id()
			if name == "" {
				name = h.Name + "-" + fname + "-" + strconv.Itoa(w.nextID)
			}
			inst := records.Instance{UUID: uuid, Name: name, Host: h.Name, Zone: h.Zone, RequestedZone: spec.Zone,
				Flavor: f, VMState: records.VMActive, CreatedAt: now, UpdatedAt: now}
			if g := groups[spec.Group]; g != nil {
				inst.Hints = &records.SchedulerHints{Group: g.UUID}
				g.Members = append(g.Members, uuid)
				g.Placements++
			}
			if _, err := w.store.CreateInstance(ctx, inst); err != nil {
				return err
			}
			writes = append(writes, placement.AllocationWrite{ConsumerUUID: inst.UUID, Type: placement.ConsumerInstance,
				Allocations: map[string]placement.Resources{"rp-" + h.Name: f.Resources()}})
			drv.AddGuest(compute.Guest{UUID: inst.UUID, Name: inst.Name, Flavor: f, State: compute.GuestRunning})
			tracker.Track(inst.UUID, f)
			w.active.add(inst.UUID)
		}
		// One write per host: the same allocations, planned once.
		if _, err := w.store.WriteAllocations(ctx, writes...); err != nil {
			return fmt.Errorf("initial instances of %s: %w", h.Name, err)
		}
		if err := tracker.WriteRecord(ctx); err != nil {
			return err
		}
	}
	for _, g := range w.sc.ServerGroups {
		if _, err := w.store.CreateServerGroup(ctx, *groups[g.Name]); err != nil {
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
