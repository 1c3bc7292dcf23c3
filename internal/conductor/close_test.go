package conductor_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/conductor"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/store/memory"
)

// closingStore is a store that the test closes once Conductor.Close
// returned: a write after that is what Server.Close used to risk (the
// store shut under a running flow).
type closingStore struct {
	conductor.Store
	t      *testing.T
	closed atomic.Bool
	writes atomic.Int32
}

func (s *closingStore) wrote(what string) {
	s.writes.Add(1)
	if s.closed.Load() {
		s.t.Errorf("%s after Conductor.Close returned", what)
	}
}

func (s *closingStore) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	s.wrote("UpdateInstance " + in.UUID)
	return s.Store.UpdateInstance(ctx, in)
}

func (s *closingStore) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	s.wrote("UpdateService " + host)
	return s.Store.UpdateService(ctx, host, fn)
}

func (s *closingStore) PutService(ctx context.Context, svc records.Service) error {
	s.wrote("PutService " + svc.Host)
	return s.Store.PutService(ctx, svc)
}

// blockingAgent answers a lifecycle operation once the test releases it.
type blockingAgent struct {
	conductor.ComputeAPI // nil: only InstanceLifecycle is called
	entered, release     chan struct{}
}

func (a *blockingAgent) InstanceLifecycle(ctx context.Context, _ records.Instance, _ string) error {
	close(a.entered)
	select {
	case <-a.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type oneAgent struct{ a *blockingAgent }

func (o oneAgent) Compute(string) (conductor.ComputeAPI, error) { return o.a, nil }

// TestCloseWaitsForWhatItStarted: Close returns only after the rest of a
// lifecycle action Act began (an agent call in flight, then its save) and
// the heartbeat and sweep ticks have stopped; after it, nothing the
// conductor started writes to the store. Before Close existed, Server.Close
// closed the store under such a flow.
func TestCloseWaitsForWhatItStarted(t *testing.T) {
	st := &closingStore{Store: memory.New(), t: t}
	now := time.Now()
	in, err := st.CreateInstance(ctx, records.Instance{UUID: "u1", Name: "vm", Flavor: small, Host: "h1",
		VMState: records.VMActive, CreatedAt: now, UpdatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	agent := &blockingAgent{entered: make(chan struct{}), release: make(chan struct{})}
	c := conductor.New(conductor.Config{Owner: "r1", ServiceDownTime: time.Hour, HeartbeatInterval: 5 * time.Millisecond,
		StallAfter: 400 * time.Millisecond}, st, nil, oneAgent{agent}, clock.Real{}, slog.New(slog.DiscardHandler), conductor.Hooks{})
	c.RunOwnership(context.Background()) // never cancelled: Close alone stops the ticks
	if _, _, err := c.Act(ctx, in.UUID, lifecycle.Request{Action: lifecycle.Stop}); err != nil {
		t.Fatal(err)
	}
	<-agent.entered
	for st.writes.Load() < 3 { // Act's save and two heartbeats
		time.Sleep(time.Millisecond)
	}

	closed := make(chan error, 1)
	go func() { closed <- c.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the stop's agent call was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(agent.release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the agent answered")
	}
	st.closed.Store(true)
	if got, _ := st.GetInstance(ctx, in.UUID); got.VMState != records.VMStopped || got.Action != "" {
		t.Fatalf("after Close the stop is %s/%q, want it finished (stopped, no action)", got.VMState, got.Action)
	}
	// Ticks that were pending (heartbeat 5 ms, sweep 100 ms) would write
	// now; none may.
	time.Sleep(300 * time.Millisecond)

	// A closed conductor starts nothing: the action is saved, its rest
	// left for the next start's recovery.
	st.closed.Store(false)
	_, done, err := c.Act(ctx, in.UUID, lifecycle.Request{Action: lifecycle.Start})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("Act after Close drove the action; want it left for recovery with an error")
	}
	if got, _ := st.GetInstance(ctx, in.UUID); got.Action != lifecycle.Start {
		t.Fatalf("Act after Close left action %q, want start saved for recovery", got.Action)
	}
}
