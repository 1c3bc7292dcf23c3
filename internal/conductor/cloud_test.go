package conductor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

var ctx = context.Background()

// Flavors. medium copies in 8 s at the fake driver's default 1 GiB/s.
var (
	small  = records.Flavor{ID: "small", Name: "small", VCPUs: 1, RAMMB: 2048, DiskGB: 20}
	medium = records.Flavor{ID: "medium", Name: "medium", VCPUs: 4, RAMMB: 8192, DiskGB: 40}
	huge   = records.Flavor{ID: "huge", Name: "huge", VCPUs: 64, RAMMB: 1 << 20, DiskGB: 40}
)

const (
	spawnTime = 5 * time.Second
	copyTime  = 8 * time.Second // medium
)

// agents is the in-process "RPC": it implements conductor.Computes and
// compute.Peers over the managers.
type agents map[string]*compute.Manager

func (a agents) Compute(host string) (conductor.ComputeAPI, error) {
	if m, ok := a[host]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("no agent for host %q", host)
}

func (a agents) Peer(host string) (compute.Peer, error) {
	if m, ok := a[host]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("no agent for host %q", host)
}

// cloud is a whole control plane in one process on a virtual clock:
// memory store, N hosts (h1…hN, provider rp-hN) with fake drivers,
// trackers and managers, a claim-policy scheduler and the conductor.
type cloud struct {
	t        *testing.T
	opts     cloudOptions
	clk      *clock.Virtual
	st       *memory.Store
	cond     *conductor.Conductor
	agents   agents
	drivers  map[string]*fake.Driver
	trackers map[string]*compute.Tracker
	hosts    []string
	ids      int

	// reports carries the agents' reports to a conductor (the bus's
	// queue group: whichever replica answers).
	reports routedReporter

	// storeDown makes the conductor's store writes fail (a full disk).
	storeDown atomic.Bool

	done   []records.Migration // MigrationDone hook
	builds []records.Instance  // BuildDone hook
}

type cloudOptions struct {
	hosts           int
	legacy          bool // WriteDestRecord=false
	maxConcurrent   int
	maxAttempts     int
	progressEvery   time.Duration
	schedulerConfig func(*scheduler.Config)
	owner           string        // conductor.Config.Owner
	downTime        time.Duration // conductor.Config.ServiceDownTime
	// buildTimeout, copyStall and stallAfter are the conductor's
	// BuildTimeout, CopyStallTimeout and StallAfter.
	buildTimeout, copyStall, stallAfter time.Duration
	confirmWindow                       time.Duration // ResizeConfirmWindow
	cpuRatio                            float64       // the hosts' cpu_allocation_ratio (default 1)
}

type option func(*cloudOptions)

func hosts(n int) option         { return func(o *cloudOptions) { o.hosts = n } }
func legacyHosts() option        { return func(o *cloudOptions) { o.legacy = true } }
func maxConcurrent(n int) option { return func(o *cloudOptions) { o.maxConcurrent = n } }
func maxAttempts(n int) option   { return func(o *cloudOptions) { o.maxAttempts = n } }
func noProgressReports() option  { return func(o *cloudOptions) { o.progressEvery = 0 } }

// owned makes the cloud's conductor the replica name, judging replicas
// dead after downTime.
func owned(name string, downTime time.Duration) option {
	return func(o *cloudOptions) { o.owner, o.downTime = name, downTime }
}
func hostConfig(h string) compute.HostConfig {
	return compute.HostConfig{Host: h, ProviderUUID: "rp-" + h, VCPUs: 16, MemoryMB: 32768, LocalGB: 500, ReservedHostMemoryMB: 512}
}

func newCloud(t *testing.T, opts ...option) *cloud {
	t.Helper()
	o := cloudOptions{hosts: 3, progressEvery: time.Second}
	for _, f := range opts {
		f(&o)
	}
	c := &cloud{t: t, opts: o, clk: clock.NewVirtual(clock.Epoch), st: memory.New(), agents: agents{},
		drivers: map[string]*fake.Driver{}, trackers: map[string]*compute.Tracker{}}
	quiet := slog.New(slog.DiscardHandler)
	for i := 1; i <= o.hosts; i++ {
		h := fmt.Sprintf("h%d", i)
		c.hosts = append(c.hosts, h)
		cfg := hostConfig(h)
		cfg.WriteDestRecord = !o.legacy
		if o.cpuRatio > 0 {
			cfg.CPUAllocationRatio = o.cpuRatio
		}
		if _, err := c.st.CreateProvider(ctx, placement.Provider{UUID: cfg.ProviderUUID, Name: h, Inventories: cfg.Inventories()}); err != nil {
			t.Fatal(err)
		}
		if err := c.st.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", Zone: "nova", LastSeenUp: c.clk.Now()}); err != nil {
			t.Fatal(err)
		}
		drv, err := fake.New(fake.Config{Clock: c.clk, SpawnTime: spawnTime, ProgressEvery: o.progressEvery})
		if err != nil {
			t.Fatal(err)
		}
		c.drivers[h] = drv
		c.trackers[h] = compute.NewTracker(cfg, c.st, drv, c.clk)
		if err := c.trackers[h].WriteRecord(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sched := c.newScheduler(1)
	c.cond = conductor.New(conductor.Config{MaxConcurrentLiveMigrations: o.maxConcurrent, MaxAttempts: o.maxAttempts, NewID: c.newID,
		Owner: o.owner, ServiceDownTime: o.downTime, BuildTimeout: o.buildTimeout, CopyStallTimeout: o.copyStall, StallAfter: o.stallAfter,
		ResizeConfirmWindow: o.confirmWindow},
		endsSettled{c.st, t, &c.storeDown}, sched, c.agents, c.clk, quiet, conductor.Hooks{
			MigrationDone: func(m records.Migration) { c.done = append(c.done, m) },
			BuildDone:     func(in records.Instance) { c.builds = append(c.builds, in) },
		})
	c.reports.route(c.cond)
	for _, h := range c.hosts {
		c.agents[h] = compute.NewManager(h, c.drivers[h], c.trackers[h], c.agents, &c.reports, c.clk, quiet)
	}
	return c
}

// newScheduler is a scheduler with its own view of the cloud's store (as
// each keel server has), configured by the cloud's options.
func (c *cloud) newScheduler(seed uint64) *scheduler.Scheduler {
	c.t.Helper()
	scfg := scheduler.DefaultConfig()
	scfg.ServiceDownTime = 0 // heartbeats are not simulated
	if c.opts.schedulerConfig != nil {
		c.opts.schedulerConfig(&scfg)
	}
	view, err := scheduler.NewView(ctx, c.st, scheduler.PolicyClaim)
	if err != nil {
		c.t.Fatal(err)
	}
	sched, err := scheduler.New(scfg, view, c.clk, rand.New(rand.NewPCG(seed, seed+1)))
	if err != nil {
		c.t.Fatal(err)
	}
	return sched
}

// routedReporter hands the agents' reports to the conductor in to.
type routedReporter struct {
	mu sync.Mutex
	to compute.Reporter
}

func (r *routedReporter) target() compute.Reporter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.to
}

// route sends the reports that follow to rep.
func (r *routedReporter) route(rep compute.Reporter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.to = rep
}

func (r *routedReporter) BuildDone(ctx context.Context, instanceUUID, host string, err error) error {
	return r.target().BuildDone(ctx, instanceUUID, host, err)
}

func (r *routedReporter) CopyProgress(ctx context.Context, migrationID int64, total, processed, remaining int64) {
	r.target().CopyProgress(ctx, migrationID, total, processed, remaining)
}

func (r *routedReporter) CopyDone(ctx context.Context, migrationID int64, err error) error {
	return r.target().CopyDone(ctx, migrationID, err)
}

func (c *cloud) newID() string {
	c.ids++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", c.ids)
}

// seed puts an ACTIVE instance on host directly, as if it had been booted
// and audited: record, exact allocation, running guest, tracked usage.
func (c *cloud) seed(host, name string, f records.Flavor) records.Instance {
	c.t.Helper()
	now := c.clk.Now()
	in, err := c.st.CreateInstance(ctx, records.Instance{UUID: c.newID(), Name: name, Host: host, Zone: "nova", Flavor: f,
		VMState: records.VMActive, CreatedAt: now, UpdatedAt: now})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: in.UUID, Type: placement.ConsumerInstance,
		Allocations: map[string]placement.Resources{"rp-" + host: f.Resources()}}); err != nil {
		c.t.Fatal(err)
	}
	c.drivers[host].AddGuest(compute.Guest{UUID: in.UUID, Name: name, Flavor: f, State: compute.GuestRunning})
	c.trackers[host].Track(in.UUID, f)
	if err := c.trackers[host].WriteRecord(ctx); err != nil {
		c.t.Fatal(err)
	}
	return in
}

func (c *cloud) advance(d time.Duration) { c.clk.Advance(d) }

// elapsed is the virtual time since the start.
func (c *cloud) elapsed() time.Duration { return c.clk.Now().Sub(clock.Epoch) }

func (c *cloud) instance(uuid string) records.Instance {
	c.t.Helper()
	in, err := c.st.GetInstance(ctx, uuid)
	if err != nil {
		c.t.Fatal(err)
	}
	return in
}

func (c *cloud) migration(id int64) records.Migration {
	c.t.Helper()
	m, err := c.st.GetMigration(ctx, id)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

func (c *cloud) migrate(in records.Instance, host string) records.Migration {
	c.t.Helper()
	m, err := c.cond.LiveMigrate(ctx, in.UUID, host)
	if err != nil {
		c.t.Fatalf("live-migrating %s: %v", in.Name, err)
	}
	// LiveMigrate answers once the migration is queued; what follows runs
	// on the clock at this same instant.
	c.clk.RunUntil(c.clk.Now())
	return c.migration(m.ID)
}

// allocations of a consumer (nil when it holds none).
func (c *cloud) allocations(consumer string) map[string]placement.Resources {
	cons, err := c.st.GetConsumer(ctx, consumer)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return cons.Allocations
}

func (c *cloud) usage(host string) placement.Resources {
	c.t.Helper()
	sums, err := c.st.ProviderSummaries(ctx, []string{"rp-" + host})
	if err != nil || len(sums) != 1 {
		c.t.Fatalf("usage of %s: %v", host, err)
	}
	return sums[0].Usage
}

func (c *cloud) usages() map[string]placement.Resources {
	out := map[string]placement.Resources{}
	for _, h := range c.hosts {
		out[h] = c.usage(h).Clone()
	}
	return out
}

func (c *cloud) hostRecord(host string) records.HostRecord {
	c.t.Helper()
	r, err := c.st.GetHostRecord(ctx, host)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// guest returns the state of a guest on a host ("" if absent).
func (c *cloud) guest(host, uuid string) compute.GuestState {
	c.t.Helper()
	gs, err := c.drivers[host].Guests(ctx)
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

func only(host string, f records.Flavor) map[string]placement.Resources {
	return map[string]placement.Resources{"rp-" + host: f.Resources()}
}

func sameAllocations(a, b map[string]placement.Resources) bool {
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

// checkInvariants asserts what must hold after every scenario:
//   - every provider's usage is the sum of its consumers' allocations, and
//     within capacity;
//   - no consumer holds allocations on two providers unless a migration is
//     active;
//
// and, once no migration is active:
//   - no migration consumer is left, and every ACTIVE instance with no
//     task holds exactly its flavor on its host;
//   - every guest on a hypervisor is running and belongs to an instance
//     recorded on that host;
//   - the host records (unless legacy) say what the allocations say;
//   - the conductor holds no lock, queue entry or slot.
func (c *cloud) checkInvariants() {
	t := c.t
	t.Helper()
	active, err := c.st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	sums, err := c.st.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	consumers := map[string]placement.Consumer{}
	for _, s := range sums {
		cs, err := c.st.ConsumersOn(ctx, s.UUID)
		if err != nil {
			t.Fatal(err)
		}
		sum := placement.Resources{}
		for _, cons := range cs {
			sum.Add(cons.Allocations[s.UUID])
			consumers[cons.UUID] = cons
		}
		if !sum.Equal(s.Usage) {
			t.Errorf("provider %s: usage %v, but its consumers hold %v", s.Name, s.Usage, sum)
		}
		for rc, used := range s.Usage {
			if inv, ok := s.Inventories[rc]; !ok || used > inv.Capacity() {
				t.Errorf("provider %s over capacity: %d %s", s.Name, used, rc)
			}
		}
	}
	for _, cons := range consumers {
		if len(cons.Allocations) > 1 && len(active) == 0 {
			t.Errorf("consumer %s holds allocations on %v with no migration active", cons.UUID, cons.Providers())
		}
	}
	if len(active) > 0 {
		return
	}
	if locks, queued, slots := c.cond.Remembered(); locks+queued+slots != 0 {
		t.Errorf("no migration is active, yet the conductor keeps %d locks, %d queued migrations, %d slots", locks, queued, slots)
	}
	insts, err := c.st.ListInstances(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	byUUID := map[string]records.Instance{}
	for _, in := range insts {
		byUUID[in.UUID] = in
		building := in.VMState == records.VMBuilding && in.TaskState == records.TaskSpawning
		if in.TaskState != records.TaskNone && !building {
			t.Errorf("instance %s (%s) keeps task %q with no migration active", in.Name, in.VMState, in.TaskState)
		}
		if in.VMState == records.VMActive || building {
			if got := c.allocations(in.UUID); !sameAllocations(got, only(in.Host, in.Flavor)) {
				t.Errorf("instance %s (%s) on %s holds %v", in.Name, in.VMState, in.Host, got)
			}
		}
	}
	for uuid, cons := range consumers {
		if cons.Type == placement.ConsumerMigration {
			t.Errorf("migration consumer %s still holds %v", uuid, cons.Allocations)
		} else if in, ok := byUUID[uuid]; !ok || (in.VMState != records.VMActive && in.VMState != records.VMBuilding) {
			t.Errorf("consumer %s holds %v but is no ACTIVE or BUILDING instance", uuid, cons.Allocations)
		}
	}
	for _, h := range c.hosts {
		gs, _ := c.drivers[h].Guests(ctx)
		for _, g := range gs {
			in, ok := byUUID[g.UUID]
			okState := g.State == compute.GuestRunning || (g.State == compute.GuestBuilding && in.VMState == records.VMBuilding)
			if !ok || in.Host != h || !okState {
				t.Errorf("guest %s on %s is %s (instance %s on %q)", g.UUID, h, g.State, in.VMState, in.Host)
			}
		}
		if c.opts.legacy {
			continue
		}
		rec := c.trackers[h].Record()
		if used := rec.Used(512, 0); !used.Equal(c.usage(h)) {
			t.Errorf("host record of %s says %v used, allocations say %v", h, used, c.usage(h))
		}
		if stored := c.hostRecord(h); stored.RunningVMs != rec.RunningVMs || stored.VCPUsUsed != rec.VCPUsUsed {
			t.Errorf("stored record of %s differs from its tracker's", h)
		}
	}
}

// doneStatuses lists the MigrationDone hook's reports as "id:status".
func (c *cloud) doneStatuses() []string {
	var out []string
	for _, m := range c.done {
		out = append(out, fmt.Sprintf("%d:%s", m.ID, m.Status))
	}
	sort.Strings(out)
	return out
}

func wantErrorContaining(t *testing.T, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Fatalf("error %q does not mention %q", got, want)
	}
}

// normUsages renders usages for comparison (nil and empty alike).
func normUsages(u map[string]placement.Resources) map[string]string {
	out := map[string]string{}
	for h, r := range u {
		out[h] = r.String()
	}
	return out
}

// endsSettled is the store, checking at each migration record saved with
// a final status that the instance has already settled: no task, and on
// the destination once completed: no reader can see a migration ended
// before its instance settled.
//
// While down is set, its writes fail as a full disk makes them.
type endsSettled struct {
	*memory.Store
	t    *testing.T
	down *atomic.Bool
}

var errDiskFull = errors.New("database or disk is full")

func (s endsSettled) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	if s.down.Load() {
		return records.Instance{}, fmt.Errorf("updating instance %s: %w", in.UUID, errDiskFull)
	}
	return s.Store.UpdateInstance(ctx, in)
}

func (s endsSettled) WriteAllocations(ctx context.Context, ws ...placement.AllocationWrite) (placement.WritePlan, error) {
	if s.down.Load() {
		return placement.WritePlan{}, fmt.Errorf("writing allocations: %w", errDiskFull)
	}
	return s.Store.WriteAllocations(ctx, ws...)
}

func (s endsSettled) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	if s.down.Load() {
		return records.Migration{}, fmt.Errorf("updating migration %d: %w", m.ID, errDiskFull)
	}
	if records.MigrationTerminal(m.Status) {
		in, err := s.GetInstance(ctx, m.InstanceUUID)
		onFinalHost := in.Host == m.DestHost || (m.Status != records.MigrationCompleted && in.Host == m.SourceHost)
		if err == nil && (!onFinalHost || in.TaskState != records.TaskNone) {
			s.t.Errorf("migration %d (%s→%s) saved %s while its instance is on %q with task %q", m.ID, m.SourceHost, m.DestHost, m.Status, in.Host, in.TaskState)
		}
	}
	return s.Store.UpdateMigration(ctx, m)
}
