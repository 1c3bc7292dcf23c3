package conductor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/cloudtest"
	"keel/internal/conductor"
	"keel/internal/placement"
	"keel/internal/quota"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// stoppingStore is the store of a server that stops after its next few
// writes: once armed, it takes that many writes, and every write after
// them fails, as nothing a stopped server would write reaches the store.
type stoppingStore struct {
	*memory.Store
	left atomic.Int64 // writes still taken; below 0: not armed
}

var errStopped = errors.New("the server stopped")

func newStoppingStore(m *memory.Store) *stoppingStore {
	s := &stoppingStore{Store: m}
	s.left.Store(-1)
	return s
}

// write counts one write, or fails it once the server stopped.
func (s *stoppingStore) write() error {
	for {
		n := s.left.Load()
		switch {
		case n < 0:
			return nil
		case n == 0:
			return errStopped
		case s.left.CompareAndSwap(n, n-1):
			return nil
		}
	}
}

func (s *stoppingStore) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	if err := s.write(); err != nil {
		return records.Instance{}, err
	}
	return s.Store.UpdateInstance(ctx, in)
}

func (s *stoppingStore) CreateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	if err := s.write(); err != nil {
		return records.Migration{}, err
	}
	return s.Store.CreateMigration(ctx, m)
}

func (s *stoppingStore) BeginMove(ctx context.Context, in records.Instance, m records.Migration) (records.Instance, records.Migration, error) {
	if err := s.write(); err != nil {
		return records.Instance{}, records.Migration{}, err
	}
	return s.Store.BeginMove(ctx, in, m)
}

func (s *stoppingStore) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	if err := s.write(); err != nil {
		return records.Migration{}, err
	}
	return s.Store.UpdateMigration(ctx, m)
}

func (s *stoppingStore) WriteAllocations(ctx context.Context, ws ...placement.AllocationWrite) (placement.WritePlan, error) {
	if err := s.write(); err != nil {
		return placement.WritePlan{}, err
	}
	return s.Store.WriteAllocations(ctx, ws...)
}

// TestMoveStartIsOneWrite: a server that stops right after the first
// write of a move's start (live and cold migration, resize, evacuation)
// leaves the instance in its move's task only with the migration that
// carries it — the task and the migration are one write. Before, the
// task was saved first and the migration recorded by a second write: the
// instance stayed "migrating" (resize_prep, rebuilding) with no
// migration until the sweep's MoveLost cleared it.
func TestMoveStartIsOneWrite(t *testing.T) {
	for _, move := range []string{"live", "cold", "resize", "evacuate"} {
		t.Run(move, func(t *testing.T) {
			var st *stoppingStore
			c := cloudtest.New(t, cloudtest.Options{Hosts: 3, NoProgress: true, Store: func(m *memory.Store) store.Store {
				st = newStoppingStore(m)
				return st
			}})
			in := c.Seed("h1", "vm", cloudtest.Small)
			if move == "evacuate" {
				if _, err := c.Backing.UpdateService(ctx, "h1", func(s *records.Service) error { s.ForcedDown = true; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			st.left.Store(1) // the move's first write, then the server stops
			var err error
			switch move {
			case "live":
				_, err = c.Cond.LiveMigrate(ctx, in.UUID, "")
			case "cold":
				_, err = c.Cond.ColdMigrate(ctx, in.UUID, "")
			case "resize":
				_, err = c.Cond.Resize(ctx, in.UUID, cloudtest.Medium)
			case "evacuate":
				_, err = c.Cond.Evacuate(ctx, in.UUID, "")
			}
			t.Logf("%s with the server stopping after one write: %v", move, err)
			got, gerr := c.Backing.GetInstance(ctx, in.UUID)
			if gerr != nil {
				t.Fatal(gerr)
			}
			ms, lerr := c.Backing.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: in.UUID, ActiveOnly: true})
			if lerr != nil {
				t.Fatal(lerr)
			}
			if !records.MoveTask(got.TaskState) {
				t.Fatalf("the move's first write left the instance with task %q, want its move's task", got.TaskState)
			}
			if len(ms) != 1 {
				t.Fatalf("the server stopped after the move's first write: the instance is in task %q with %d active migrations, want its one migration", got.TaskState, len(ms))
			}
		})
	}
}

// TestResizeReservationLostIsCleared: a resize that adds usage under a
// quota saves its new flavor for the quotas' count before its migration
// (the one move start of two writes); a server that stops between them
// leaves the task and the new flavor to the sweep, which clears both
// (lifecycle.MoveLost) — the project counts the old flavor again.
func TestResizeReservationLostIsCleared(t *testing.T) {
	var st *stoppingStore
	c := cloudtest.New(t, cloudtest.Options{Hosts: 3, NoProgress: true, Store: func(m *memory.Store) store.Store {
		st = newStoppingStore(m)
		return st
	}})
	stall := 5 * time.Second
	cond := c.NewConductor(conductor.Config{Owner: "r1", Quota: quota.Enforcer{Store: c.Backing}, NewID: c.NewID, StallAfter: stall}, 11, conductor.Hooks{})
	in := c.Seed("h1", "vm", cloudtest.Small)
	st.left.Store(1)
	if _, err := cond.Resize(ctx, in.UUID, cloudtest.Medium); err == nil {
		t.Fatal("the resize started with every write after the first failing")
	}
	got, _ := c.Backing.GetInstance(ctx, in.UUID)
	if got.TaskState != records.TaskResizePrep || got.ResizeFlavor == nil {
		t.Fatalf("after the stop the instance has task %q, resize flavor %v; want resize_prep with the new flavor saved", got.TaskState, got.ResizeFlavor)
	}
	st.left.Store(-1)
	c.Clock.Advance(2 * stall)
	if _, err := cond.SweepStalled(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ = c.Backing.GetInstance(ctx, in.UUID)
	if got.TaskState != records.TaskNone || got.ResizeFlavor != nil || got.Flavor.ID != cloudtest.Small.ID {
		t.Fatalf("after the sweep the instance has task %q, resize flavor %v, flavor %s; want no task, no resize flavor, small", got.TaskState, got.ResizeFlavor, got.Flavor.ID)
	}
}

// TestResizeReservationLostIsClearedAtRestart: the server that stopped
// between a quota-growing resize's two writes clears the task and the new
// flavor as it starts again (Recover: the move's task has no migration),
// not a StallAfter later — the project counts the old flavor again at
// once, and the server resizes again.
func TestResizeReservationLostIsClearedAtRestart(t *testing.T) {
	var st *stoppingStore
	c := cloudtest.New(t, cloudtest.Options{Hosts: 3, NoProgress: true, Store: func(m *memory.Store) store.Store {
		st = newStoppingStore(m)
		return st
	}})
	cfg := conductor.Config{Owner: "r1", Quota: quota.Enforcer{Store: c.Backing}, NewID: c.NewID, StallAfter: time.Hour}
	cond := c.NewConductor(cfg, 11, conductor.Hooks{})
	in := c.Seed("h1", "vm", cloudtest.Small)
	st.left.Store(1)
	if _, err := cond.Resize(ctx, in.UUID, cloudtest.Medium); err == nil {
		t.Fatal("the resize started with every write after the first failing")
	}
	if got, _ := c.Backing.GetInstance(ctx, in.UUID); got.TaskState != records.TaskResizePrep || got.ResizeFlavor == nil {
		t.Fatalf("after the stop the instance has task %q, resize flavor %v; want resize_prep with the new flavor saved", got.TaskState, got.ResizeFlavor)
	}
	st.left.Store(-1)
	restarted := c.NewConductor(cfg, 12, conductor.Hooks{})
	if _, err := restarted.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := c.Backing.GetInstance(ctx, in.UUID)
	if got.TaskState != records.TaskNone || got.ResizeFlavor != nil || got.Flavor.ID != cloudtest.Small.ID {
		t.Fatalf("after the restart the instance has task %q, resize flavor %v, flavor %s; want no task, no resize flavor, small", got.TaskState, got.ResizeFlavor, got.Flavor.ID)
	}
	if _, err := restarted.Resize(ctx, in.UUID, cloudtest.Medium); err != nil {
		t.Fatalf("resizing again after the restart: %v", err)
	}
}
