package conductor_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"keel/internal/conductor"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

const downTime = 60 * time.Second

// replica is another keel server over the cloud's store and agents, named
// name (the cloud's own conductor is the first replica).
func (c *cloud) replica(name string, st store.Store) *conductor.Conductor {
	c.t.Helper()
	view, err := scheduler.NewView(ctx, st, scheduler.PolicyClaim)
	if err != nil {
		c.t.Fatal(err)
	}
	scfg := scheduler.DefaultConfig()
	scfg.ServiceDownTime = 0
	sched, err := scheduler.New(scfg, view, c.clk, rand.New(rand.NewPCG(5, 6)))
	if err != nil {
		c.t.Fatal(err)
	}
	return conductor.New(conductor.Config{MaxConcurrentLiveMigrations: 1, Owner: name, ServiceDownTime: downTime},
		st, sched, c.agents, c.clk, slog.New(slog.DiscardHandler), conductor.Hooks{})
}

// start is a replica's start: Recover, then heartbeats and sweeps until
// the returned stop (its death: no more heartbeats).
func (c *cloud) start(cond *conductor.Conductor) (resumed int, stop func()) {
	c.t.Helper()
	n, err := cond.Recover(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	cond.RunOwnership(rctx)
	c.t.Cleanup(cancel)
	return n, cancel
}

// twoMigrations starts a copying and a queued migration off h1 on the
// cloud's conductor (replica "a").
func twoMigrations(t *testing.T, c *cloud) (copying, queued records.Migration, b records.Instance) {
	t.Helper()
	a := c.seed("h1", "a", medium)
	b = c.seed("h1", "b", small)
	copying = c.migrate(a, "")
	queued = c.migrate(b, "")
	c.advance(time.Second)
	if m := c.migration(copying.ID); m.Status != records.MigrationRunning || m.Owner != "a" {
		t.Fatalf("first migration %s owned by %q, want running, owned by a", m.Status, m.Owner)
	}
	if m := c.migration(queued.ID); m.Status != records.MigrationQueued || m.Owner != "a" {
		t.Fatalf("second migration %s owned by %q, want queued, owned by a", m.Status, m.Owner)
	}
	return copying, queued, b
}

// TestTwoReplicasTakingOverAtOnceOneWins: two replicas that both read the
// dead owner's migration before either writes race on the record's
// version: exactly one takes it over and resumes it.
func TestTwoReplicasTakingOverAtOnceOneWins(t *testing.T) {
	c := newCloud(t, maxConcurrent(1), owned("a", downTime))
	_, stopA := c.start(c.cond)
	_, queued, b := twoMigrations(t, c)
	both := &bothRead{Store: c.st, id: queued.ID, ready: make(chan struct{})}
	reps := []*conductor.Conductor{c.replica("b", both), c.replica("c", both)}
	stopA() // a dies; the copy's reports reach b
	c.Route(reps[0])
	c.advance(2 * downTime)

	if m := c.migration(queued.ID); m.Status != records.MigrationQueued {
		t.Fatalf("queued migration %s, want still queued", m.Status)
	}
	for _, r := range reps {
		if err := r.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	won := make([]int, len(reps))
	for i, r := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := r.Sweep(ctx)
			if err != nil {
				t.Error(err)
			}
			won[i] = n
		}()
	}
	wg.Wait()
	if won[0]+won[1] != 1 {
		t.Fatalf("replicas b and c took over %v migrations, want exactly one between them", won)
	}
	if both.reads() < 2 {
		t.Fatalf("the two replicas read the record %d times before writing, want both to have read it", both.reads())
	}
	want := map[int]string{0: "b", 1: "c"}[won[1]]
	got := c.migration(queued.ID)
	if got.Owner != want || got.Status != records.MigrationError {
		t.Fatalf("migration after the race: %s owned by %q, want error, owned by the winner %s", got.Status, got.Owner, want)
	}
	if in := c.instance(b.UUID); in.Host != "h1" || in.TaskState != records.TaskNone {
		t.Fatalf("instance b on %q task %q, want back on h1 with no task", in.Host, in.TaskState)
	}
	c.cond = reps[won[1]]
	c.checkInvariants()
}

// bothRead is the store, holding the first two reads of migration id
// until both happened (or a second passed), so two replicas surely read
// the same version before either writes.
type bothRead struct {
	store.Store
	id    int64
	mu    sync.Mutex
	n     int
	ready chan struct{}
}

func (s *bothRead) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *bothRead) GetMigration(ctx context.Context, id int64) (records.Migration, error) {
	m, err := s.Store.GetMigration(ctx, id)
	if id != s.id {
		return m, err
	}
	s.mu.Lock()
	s.n++
	first2 := s.n <= 2
	if s.n == 2 {
		close(s.ready)
	}
	s.mu.Unlock()
	if first2 {
		select {
		case <-s.ready:
		case <-time.After(time.Second):
		}
	}
	return m, err
}
