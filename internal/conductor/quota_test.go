package conductor_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"keel/internal/cloudtest"
	"keel/internal/conductor"
	"keel/internal/quota"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// meetStore makes the first two counted writes (a resize's record with its
// new flavor, a boot's new record) wait for each other, then the first two
// counts after them (ListInstances): both writes are in the store before
// either replica counts, and both count before either undoes its write —
// the interleaving that admits both when a count misses the other's write.
type meetStore struct {
	*memory.Store
	writes, counts meeting
}

// meeting lets the first two arrivals go on together (or after 2 s).
type meeting struct {
	mu      sync.Mutex
	arrived int
	met     chan struct{}
}

func (m *meeting) meet() {
	m.mu.Lock()
	m.arrived++
	if m.arrived == 2 {
		close(m.met)
	}
	first := m.arrived <= 2
	m.mu.Unlock()
	if first {
		select {
		case <-m.met:
		case <-time.After(2 * time.Second):
		}
	}
}

// ListProjectInstances is the quota count's read.
func (s *meetStore) ListProjectInstances(ctx context.Context, project string) ([]records.Instance, error) {
	s.writes.mu.Lock()
	written := s.writes.arrived >= 2
	s.writes.mu.Unlock()
	out, err := s.Store.ListProjectInstances(ctx, project)
	if written {
		s.counts.meet()
	}
	return out, err
}

func (s *meetStore) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	out, err := s.Store.UpdateInstance(ctx, in)
	if err == nil && in.TaskState == records.TaskResizePrep && in.ResizeFlavor != nil {
		s.writes.meet()
	}
	return out, err
}

func (s *meetStore) CreateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	out, err := s.Store.CreateInstance(ctx, in)
	if err == nil {
		s.writes.meet()
	}
	return out, err
}

// TestResizeQuotaRace: two resizes, or a resize and a boot, of one project
// that together pass its cores quota, each on its own replica over one
// store, are never both admitted, whether their writes meet before either
// counts (then both are refused, as Nova's recheck may refuse both) or they
// run as they come. A refused resize leaves the server as it was: no task,
// no migration, its old flavor counted.
func TestResizeQuotaRace(t *testing.T) {
	for _, tc := range []struct {
		name string
		meet bool
		boot bool // the second request is a boot, not a resize
	}{
		{"two resizes meet", true, false},
		{"two resizes race", false, false},
		{"resize and boot meet", true, true},
		{"resize and boot race", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ms *meetStore // one for every replica
			c := cloudtest.New(t, cloudtest.Options{Hosts: 3, NoProgress: true, Store: func(m *memory.Store) store.Store {
				if !tc.meet {
					return m
				}
				if ms == nil {
					ms = &meetStore{Store: m, writes: meeting{met: make(chan struct{})}, counts: meeting{met: make(chan struct{})}}
				}
				return ms
			}})
			var counted store.Store = c.Backing
			if ms != nil {
				counted = ms
			}
			enf := quota.Enforcer{Store: counted}
			a := c.Seed("h1", "a", cloudtest.Small)
			b := c.Seed("h2", "b", cloudtest.Small)
			// 2 cores used; small → medium adds 3, so one resize fits 5,
			// two (8) do not.
			if _, err := c.Backing.SetQuotaLimits(ctx, "", map[string]int64{quota.Cores: 5}); err != nil {
				t.Fatal(err)
			}
			reps := []*conductor.Conductor{
				c.NewConductor(conductor.Config{Owner: "r1", Quota: enf, NewID: c.NewID}, 11, conductor.Hooks{}),
				c.NewConductor(conductor.Config{Owner: "r2", Quota: enf, NewID: c.NewID}, 12, conductor.Hooks{}),
			}
			if tc.boot {
				if _, err := c.Backing.SetQuotaLimits(ctx, "", map[string]int64{quota.Cores: 5, quota.Instances: 10}); err != nil {
					t.Fatal(err)
				}
				// 2 used: resize adds 3 (5), boot adds 1 (3); together 6.
			}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); _, errs[0] = reps[0].Resize(ctx, a.UUID, cloudtest.Medium) }()
			go func() {
				defer wg.Done()
				if tc.boot {
					var in records.Instance
					in, errs[1] = reps[1].Boot(ctx, records.Instance{UUID: "boot-1", Name: "c", Flavor: cloudtest.Small, Zone: "nova"})
					if errs[1] == nil && in.VMState == records.VMError {
						errs[1] = errors.New(in.Fault)
					}
					return
				}
				_, errs[1] = reps[1].Resize(ctx, b.UUID, cloudtest.Medium)
			}()
			wg.Wait()
			admitted := 0
			for i, err := range errs {
				switch {
				case err == nil:
					admitted++
				case !errors.Is(err, quota.ErrExceeded):
					t.Fatalf("request %d failed otherwise than by quota: %v", i, err)
				}
			}
			if admitted > 1 {
				t.Fatalf("both requests were admitted past the cores quota of 5")
			}
			if tc.meet && admitted != 0 {
				t.Fatalf("writes that met before counting: %d admitted, want both refused (each count sees both): %v", admitted, errs)
			}
			if !tc.meet && admitted == 0 {
				t.Fatalf("requests one after the other: both refused, want one admitted")
			}
			ins, err := c.Backing.ListInstances(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if u := quota.Count(ins, ""); u.Cores > 5 {
				t.Fatalf("the project counts %d cores after the race, quota 5", u.Cores)
			}
			if errs[0] != nil {
				in, _ := c.Backing.GetInstance(ctx, a.UUID)
				ms, _ := c.Backing.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: a.UUID})
				if in.TaskState != records.TaskNone || in.ResizeFlavor != nil || in.Flavor.ID != cloudtest.Small.ID || len(ms) != 0 {
					t.Fatalf("a refused resize left task %q, resize flavor %v, flavor %s, %d migrations", in.TaskState, in.ResizeFlavor, in.Flavor.ID, len(ms))
				}
			}
			t.Logf("%s: %v", tc.name, errs)
		})
	}
}
