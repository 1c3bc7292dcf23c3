// Package inproc is keel's control plane in one process: a store (memory
// by default), hosts registered as a keel agent registers itself
// (compute.RegisterHost) each with a fake driver, a resource tracker and
// an agent manager, a scheduler with its own view of the store, and the
// conductor, wired as a keel server wires them but with in-process calls
// for the bus. It is the one in-process cloud: the simulator
// (internal/sim) builds its worlds on it, and internal/cloudtest puts a
// test's face on it for the conductor's and the compute API's tests and
// the script tests.
//
// New builds a cloud from a plain Spec — host configurations, fake-driver
// configurations and service records, custom classes and traits,
// provider trees and sharing providers, host aggregates, the instances
// there at the start, the scheduler's policy, configuration and seeds,
// the conductor's configuration and hooks, a logger and an ID source —
// and returns errors rather than failing anything: nothing here imports
// the testing package, so the keel binary may link it.
//
// Time is the spec's clock (a virtual clock at clock.Epoch by default):
// on a virtual clock, a copy of 8 s is 8 s of virtual time, run in
// microseconds.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"keel/internal/bus"
	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/conductor"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// Spec describes a cloud. Only Hosts is needed; the rest has defaults.
type Spec struct {
	// Hosts are registered in this order.
	Hosts []Host
	// ResourceClasses and Traits are custom classes and traits created
	// once the hosts are registered (a host's own custom traits are
	// created before its provider, whether listed here or not).
	ResourceClasses []placement.ResourceClass
	Traits          []string
	// Shared are sharing providers, created after the classes and traits.
	Shared []Shared
	// Aggregates are host aggregates (records), created after the
	// providers.
	Aggregates []records.Aggregate
	// Populate, if set, runs once the hosts, their trees and the
	// aggregates exist and before the scheduler first reads the store: the
	// place to Seed the instances there from the start (and to write
	// whatever else the store should hold then, server groups, …). The
	// hosts it does not seed have their records written after it.
	Populate func(ctx context.Context, c *Cloud) error

	// Policy is what the scheduler's weighers read (default
	// scheduler.PolicyClaim). A host writes the destination's record after
	// a move only if its Config says so (WriteDestRecord).
	Policy scheduler.Policy
	// Scheduler is the scheduler's configuration (default: Nova's,
	// scheduler.DefaultConfig, with the liveness check off —
	// ServiceDownTime 0 — as nothing heartbeats unless the caller does).
	Scheduler *scheduler.Config
	// SchedulerSeeds seed the first scheduler's random source
	// (rand.NewPCG(SchedulerSeeds[0], SchedulerSeeds[1])).
	SchedulerSeeds [2]uint64
	// Conductor is the first conductor's configuration (NewID is filled
	// in from the spec's), Hooks its hooks.
	Conductor conductor.Config
	Hooks     conductor.Hooks

	// Clock is the cloud's clock (default: a virtual clock at
	// clock.Epoch).
	Clock clock.Clock
	// Log receives every component's log (default: discarded).
	Log *slog.Logger
	// NewID names instances and migrations (default: Cloud.NewID's
	// counter, UUID(1), UUID(2), …).
	NewID func() string
	// Store, if set, is the store everything uses instead of a new memory
	// store (Cloud.Store is then nil: read through Cloud.Backing).
	Store store.Store
	// ConductorStore, if set, wraps the store the conductors write through
	// (a test that checks or fails their writes); it is given Cloud.Store,
	// so it cannot be set with Store.
	ConductorStore func(*memory.Store) store.Store
}

// Host is one host of a Spec.
type Host struct {
	// Config is the host's configuration (name, provider UUID, sizes,
	// allocation ratios, reservations, WriteDestRecord).
	Config compute.HostConfig
	// Service is its nova-compute service record (Host and Binary are
	// filled in; LastSeenUp, if zero, is the clock's start).
	Service records.Service
	// Driver configures its fake driver (Clock is filled in).
	Driver fake.Config
	// Traits are its root provider's traits.
	Traits []string
	// Children are its child providers (ParentUUID, if empty, is the
	// host's provider), created after the sharing providers.
	Children []placement.Provider
	// Aggregates are its root provider's placement aggregates, set after
	// every child provider exists (hosts in name order).
	Aggregates []string
}

// Shared is a sharing provider and its placement aggregates.
type Shared struct {
	Provider   placement.Provider
	Aggregates []string
}

// Cloud is the in-process control plane.
type Cloud struct {
	Clock clock.Clock
	// Store is the memory store (nil when Spec.Store is set); Backing is
	// the store everything uses: Store, or Spec.Store.
	Store   *memory.Store
	Backing store.Store
	// Sched and Cond are the first scheduler and conductor.
	Sched    *scheduler.Scheduler
	Cond     *conductor.Conductor
	Agents   Agents
	Drivers  map[string]*fake.Driver
	Trackers map[string]*compute.Tracker
	// Hosts are the hosts' names, in the spec's order.
	Hosts []string

	// spec is the cloud's spec less what New alone reads (hosts, trees,
	// aggregates, Populate).
	spec      Spec
	providers map[string]string // host → provider UUID
	seeded    map[string]bool   // hosts whose record Seed wrote
	reports   Routed
	cut       sync.Map // host → true: the conductors' calls to it find no agent
	losing    sync.Map // host → method: the next such cast to host is lost
	lost      sync.Map // host → func() error: the cast lost last, to deliver late
	ids       atomic.Int64
}

// New builds a cloud: its hosts registered (provider, service), their
// trees, aggregates and initial instances written, every host record
// written, then the scheduler's view read and the conductor listening to
// the agents' reports.
func New(ctx context.Context, sp Spec) (*Cloud, error) {
	if sp.Log == nil {
		sp.Log = slog.New(slog.DiscardHandler)
	}
	if sp.Clock == nil {
		sp.Clock = clock.NewVirtual(clock.Epoch)
	}
	if sp.Policy == "" {
		sp.Policy = scheduler.PolicyClaim
	}
	if sp.Store != nil && sp.ConductorStore != nil {
		return nil, errors.New("inproc: ConductorStore wraps the memory store, and Store replaces it: give one or the other")
	}
	c := &Cloud{spec: sp, Clock: sp.Clock, Agents: make(Agents, len(sp.Hosts)),
		Drivers: make(map[string]*fake.Driver, len(sp.Hosts)), Trackers: make(map[string]*compute.Tracker, len(sp.Hosts)),
		providers: make(map[string]string, len(sp.Hosts)), seeded: make(map[string]bool, len(sp.Hosts))}
	if sp.Store != nil {
		c.Backing = sp.Store
	} else {
		c.Store = memory.New()
		c.Backing = c.Store
	}
	if c.spec.NewID == nil {
		c.spec.NewID = c.NewID
	}
	if err := c.register(ctx, sp.Hosts); err != nil {
		return nil, err
	}
	if err := c.buildTrees(ctx, sp); err != nil {
		return nil, err
	}
	for _, a := range sp.Aggregates {
		if a.CreatedAt.IsZero() {
			a.CreatedAt = c.Clock.Now()
		}
		if _, err := c.Backing.CreateAggregate(ctx, a); err != nil {
			return nil, fmt.Errorf("creating aggregate %s: %w", a.Name, err)
		}
	}
	if sp.Populate != nil {
		if err := sp.Populate(ctx, c); err != nil {
			return nil, err
		}
	}
	for _, h := range c.Hosts {
		if c.seeded[h] {
			continue
		}
		if err := c.Trackers[h].WriteRecord(ctx); err != nil {
			return nil, fmt.Errorf("the record of %s: %w", h, err)
		}
	}
	// What only New reads is not kept (a large world's hosts).
	c.spec.Hosts, c.spec.ResourceClasses, c.spec.Traits, c.spec.Shared, c.spec.Aggregates, c.spec.Populate = nil, nil, nil, nil, nil, nil
	c.seeded = nil
	sched, err := c.NewScheduler(ctx, sp.SchedulerSeeds)
	if err != nil {
		return nil, err
	}
	c.Sched = sched
	c.Cond = c.newConductor(sp.Conductor, sched, sp.Hooks)
	c.reports.Route(c.Cond)
	for _, h := range c.Hosts {
		c.Agents[h] = compute.NewManager(h, c.Drivers[h], c.Trackers[h], c.Agents, &c.reports, c.Clock, sp.Log)
	}
	return c, nil
}

// register creates the hosts' own custom traits, then registers each host
// (provider with its traits, service), its fake driver and its tracker.
func (c *Cloud) register(ctx context.Context, hosts []Host) error {
	created := map[string]bool{}
	for _, h := range hosts {
		for _, t := range h.Traits {
			if placement.IsStandardTrait(t) || created[t] {
				continue
			}
			created[t] = true
			if _, err := c.Backing.CreateTrait(ctx, t); err != nil {
				return fmt.Errorf("creating trait %s: %w", t, err)
			}
		}
	}
	for _, h := range hosts {
		cfg := h.Config
		svc := h.Service
		if svc.LastSeenUp.IsZero() {
			svc.LastSeenUp = c.Clock.Now()
		}
		if _, err := compute.RegisterHost(ctx, c.Backing, cfg, svc, func() string { return cfg.ProviderUUID }); err != nil {
			return fmt.Errorf("creating host %s: %w", cfg.Host, err)
		}
		if len(h.Traits) > 0 {
			p, err := c.Backing.GetProvider(ctx, cfg.ProviderUUID)
			if err == nil {
				_, err = c.Backing.SetProviderTraits(ctx, cfg.ProviderUUID, p.Generation, h.Traits)
			}
			if err != nil {
				return fmt.Errorf("setting the traits of host %s: %w", cfg.Host, err)
			}
		}
		dcfg := h.Driver
		dcfg.Clock = c.Clock
		if dcfg.HostCPUs == 0 {
			dcfg.HostCPUs = cfg.VCPUs
		}
		if dcfg.HostMemoryMB == 0 {
			dcfg.HostMemoryMB = cfg.MemoryMB
		}
		drv, err := fake.New(dcfg)
		if err != nil {
			return fmt.Errorf("the driver of host %s: %w", cfg.Host, err)
		}
		c.Hosts = append(c.Hosts, cfg.Host)
		c.providers[cfg.Host] = cfg.ProviderUUID
		c.Drivers[cfg.Host] = drv
		c.Trackers[cfg.Host] = compute.NewTracker(cfg, c.Backing, drv, c.Clock)
	}
	return nil
}

// buildTrees creates the custom classes and traits, the sharing providers
// with their aggregates, each host's child providers, and the hosts'
// placement aggregates.
func (c *Cloud) buildTrees(ctx context.Context, sp Spec) error {
	for _, rc := range sp.ResourceClasses {
		if err := c.Backing.CreateResourceClass(ctx, rc); err != nil {
			return fmt.Errorf("creating resource class %s: %w", rc, err)
		}
	}
	for _, t := range sp.Traits {
		if _, err := c.Backing.CreateTrait(ctx, t); err != nil {
			return fmt.Errorf("creating trait %s: %w", t, err)
		}
	}
	for _, sh := range sp.Shared {
		if _, err := c.Backing.CreateProvider(ctx, sh.Provider); err != nil {
			return fmt.Errorf("creating shared provider %s: %w", sh.Provider.Name, err)
		}
		if _, err := c.Backing.SetProviderAggregates(ctx, sh.Provider.UUID, nil, sh.Aggregates); err != nil {
			return fmt.Errorf("aggregates of shared provider %s: %w", sh.Provider.Name, err)
		}
	}
	var withAggs []Host
	for _, h := range sp.Hosts {
		for _, ch := range h.Children {
			if ch.ParentUUID == "" {
				ch.ParentUUID = h.Config.ProviderUUID
			}
			if _, err := c.Backing.CreateProvider(ctx, ch); err != nil {
				return fmt.Errorf("creating child %s of %s: %w", ch.Name, h.Config.Host, err)
			}
		}
		if len(h.Aggregates) > 0 {
			withAggs = append(withAggs, h)
		}
	}
	slices.SortStableFunc(withAggs, func(a, b Host) int { return strings.Compare(a.Config.Host, b.Config.Host) })
	for _, h := range withAggs {
		if _, err := c.Backing.SetProviderAggregates(ctx, h.Config.ProviderUUID, nil, h.Aggregates); err != nil {
			return fmt.Errorf("aggregates of %s: %w", h.Config.Host, err)
		}
	}
	return nil
}

// Seed puts instances on host directly, as if they had been booted and
// the host audited since: their records (Host set; an empty UUID is
// NewID's, an empty vm_state ACTIVE, zero times now), their exact
// allocations on the host's provider (one write for all), running guests,
// tracked usage, and the host's record written once. Each of insts is
// replaced by its record as stored. Spec.Populate calls it for the
// instances there from the start; a test, at any time.
func (c *Cloud) Seed(ctx context.Context, host string, insts []records.Instance) error {
	rp, ok := c.providers[host]
	if !ok {
		return fmt.Errorf("seeding: no host %q", host)
	}
	now := c.Clock.Now()
	drv, tracker := c.Drivers[host], c.Trackers[host]
	writes := make([]placement.AllocationWrite, 0, len(insts))
	for i := range insts {
		in := &insts[i]
		in.Host = host
		if in.UUID == "" {
			in.UUID = c.spec.NewID()
		}
		if in.VMState == "" {
			in.VMState = records.VMActive
		}
		if in.CreatedAt.IsZero() {
			in.CreatedAt = now
		}
		if in.UpdatedAt.IsZero() {
			in.UpdatedAt = now
		}
		stored, err := c.Backing.CreateInstance(ctx, *in)
		if err != nil {
			return fmt.Errorf("seeding %s on %s: %w", in.Name, host, err)
		}
		*in = stored
		writes = append(writes, placement.AllocationWrite{ConsumerUUID: in.UUID, Type: placement.ConsumerInstance,
			Allocations: map[string]placement.Resources{rp: in.Flavor.Resources()}})
		drv.AddGuest(compute.Guest{UUID: in.UUID, Name: in.Name, Flavor: in.Flavor, State: compute.GuestRunning})
		tracker.Track(in.UUID, in.Flavor)
	}
	if _, err := c.Backing.WriteAllocations(ctx, writes...); err != nil {
		return fmt.Errorf("the allocations of the instances seeded on %s: %w", host, err)
	}
	if err := tracker.WriteRecord(ctx); err != nil {
		return fmt.Errorf("the record of %s: %w", host, err)
	}
	if c.seeded != nil {
		c.seeded[host] = true
	}
	return nil
}

// NewScheduler is a scheduler with its own view of the cloud's store (as
// each keel server has), of the spec's policy and configuration, its
// random source seeded with seeds.
func (c *Cloud) NewScheduler(ctx context.Context, seeds [2]uint64) (*scheduler.Scheduler, error) {
	var cfg scheduler.Config
	if c.spec.Scheduler != nil {
		// Each scheduler its own copy, as each server reads its own.
		cfg = *c.spec.Scheduler
		cfg.EnabledFilters = slices.Clone(cfg.EnabledFilters)
		cfg.Weighers = slices.Clone(cfg.Weighers)
		cfg.Options = maps.Clone(cfg.Options)
	} else {
		cfg = scheduler.DefaultConfig()
		cfg.ServiceDownTime = 0
	}
	view, err := scheduler.NewView(ctx, c.Backing, c.spec.Policy)
	if err != nil {
		return nil, fmt.Errorf("the scheduler's view: %w", err)
	}
	sched, err := scheduler.New(cfg, view, c.Clock, rand.New(rand.NewPCG(seeds[0], seeds[1])))
	if err != nil {
		return nil, fmt.Errorf("the scheduler: %w", err)
	}
	return sched, nil
}

// NewConductor is another keel server over the cloud's store and agents
// (its own scheduler and view, seeded with seeds), as a replica or a
// restarted server is. The agents keep reporting to the conductor Route
// last chose.
func (c *Cloud) NewConductor(ctx context.Context, cfg conductor.Config, seeds [2]uint64, hooks conductor.Hooks) (*conductor.Conductor, error) {
	sched, err := c.NewScheduler(ctx, seeds)
	if err != nil {
		return nil, err
	}
	return c.newConductor(cfg, sched, hooks), nil
}

func (c *Cloud) newConductor(cfg conductor.Config, sched *scheduler.Scheduler, hooks conductor.Hooks) *conductor.Conductor {
	if cfg.NewID == nil {
		cfg.NewID = c.spec.NewID
	}
	st := c.Backing
	if c.spec.ConductorStore != nil {
		st = c.spec.ConductorStore(c.Store)
	}
	return conductor.New(cfg, st, sched, reachable{c}, c.Clock, c.spec.Log, hooks)
}

// Route sends the agents' reports that follow to rep (the bus's queue
// group: whichever replica takes them).
func (c *Cloud) Route(rep compute.Reporter) { c.reports.Route(rep) }

// Cut makes host's agent unreachable to the conductors (their calls fail
// as rpc's do when no agent answers: bus.ErrUnavailable, marked
// conductor.ErrAgentUnreachable), or
// reachable again; the agent itself runs on and still reports, as one
// behind a one-way partition or restarting would.
func (c *Cloud) Cut(host string, cut bool) {
	if cut {
		c.cut.Store(host, true)
	} else {
		c.cut.Delete(host)
	}
}

// Lose makes the next cast of method (live_migration or resize_instance)
// to host's agent lost: the conductor sees it sent, the agent never gets
// it, as when a server is killed between saving the copy's step and
// casting it. DeliverLost hands it to the agent late. Until that cast,
// the conductors reach the agent through a wrapper that has only
// conductor.ComputeAPI's methods (no optional capability).
func (c *Cloud) Lose(host, method string) error {
	switch method {
	case castLiveMigration, castResizeInstance:
	default:
		return fmt.Errorf("inproc: only %s and %s casts can be lost, not %q", castLiveMigration, castResizeInstance, method)
	}
	c.losing.Store(host, method)
	return nil
}

// DeliverLost hands host's agent the cast Lose lost last, now (a cast
// that arrives after the conductor gave up on it), and returns its
// answer.
func (c *Cloud) DeliverLost(host string) error {
	f, ok := c.lost.LoadAndDelete(host)
	if !ok {
		return fmt.Errorf("inproc: no cast to %s was lost", host)
	}
	return f.(func() error)()
}

// The casts Lose can lose, by Nova's names.
const (
	castLiveMigration  = "live_migration"
	castResizeInstance = "resize_instance"
)

// reachable is the conductors' view of the agents: Agents, less the ones
// Cut, with the casts Lose loses.
type reachable struct{ c *Cloud }

// Compute implements conductor.Computes.
func (r reachable) Compute(host string) (conductor.ComputeAPI, error) {
	if _, cut := r.c.cut.Load(host); cut {
		return nil, conductor.Unreachable(fmt.Errorf("agent %s cut off: %w", host, bus.ErrUnavailable))
	}
	api, err := r.c.Agents.Compute(host)
	if err != nil {
		return nil, err
	}
	if _, ok := r.c.losing.Load(host); ok {
		return lossy{ComputeAPI: api, c: r.c, host: host}, nil
	}
	return api, nil
}

// lossy is an agent whose next copy cast may be lost (Lose).
type lossy struct {
	conductor.ComputeAPI
	c    *Cloud
	host string
}

// lose reports whether the cast of method is to be lost, keeping send
// for DeliverLost if so.
func (l lossy) lose(method string, send func() error) bool {
	if !l.c.losing.CompareAndDelete(l.host, method) {
		return false
	}
	l.c.lost.Store(l.host, send)
	return true
}

// LiveMigration implements conductor.ComputeAPI.
func (l lossy) LiveMigration(ctx context.Context, migID, version int64, inst records.Instance, dest string, data map[string]string) error {
	send := func() error {
		return l.ComputeAPI.LiveMigration(context.WithoutCancel(ctx), migID, version, inst, dest, data)
	}
	if l.lose(castLiveMigration, send) {
		return nil
	}
	return send()
}

// ResizeInstance implements conductor.ComputeAPI.
func (l lossy) ResizeInstance(ctx context.Context, migID, version int64, inst records.Instance, dest string, data map[string]string) error {
	send := func() error {
		return l.ComputeAPI.ResizeInstance(context.WithoutCancel(ctx), migID, version, inst, dest, data)
	}
	if l.lose(castResizeInstance, send) {
		return nil
	}
	return send()
}

// NewID is the cloud's own ID counter: UUID(1), UUID(2), …, so creation
// order is UUID order. It is Spec.NewID unless the spec names another.
func (c *Cloud) NewID() string { return UUID(c.ids.Add(1)) }

// UUID is the n-th counter UUID, n in the last group:
// 00000000-0000-4000-8000-000000000001 for 1 (as %012d writes it).
func UUID(n int64) string {
	var b [36]byte
	copy(b[:], "00000000-0000-4000-8000-000000000000")
	m := n
	for i := len(b) - 1; i >= len(b)-12 && m > 0; i-- {
		b[i] = byte('0' + m%10)
		m /= 10
	}
	if m > 0 || n < 0 { // past 12 digits: as %012d would, widen
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", n)
	}
	return string(b[:])
}

// Agents is the in-process bus: it implements conductor.Computes and
// compute.Peers over the managers.
type Agents map[string]*compute.Manager

// Compute implements conductor.Computes.
func (a Agents) Compute(host string) (conductor.ComputeAPI, error) {
	if m, ok := a[host]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("no agent for host %q", host)
}

// Peer implements compute.Peers.
func (a Agents) Peer(host string) (compute.Peer, error) {
	if m, ok := a[host]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("no agent for host %q", host)
}

// Routed hands the agents' reports to one conductor, which Route changes.
type Routed struct {
	to atomic.Pointer[compute.Reporter]
}

func (r *Routed) target() compute.Reporter { return *r.to.Load() }

// Route sends the reports that follow to rep.
func (r *Routed) Route(rep compute.Reporter) { r.to.Store(&rep) }

// BuildDone implements compute.Reporter.
func (r *Routed) BuildDone(ctx context.Context, instanceUUID, host string, err error) error {
	return r.target().BuildDone(ctx, instanceUUID, host, err)
}

// CopyProgress implements compute.Reporter.
func (r *Routed) CopyProgress(ctx context.Context, migrationID int64, total, processed, remaining int64) {
	r.target().CopyProgress(ctx, migrationID, total, processed, remaining)
}

// CopyDone implements compute.Reporter.
func (r *Routed) CopyDone(ctx context.Context, migrationID int64, err error) error {
	return r.target().CopyDone(ctx, migrationID, err)
}
