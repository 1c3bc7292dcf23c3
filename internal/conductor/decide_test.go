package conductor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/cloudtest"
	"keel/internal/conductor"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/memory"
	"keel/internal/testenv"
)

// decidesBetween is a store that, when the verify step saves a cold
// migration finished, sends RevertResize first — after the step settled
// the instance (VERIFY_RESIZE) and before the save — and lets the save go
// on only once the revert has read the instance's migrations (or ended).
type decidesBetween struct {
	*memory.Store
	cond     *conductor.Conductor
	watching atomic.Bool
	listed   chan struct{}
	reverted chan error
	once     sync.Once
}

func (s *decidesBetween) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	if m.Status == records.MigrationFinished {
		s.once.Do(func() {
			in, _ := s.GetInstance(ctx, m.InstanceUUID)
			if in.VMState != records.VMResized {
				return // the order this test is about has changed
			}
			s.watching.Store(true)
			go func() { s.reverted <- s.cond.RevertResize(context.Background(), m.InstanceUUID) }()
			select {
			case <-s.listed:
			case err := <-s.reverted:
				s.reverted <- err
			}
		})
	}
	return s.Store.UpdateMigration(ctx, m)
}

func (s *decidesBetween) ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error) {
	ms, err := s.Store.ListMigrations(ctx, f)
	if s.watching.CompareAndSwap(true, false) {
		s.listed <- struct{}{}
	}
	return ms, err
}

// TestRevertBetweenVerifyAndItsSave: a client that sees VERIFY_RESIZE and
// reverts at once may come between the verify step's settling of the
// instance and its save of the migration; the revert waits for that save
// and is done, as Nova (which saves the migration first) would answer. It
// was refused before: "has no resize or migration waiting for
// confirmation", the 409 e2e TestMovesResizeAndColdMigration got at load
// 50 (ci14).
func TestRevertBetweenVerifyAndItsSave(t *testing.T) {
	s := &decidesBetween{listed: make(chan struct{}, 1), reverted: make(chan error, 1)}
	cc := cloudtest.New(t, cloudtest.Options{Hosts: 3, Store: func(m *memory.Store) store.Store { s.Store = m; return s }})
	s.cond = cc.Cond
	in := cc.Seed("h1", "vm", small)
	if _, err := cc.Cond.ColdMigrate(ctx, in.UUID, ""); err != nil {
		t.Fatal(err)
	}
	cc.Clock.Advance(time.Minute) // the disk copy
	select {
	case err := <-s.reverted:
		if err != nil {
			t.Fatalf("revert sent on VERIFY_RESIZE: %v", err)
		}
	case <-testenv.Context(t).Done():
		t.Fatal("the cold migration never reached its verify step")
	}
	testenv.Poll(t, "the instance back on h1, ACTIVE", func() error {
		got, err := s.GetInstance(ctx, in.UUID)
		if err == nil && (got.Host != "h1" || got.VMState != records.VMActive || got.TaskState != records.TaskNone) {
			err = fmt.Errorf("on %s, %s, task %q", got.Host, got.VMState, got.TaskState)
		}
		cc.Clock.Advance(time.Second)
		return err
	})
}
