// Package cloudtest puts a test's face on keel's in-process cloud
// (internal/inproc): New(t, Options) builds hosts h1…hN of one shape
// (HostConfig) on a virtual clock and fails the test on errors; Seed,
// Allocations, Usage and Guest read and write it the same way; Violations
// lists what breaks the invariants every scenario ends with; and
// RunScripts runs the script tests (testdata/*.txt) line by line on it.
// The conductor's tests and the compute API's tests build their clouds
// here; the simulator builds its worlds on inproc directly.
//
// Time moves only when a test advances the clock: a copy of 8 s is 8 s of
// virtual time, run in microseconds.
package cloudtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/conductor"
	"keel/internal/inproc"
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
	// (the API fuzz targets on PostgreSQL). Cloud.Store is then nil:
	// read through Cloud.Backing.
	On store.Store
	// Log receives every component's log (default: discarded).
	Log *slog.Logger
}

// Cloud is the in-process control plane (inproc's), on a virtual clock.
type Cloud struct {
	*inproc.Cloud
	Opts  Options
	Clock *clock.Virtual

	// Done and Builds are what the conductor's MigrationDone and BuildDone
	// hooks saw, in order.
	Done   []records.Migration
	Builds []records.Instance

	t testing.TB
}

// New builds a cloud at clock.Epoch: its hosts registered (provider rp-hN,
// service up in zone nova), their records written, and the conductor
// listening to their agents' reports.
func New(t testing.TB, o Options) *Cloud {
	t.Helper()
	if o.Hosts == 0 {
		o.Hosts = 3
	}
	progress := time.Second
	if o.NoProgress {
		progress = 0
	}
	if o.SpawnTime == 0 {
		o.SpawnTime = SpawnTime
	}
	c := &Cloud{t: t, Opts: o, Clock: clock.NewVirtual(clock.Epoch)}
	sp := inproc.Spec{
		Scheduler:      c.schedulerConfig(),
		SchedulerSeeds: [2]uint64{1, 2},
		Conductor:      o.Conductor,
		Hooks:          c.recorders(),
		Clock:          c.Clock,
		Log:            o.Log,
		Store:          o.On,
		ConductorStore: o.Store,
	}
	for i := 1; i <= o.Hosts; i++ {
		cfg := HostConfig(fmt.Sprintf("h%d", i))
		cfg.WriteDestRecord = !o.Legacy
		if o.CPURatio > 0 {
			cfg.CPUAllocationRatio = o.CPURatio
		}
		sp.Hosts = append(sp.Hosts, inproc.Host{Config: cfg, Service: records.Service{Zone: "nova"},
			Driver: fake.Config{SpawnTime: o.SpawnTime, ProgressEvery: progress}})
	}
	var err error
	if c.Cloud, err = inproc.New(context.Background(), sp); err != nil {
		t.Fatal(err)
	}
	return c
}

// schedulerConfig is Nova's defaults with the liveness check off
// (heartbeats are not simulated), adjusted by Options.Scheduler.
func (c *Cloud) schedulerConfig() *scheduler.Config {
	scfg := scheduler.DefaultConfig()
	scfg.ServiceDownTime = 0
	if c.Opts.Scheduler != nil {
		c.Opts.Scheduler(&scfg)
	}
	return &scfg
}

// recorders are the hooks that fill Done and Builds.
func (c *Cloud) recorders() conductor.Hooks {
	return conductor.Hooks{
		MigrationDone: func(m records.Migration) { c.Done = append(c.Done, m) },
		BuildDone:     func(in records.Instance) { c.Builds = append(c.Builds, in) },
	}
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
	cond, err := c.Cloud.NewConductor(context.Background(), cfg, [2]uint64{seed, seed + 1}, hooks)
	if err != nil {
		c.t.Fatal(err)
	}
	return cond
}

// NewScheduler is a scheduler with its own view of the cloud's store (as
// each keel server has), configured by the cloud's options.
func (c *Cloud) NewScheduler(seed uint64) *scheduler.Scheduler {
	c.t.Helper()
	sched, err := c.Cloud.NewScheduler(context.Background(), [2]uint64{seed, seed + 1})
	if err != nil {
		c.t.Fatal(err)
	}
	return sched
}

// Seed puts an ACTIVE instance on host directly, as if it had been booted
// and audited: record, exact allocation, running guest, tracked usage.
func (c *Cloud) Seed(host, name string, f records.Flavor) records.Instance {
	c.t.Helper()
	in := []records.Instance{{UUID: c.NewID(), Name: name, Zone: "nova", Flavor: f}}
	if err := c.Cloud.Seed(context.Background(), host, in); err != nil {
		c.t.Fatal(err)
	}
	return in[0]
}

// Advance moves the virtual clock on by d, running what falls due.
func (c *Cloud) Advance(d time.Duration) { c.Clock.Advance(d) }

// Settle runs what is due at the current instant (the steps a call
// queued "now").
func (c *Cloud) Settle() { c.Clock.RunUntil(c.Clock.Now()) }

// Allocations of a consumer (nil when it holds none).
func (c *Cloud) Allocations(consumer string) map[string]placement.Resources {
	cons, err := c.Backing.GetConsumer(context.Background(), consumer)
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
	sums, err := c.Backing.ProviderSummaries(context.Background(), []string{"rp-" + host})
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

// Agents is the in-process bus (inproc's).
type Agents = inproc.Agents

// sortedKeys lists a map's keys in order.
func sortedKeys[K ~string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
