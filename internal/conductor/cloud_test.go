package conductor_test

import (
	"context"
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
)

const spawnTime = cloudtest.SpawnTime

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
}

type cloudOptions struct {
	hosts           int
	maxConcurrent   int
	maxAttempts     int
	schedulerConfig func(*scheduler.Config)
	owner           string        // conductor.Config.Owner
	downTime        time.Duration // conductor.Config.ServiceDownTime
}

type option func(*cloudOptions)

func hosts(n int) option         { return func(o *cloudOptions) { o.hosts = n } }
func maxConcurrent(n int) option { return func(o *cloudOptions) { o.maxConcurrent = n } }
func maxAttempts(n int) option   { return func(o *cloudOptions) { o.maxAttempts = n } }

// owned makes the cloud's conductor the replica name, judging replicas
// dead after downTime.
func owned(name string, downTime time.Duration) option {
	return func(o *cloudOptions) { o.owner, o.downTime = name, downTime }
}

func newCloud(t *testing.T, opts ...option) *cloud {
	t.Helper()
	o := cloudOptions{hosts: 3}
	for _, f := range opts {
		f(&o)
	}
	cc := cloudtest.New(t, cloudtest.Options{
		Hosts: o.hosts, Scheduler: o.schedulerConfig,
		Conductor: conductor.Config{MaxConcurrentLiveMigrations: o.maxConcurrent, MaxAttempts: o.maxAttempts,
			Owner: o.owner, ServiceDownTime: o.downTime},
		Store: func(m *memory.Store) store.Store { return endsSettled{m, t} },
	})
	return &cloud{Cloud: cc, t: t, clk: cc.Clock, st: cc.Store, cond: cc.Cond, agents: cc.Agents,
		drivers: cc.Drivers, trackers: cc.Trackers, hosts: cc.Hosts}
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

// endsSettled is the store, checking at each migration record saved with
// a final status that the instance has already settled: no task, and on
// the destination once completed: no reader can see a migration ended
// before its instance settled.
type endsSettled struct {
	*memory.Store
	t *testing.T
}

func (s endsSettled) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	if records.MigrationTerminal(m.Status) {
		in, err := s.GetInstance(ctx, m.InstanceUUID)
		onFinalHost := in.Host == m.DestHost || (m.Status != records.MigrationCompleted && in.Host == m.SourceHost)
		if err == nil && (!onFinalHost || in.TaskState != records.TaskNone) {
			s.t.Errorf("migration %d (%s→%s) saved %s while its instance is on %q with task %q", m.ID, m.SourceHost, m.DestHost, m.Status, in.Host, in.TaskState)
		}
	}
	return s.Store.UpdateMigration(ctx, m)
}
