package rpc

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/bus"
)

// TestPacingLevels: each unanswered call doubles the attempt time (up to
// maxAttempt) and the pause before resending an undelivered call (up to
// maxRetryPause); a timely answer resets both, a late one keeps them.
func TestPacingLevels(t *testing.T) {
	p := &pacing{rnd: func(int64) int64 { return 0 }} // no jitter
	if got := p.attempt(); got != attemptTime {
		t.Fatalf("level 0 attempt %s, want %s", got, attemptTime)
	}
	if got := p.pause(0); got != retryPause/2 {
		t.Fatalf("level 0 first pause %s, want %s", got, retryPause/2)
	}
	for range 3 {
		p.failed()
	}
	if got, want := p.attempt(), 8*attemptTime; got != want {
		t.Errorf("after 3 failures: attempt %s, want %s", got, want)
	}
	if got, want := p.pause(1), 16*retryPause/2; got != want {
		t.Errorf("after 3 failures: second pause %s, want %s", got, want)
	}
	for range 20 {
		p.failed()
	}
	if got := p.attempt(); got != maxAttempt {
		t.Errorf("after 23 failures: attempt %s, want the cap %s", got, maxAttempt)
	}
	if got := p.pause(40); got != maxRetryPause/2 {
		t.Errorf("after 23 failures: pause %s, want half the cap %s", got, maxRetryPause/2)
	}
	p.answered(2 * attemptTime)
	if got := p.attempt(); got != maxAttempt {
		t.Errorf("after a late answer: attempt %s, want it kept at %s", got, maxAttempt)
	}
	p.answered(attemptTime / 10)
	if got := p.attempt(); got != attemptTime {
		t.Errorf("after a timely answer: attempt %s, want %s again", got, attemptTime)
	}
	// Jitter stays within a quarter above the attempt, and within the
	// upper half of the pause.
	q := &pacing{}
	for range 100 {
		if a := q.attempt(); a < attemptTime || a > attemptTime*5/4 {
			t.Fatalf("jittered attempt %s outside [%s, %s]", a, attemptTime, attemptTime*5/4)
		}
		if d := q.pause(2); d < 2*retryPause || d > 4*retryPause {
			t.Fatalf("jittered pause %s outside [%s, %s]", d, 2*retryPause, 4*retryPause)
		}
	}
}

// TestSlowServersGetFewerRepeats: a server that takes 400 ms to answer
// each heartbeat, with attempts of 40 ms at first. Unpaced, each
// heartbeat was sent about ten times (an attempt every 40 ms until the
// answer: 60 repeats for six heartbeats); paced, the attempts grow until
// one outlasts the answer and stay there while the server is slow.
func TestSlowServersGetFewerRepeats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	creds := bus.Credentials{User: "keel-servers", Password: "a-long-random-password-for-this-test"}
	srv, err := bus.StartServer(ctx, bus.ServerOptions{Creds: creds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	connect := func(name string) *bus.Conn {
		c, err := bus.Connect(ctx, srv.URL(), creds, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	server, agent := connect("server"), connect("agent")
	var slow atomic.Bool
	slow.Store(true)
	var ran atomic.Int64
	if _, err := server.Handle(bus.AgentConductorSubject("h1", mHeartbeat), "", func(ctx context.Context, _ json.RawMessage) (any, error) {
		ran.Add(1)
		if slow.Load() {
			time.Sleep(400 * time.Millisecond)
		}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	st := &Store{Conn: agent, Host: "h1", pace: pacing{attempt0: 40 * time.Millisecond}}
	const beats = 6
	for i := range beats {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := st.Heartbeat(hctx, "h1", time.Now())
		cancel()
		if err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	repeats := server.RepeatedCalls()
	t.Logf("%d heartbeats against a server answering in 400 ms: %d repeats (handler ran %d times)", beats, repeats, ran.Load())
	if ran.Load() != beats {
		t.Errorf("handler ran %d times, want %d (a repeat is answered from the first run)", ran.Load(), beats)
	}
	if repeats > 2*beats {
		t.Errorf("%d repeats for %d heartbeats, want at most %d: the attempts did not slow down with the server", repeats, beats, 2*beats)
	}
	// Once the server answers at once, the pace is back to its start.
	slow.Store(false)
	if err := st.Heartbeat(ctx, "h1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := st.pace.attempt(); got > 50*time.Millisecond {
		t.Errorf("attempt time %s after a timely answer, want back to 40 ms (+ jitter)", got)
	}
}
