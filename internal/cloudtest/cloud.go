// Package cloudtest is keel's control plane in one process, on a virtual
// clock: a memory store, hosts h1…hN with fake drivers, trackers and
// agent managers, a claim-policy scheduler and the conductor, wired as a
// keel server wires them but with in-process calls for the bus. The
// conductor's tests build their scenarios on it, and its script tests
// (testdata/*.txt, see Run) drive it line by line.
//
// Time moves only when a test advances the clock: a copy of 8 s is 8 s of
// virtual time, run in microseconds.
package cloudtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

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

// The flavors the tests share. Medium copies in 8 s at the fake driver's
// default 1 GiB/s.
var (
	Small  = records.Flavor{ID: "small", Name: "small", VCPUs: 1, RAMMB: 2048, DiskGB: 20}
	Medium = records.Flavor{ID: "medium", Name: "medium", VCPUs: 4, RAMMB: 8192, DiskGB: 40}
	Large  = records.Flavor{ID: "large", Name: "large", VCPUs: 8, RAMMB: 16384, DiskGB: 80}
	Huge   = records.Flavor{ID: "huge", Name: "huge", VCPUs: 64, RAMMB: 1 << 20, DiskGB: 40}
)

// Flavors are the shared flavors by name.
var Flavors = map[string]records.Flavor{"small": Small, "medium": Medium, "large": Large, "huge": Huge}

// The fake drivers' timings.
const (
	SpawnTime = 5 * time.Second
	CopyTime  = 8 * time.Second // Medium's memory at 1 GiB/s
)

// ReservedHostMemoryMB is every host's reserved_host_memory_mb.
const ReservedHostMemoryMB = 512

// Options shape a cloud; the zero value is three hosts with the conductor's
// defaults.
type Options struct {
	Hosts int // default 3
	// Legacy hosts do not write the destination's record after a move
	// (Nova's behaviour, WriteDestRecord=false).
	Legacy bool
	// CPURatio is the hosts' cpu_allocation_ratio (default 1).
	CPURatio float64
	// NoProgress: migrations report no progress, only their end
	// (default: progress every second).
	NoProgress bool
	// SpawnTime is how long the fake drivers take to spawn (default
	// SpawnTime).
	SpawnTime time.Duration
	// Scheduler adjusts the scheduler's configuration.
	Scheduler func(*scheduler.Config)
	// Conductor is the conductor's configuration (NewID is filled in).
	Conductor conductor.Config
	// Store wraps the memory store the conductor writes through (a test
	// that checks or fails its writes); nil uses the store itself.
	Store func(*memory.Store) store.Store
	// On, if set, is the store the hosts are registered in and the
	// trackers, schedulers and conductors use instead of the memory store
	// (the API fuzz targets on PostgreSQL). Cloud.Store is then empty:
	// read through Cloud.Backing.
	On store.Store
	// Log receives every component's log (default: discarded).
	Log *slog.Logger
}

// Cloud is the in-process control plane.
type Cloud struct {
	Opts  Options
	Clock *clock.Virtual
	Store *memory.Store
	// Backing is the store everything uses: Store, or Options.On.
	Backing  store.Store
	Cond     *conductor.Conductor
	Agents   Agents
	Drivers  map[string]*fake.Driver
	Trackers map[string]*compute.Tracker
	Hosts    []string

	// Done and Builds are what the conductor's MigrationDone and BuildDone
	// hooks saw, in order.
	Done   []records.Migration
	Builds []records.Instance

	reports Routed
	cut     sync.Map // host → true: the conductor's calls to it find no agent
	ids     int
	t       testing.TB
}

// New builds a cloud at clock.Epoch: its hosts registered (provider rp-hN,
// service up), their records written, and the conductor listening to
// their agents' reports.
func New(t testing.TB, o Options) *Cloud {
	t.Helper()
	if o.Hosts == 0 {
		o.Hosts = 3
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c := &Cloud{t: t, Opts: o, Clock: clock.NewVirtual(clock.Epoch), Store: memory.New(), Agents: Agents{},
		Drivers: map[string]*fake.Driver{}, Trackers: map[string]*compute.Tracker{}}
	c.Backing = c.Store
	if o.On != nil {
		c.Backing = o.On
	}
	ctx := context.Background()
	progress := time.Second
	if o.NoProgress {
		progress = 0
	}
	if o.SpawnTime == 0 {
		o.SpawnTime = SpawnTime
	}
	for i := 1; i <= o.Hosts; i++ {
		h := fmt.Sprintf("h%d", i)
		c.Hosts = append(c.Hosts, h)
		cfg := HostConfig(h)
		cfg.WriteDestRecord = !o.Legacy
		if o.CPURatio > 0 {
			cfg.CPUAllocationRatio = o.CPURatio
		}
		svc := records.Service{Zone: "nova", LastSeenUp: c.Clock.Now()}
		if _, err := compute.RegisterHost(ctx, c.Backing, cfg, svc, func() string { return cfg.ProviderUUID }); err != nil {
			t.Fatal(err)
		}
		drv, err := fake.New(fake.Config{Clock: c.Clock, SpawnTime: o.SpawnTime, ProgressEvery: progress})
		if err != nil {
			t.Fatal(err)
		}
		c.Drivers[h] = drv
		c.Trackers[h] = compute.NewTracker(cfg, c.Backing, drv, c.Clock)
		if err := c.Trackers[h].WriteRecord(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.Cond = c.NewConductor(o.Conductor, 1, conductor.Hooks{
		MigrationDone: func(m records.Migration) { c.Done = append(c.Done, m) },
		BuildDone:     func(in records.Instance) { c.Builds = append(c.Builds, in) },
	})
	c.reports.Route(c.Cond)
	for _, h := range c.Hosts {
		c.Agents[h] = compute.NewManager(h, c.Drivers[h], c.Trackers[h], c.Agents, &c.reports, c.Clock, o.Log)
	}
	return c
}

// HostConfig is host h's configuration: 16 vCPUs, 32 GiB (512 MiB
// reserved), 500 GB of disk, provider rp-h.
func HostConfig(h string) compute.HostConfig {
	return compute.HostConfig{Host: h, ProviderUUID: "rp-" + h, VCPUs: 16, MemoryMB: 32768, LocalGB: 500, ReservedHostMemoryMB: ReservedHostMemoryMB}
}

// NewConductor is another keel server over the cloud's store and agents
// (its own scheduler and view, seeded with seed), as a replica or a
// restarted server is. The agents keep reporting to the conductor Route
// last chose.
func (c *Cloud) NewConductor(cfg conductor.Config, seed uint64, hooks conductor.Hooks) *conductor.Conductor {
	c.t.Helper()
	if cfg.NewID == nil {
		cfg.NewID = c.NewID
	}
	st := c.Backing
	if c.Opts.Store != nil {
		st = c.Opts.Store(c.Store)
	}
	return conductor.New(cfg, st, c.NewScheduler(seed), reachable{c}, c.Clock, c.Opts.Log, hooks)
}

// Cut makes host's agent unreachable to the conductors (their calls fail
// as the bus fails when no agent answers: bus.ErrUnavailable), or
// reachable again; the agent itself runs on and still reports, as one
// behind a one-way partition or restarting would.
func (c *Cloud) Cut(host string, cut bool) {
	if cut {
		c.cut.Store(host, true)
	} else {
		c.cut.Delete(host)
	}
}

// reachable is the conductors' view of the agents: Agents, less the ones
// Cut.
type reachable struct{ c *Cloud }

// Compute implements conductor.Computes.
func (r reachable) Compute(host string) (conductor.ComputeAPI, error) {
	if _, cut := r.c.cut.Load(host); cut {
		return nil, fmt.Errorf("agent %s cut off: %w", host, bus.ErrUnavailable)
	}
	return r.c.Agents.Compute(host)
}

// NewScheduler is a scheduler with its own view of the cloud's store (as
// each keel server has), configured by the cloud's options.
func (c *Cloud) NewScheduler(seed uint64) *scheduler.Scheduler {
	c.t.Helper()
	scfg := scheduler.DefaultConfig()
	scfg.ServiceDownTime = 0 // heartbeats are not simulated
	if c.Opts.Scheduler != nil {
		c.Opts.Scheduler(&scfg)
	}
	view, err := scheduler.NewView(context.Background(), c.Backing, scheduler.PolicyClaim)
	if err != nil {
		c.t.Fatal(err)
	}
	sched, err := scheduler.New(scfg, view, c.Clock, rand.New(rand.NewPCG(seed, seed+1)))
	if err != nil {
		c.t.Fatal(err)
	}
	return sched
}

// Route sends the agents' reports that follow to rep (the bus's queue
// group: whichever replica takes them).
func (c *Cloud) Route(rep compute.Reporter) { c.reports.Route(rep) }

// NewID is the next instance UUID: 00000000-0000-4000-8000-000000000001,
// …, so creation order is UUID order.
func (c *Cloud) NewID() string {
	c.ids++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", c.ids)
}

// Seed puts an ACTIVE instance on host directly, as if it had been booted
// and audited: record, exact allocation, running guest, tracked usage.
func (c *Cloud) Seed(host, name string, f records.Flavor) records.Instance {
	c.t.Helper()
	ctx := context.Background()
	now := c.Clock.Now()
	in, err := c.Store.CreateInstance(ctx, records.Instance{UUID: c.NewID(), Name: name, Host: host, Zone: "nova", Flavor: f,
		VMState: records.VMActive, CreatedAt: now, UpdatedAt: now})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.Store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: in.UUID, Type: placement.ConsumerInstance,
		Allocations: map[string]placement.Resources{"rp-" + host: f.Resources()}}); err != nil {
		c.t.Fatal(err)
	}
	c.Drivers[host].AddGuest(compute.Guest{UUID: in.UUID, Name: name, Flavor: f, State: compute.GuestRunning})
	c.Trackers[host].Track(in.UUID, f)
	if err := c.Trackers[host].WriteRecord(ctx); err != nil {
		c.t.Fatal(err)
	}
	return in
}

// Advance moves the virtual clock on by d, running what falls due.
func (c *Cloud) Advance(d time.Duration) { c.Clock.Advance(d) }

// Settle runs what is due at the current instant (the steps a call
// queued "now").
func (c *Cloud) Settle() { c.Clock.RunUntil(c.Clock.Now()) }

// Allocations of a consumer (nil when it holds none).
func (c *Cloud) Allocations(consumer string) map[string]placement.Resources {
	cons, err := c.Store.GetConsumer(context.Background(), consumer)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return cons.Allocations
}

// Usage is what host's provider has allocated.
func (c *Cloud) Usage(host string) placement.Resources {
	c.t.Helper()
	sums, err := c.Store.ProviderSummaries(context.Background(), []string{"rp-" + host})
	if err != nil || len(sums) != 1 {
		c.t.Fatalf("usage of %s: %v", host, err)
	}
	return sums[0].Usage
}

// Guest is the state of a guest on a host ("" if absent).
func (c *Cloud) Guest(host, uuid string) compute.GuestState {
	c.t.Helper()
	gs, err := c.Drivers[host].Guests(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	for _, g := range gs {
		if g.UUID == uuid {
			return g.State
		}
	}
	return ""
}

// Only is the allocation of flavor f on host alone.
func Only(host string, f records.Flavor) map[string]placement.Resources {
	return map[string]placement.Resources{"rp-" + host: f.Resources()}
}

// SameAllocations reports whether two allocations hold the same
// resources on the same providers.
func SameAllocations(a, b map[string]placement.Resources) bool {
	if len(a) != len(b) {
		return false
	}
	for p, r := range a {
		if !r.Equal(b[p]) {
			return false
		}
	}
	return true
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
	mu sync.Mutex
	to compute.Reporter
}

func (r *Routed) target() compute.Reporter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.to
}

// Route sends the reports that follow to rep.
func (r *Routed) Route(rep compute.Reporter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.to = rep
}

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

// sortedKeys lists a map's keys in order.
func sortedKeys[K ~string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
