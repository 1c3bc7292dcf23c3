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
	"keel/internal/testenv"
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

func (s *closingStore) BeginMove(ctx context.Context, in records.Instance, m records.Migration) (records.Instance, records.Migration, error) {
	s.wrote("BeginMove " + in.UUID)
	return s.Store.BeginMove(ctx, in, m)
}

func (s *closingStore) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	s.wrote("UpdateService " + host)
	return s.Store.UpdateService(ctx, host, fn)
}

func (s *closingStore) PutService(ctx context.Context, svc records.Service) error {
	s.wrote("PutService " + svc.Host)
	return s.Store.PutService(ctx, svc)
}

// blockingAgent answers a lifecycle operation once the test releases it;
// cancelled, it takes a little longer to return (a call unwinding), then
// says so in returned.
type blockingAgent struct {
	conductor.ComputeAPI // nil: only InstanceLifecycle is called
	entered, release     chan struct{}
	returned             atomic.Bool
	cancelled            atomic.Bool
}

func (a *blockingAgent) InstanceLifecycle(ctx context.Context, _ records.Instance, _ string) error {
	close(a.entered)
	defer a.returned.Store(true)
	select {
	case <-a.release:
		return nil
	case <-ctx.Done():
		a.cancelled.Store(true)
		time.Sleep(100 * time.Millisecond)
		return ctx.Err()
	}
}

type oneAgent struct{ a *blockingAgent }

func (o oneAgent) Compute(string) (conductor.ComputeAPI, error) { return o.a, nil }

// TestCloseCancelsAndWaitsForWhatItStarted: Close cancels the agent call
// in flight of a lifecycle action Act began (it does not wait for the
// agent's answer, up to rpc_timeout), waits until that call has returned
// and the heartbeat and sweep ticks have stopped, and leaves the action
// in its record: after Close nothing the conductor started writes to the
// store, and the next start's recovery finishes the action. Before, Close
// waited for the agent's answer (the test's 5 s bound ran out).
func TestCloseCancelsAndWaitsForWhatItStarted(t *testing.T) {
	st := &closingStore{Store: memory.New(), t: t}
	now := time.Now()
	in, err := st.CreateInstance(ctx, records.Instance{UUID: "u1", Name: "vm", Flavor: small, Host: "h1",
		VMState: records.VMActive, CreatedAt: now, UpdatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	agent := &blockingAgent{entered: make(chan struct{}), release: make(chan struct{})}
	cfg := conductor.Config{Owner: "r1", ServiceDownTime: time.Hour, HeartbeatInterval: 5 * time.Millisecond,
		StallAfter: 400 * time.Millisecond}
	c := conductor.New(cfg, st, nil, oneAgent{agent}, clock.Real{}, slog.New(slog.DiscardHandler), conductor.Hooks{})
	c.RunOwnership(context.Background()) // never cancelled: Close alone stops the ticks
	if _, _, err := c.Act(ctx, in.UUID, lifecycle.Request{Action: lifecycle.Stop}); err != nil {
		t.Fatal(err)
	}
	<-agent.entered
	for st.writes.Load() < 3 { // Act's save and two heartbeats
		time.Sleep(time.Millisecond)
	}

	closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Close(closeCtx); err != nil {
		t.Fatalf("Close with the stop's agent call in flight: %v", err)
	}
	if !agent.cancelled.Load() || !agent.returned.Load() {
		t.Fatalf("Close returned with the agent call cancelled=%v, returned=%v; want both", agent.cancelled.Load(), agent.returned.Load())
	}
	st.closed.Store(true)
	if got, _ := st.GetInstance(ctx, in.UUID); got.VMState != records.VMActive || got.Action != lifecycle.Stop {
		t.Fatalf("after Close the instance is %s with action %q, want active with the stop left for recovery", got.VMState, got.Action)
	}
	// Ticks that were pending (heartbeat 5 ms, sweep 100 ms) would write
	// now; none may.
	time.Sleep(300 * time.Millisecond)

	// A closed conductor starts nothing: the action is saved, its rest
	// left for the next start's recovery.
	st.closed.Store(false)
	_, done, err := c.Act(ctx, in.UUID, lifecycle.Request{Action: lifecycle.Start})
	if err == nil {
		if err = <-done; err == nil {
			t.Fatal("Act after Close drove the action; want it left for recovery with an error")
		}
	}
	if got, _ := st.GetInstance(ctx, in.UUID); got.Action != lifecycle.Stop {
		t.Fatalf("after Act after Close the action is %q, want the stop still left for recovery", got.Action)
	}

	// The next start's recovery finishes the stop.
	next := &blockingAgent{entered: make(chan struct{}), release: make(chan struct{})}
	close(next.release)
	c2 := conductor.New(cfg, st, nil, oneAgent{next}, clock.Real{}, slog.New(slog.DiscardHandler), conductor.Hooks{})
	defer c2.Close(ctx)
	if n, err := c2.Recover(ctx); err != nil || n != 1 {
		t.Fatalf("recovery: %d, %v; want the stop resumed", n, err)
	}
	// The agent call goes on in the background (Recover does not wait on
	// agents).
	for waitCtx := testenv.Context(t); ; time.Sleep(5 * time.Millisecond) {
		got, _ := st.GetInstance(ctx, in.UUID)
		if got.VMState == records.VMStopped && got.Action == "" {
			break
		}
		if waitCtx.Err() != nil {
			t.Fatalf("after the recovery the instance is %s with action %q, want stopped, no action", got.VMState, got.Action)
		}
	}
}
