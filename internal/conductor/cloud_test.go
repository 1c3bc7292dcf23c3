package conductor_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/cloudtest"
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

// The shared flavors and timings (cloudtest's).
var (
	small  = cloudtest.Small
	medium = cloudtest.Medium
	huge   = cloudtest.Huge
)

const (
	spawnTime = cloudtest.SpawnTime
	copyTime  = cloudtest.CopyTime // medium
)

// cloud is cloudtest's in-process control plane, with the short names
// this package's tests use.
type cloud struct {
	*cloudtest.Cloud
	t        *testing.T
	clk      *clock.Virtual
	st       *memory.Store
	cond     *conductor.Conductor
	agents   cloudtest.Agents
	drivers  map[string]*fake.Driver
	trackers map[string]*compute.Tracker
	hosts    []string

	// storeDown makes the conductor's store writes fail (a full disk).
	storeDown *atomic.Bool
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
	// perDest and total are the incoming and cloud-wide live-migration
	// caps.
	perDest, total int
	// rebalanceEvery turns the periodic rebalance on.
	rebalanceEvery time.Duration
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

func newCloud(t *testing.T, opts ...option) *cloud {
	t.Helper()
	o := cloudOptions{hosts: 3, progressEvery: time.Second}
	for _, f := range opts {
		f(&o)
	}
	down := &atomic.Bool{}
	cc := cloudtest.New(t, cloudtest.Options{
		Hosts: o.hosts, Legacy: o.legacy, CPURatio: o.cpuRatio, NoProgress: o.progressEvery == 0, Scheduler: o.schedulerConfig,
		Conductor: conductor.Config{MaxConcurrentLiveMigrations: o.maxConcurrent, MaxAttempts: o.maxAttempts,
			Owner: o.owner, ServiceDownTime: o.downTime, BuildTimeout: o.buildTimeout, CopyStallTimeout: o.copyStall, StallAfter: o.stallAfter,
			ResizeConfirmWindow: o.confirmWindow, MaxConcurrentIncomingLiveMigrations: o.perDest, MaxConcurrentLiveMigrationsTotal: o.total,
			RebalanceInterval: o.rebalanceEvery},
		Store: func(m *memory.Store) store.Store { return endsSettled{m, t, down} },
	})
	return &cloud{Cloud: cc, t: t, clk: cc.Clock, st: cc.Store, cond: cc.Cond, agents: cc.Agents,
		drivers: cc.Drivers, trackers: cc.Trackers, hosts: cc.Hosts, storeDown: down}
}

// newScheduler is a scheduler with its own view of the cloud's store (as
// each keel server has), configured by the cloud's options.
func (c *cloud) newScheduler(seed uint64) *scheduler.Scheduler { return c.NewScheduler(seed) }

func (c *cloud) newID() string { return c.NewID() }

// seed puts an ACTIVE instance on host directly (cloudtest's Seed).
func (c *cloud) seed(host, name string, f records.Flavor) records.Instance {
	return c.Seed(host, name, f)
}

func (c *cloud) advance(d time.Duration) { c.clk.Advance(d) }

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
	return c.Allocations(consumer)
}

func (c *cloud) usage(host string) placement.Resources { return c.Usage(host) }

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
func (c *cloud) guest(host, uuid string) compute.GuestState { return c.Guest(host, uuid) }

func only(host string, f records.Flavor) map[string]placement.Resources {
	return cloudtest.Only(host, f)
}

func sameAllocations(a, b map[string]placement.Resources) bool {
	return cloudtest.SameAllocations(a, b)
}

// checkInvariants fails the test on each of cloudtest's Violations.
func (c *cloud) checkInvariants() {
	c.t.Helper()
	c.Cond = c.cond // a test may have replaced the conductor
	for _, v := range c.Violations() {
		c.t.Error(v)
	}
}

// doneStatuses lists the MigrationDone hook's reports as "id:status".
func (c *cloud) doneStatuses() []string {
	var out []string
	for _, m := range c.Done {
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
