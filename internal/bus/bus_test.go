package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"keel/internal/bus"
	"keel/internal/testenv"
)

// testLog returns a logger writing to the test log, silenced once the test
// has finished (nats.go callbacks may still fire then).
func testLog(t *testing.T) *slog.Logger {
	t.Helper()
	w := &testWriter{t: t}
	t.Cleanup(w.stop) // registered first: runs last
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	mu      sync.Mutex
	t       *testing.T
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Logf("%s", p)
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

func testCreds(t *testing.T) bus.Credentials {
	t.Helper()
	c, err := bus.LoadOrCreateCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startServer(t *testing.T, log *slog.Logger, creds bus.Credentials, port int) *bus.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := bus.StartServer(ctx, bus.ServerOptions{Host: "127.0.0.1", Port: port, Creds: creds, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, log *slog.Logger, url string, creds bus.Credentials, name string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, url, creds, name, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// setup starts a server and returns it with one connection.
func setup(t *testing.T) (*bus.Server, *bus.Conn, bus.Credentials, *slog.Logger) {
	t.Helper()
	log := testLog(t)
	creds := testCreds(t)
	s := startServer(t, log, creds, 0)
	return s, connect(t, log, s.URL(), creds, "test"), creds, log
}

func portOf(t *testing.T, s *bus.Server) int {
	t.Helper()
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func callCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

type echoReq struct {
	Text  string `json:"text"`
	Fail  string `json:"fail,omitempty"`
	Panic bool   `json:"panic,omitempty"`
}

type echoResp struct {
	Text string `json:"text"`
	By   string `json:"by"`
}

func echoHandler(name string) bus.Handler {
	return func(ctx context.Context, data json.RawMessage) (any, error) {
		var req echoReq
		if err := bus.Decode(data, &req); err != nil {
			return nil, err
		}
		if req.Panic {
			panic("boom")
		}
		switch req.Fail {
		case bus.CodeNotFound:
			return nil, bus.WithCode(bus.CodeNotFound, fmt.Errorf("instance %s not found", req.Text))
		case bus.CodeConflict:
			return nil, bus.WithCode(bus.CodeConflict, errors.New("generation conflict"))
		case "plain":
			return nil, errors.New("disk on fire")
		}
		return echoResp{Text: req.Text, By: name}, nil
	}
}

func TestCredentialsCreatedOnceAndReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	c1, err := bus.LoadOrCreateCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c1.User == "" || len(c1.Password) < 32 {
		t.Fatalf("weak credentials: %+v", c1)
	}
	path := filepath.Join(dir, bus.CredentialsFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	c2, err := bus.LoadOrCreateCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c2 != c1 {
		t.Fatalf("credentials changed: %v then %v", c1, c2)
	}
	c3, err := bus.ReadCredentials(path)
	if err != nil || c3 != c1 {
		t.Fatalf("ReadCredentials = %v, %v; want %v", c3, err, c1)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("data dir holds %d entries, want only the credentials file", len(entries))
	}
	other := testCreds(t)
	if other == c1 {
		t.Fatal("two data dirs got the same credentials")
	}
	if s := fmt.Sprint(c1); s == "" || strings.Contains(s, c1.Password) {
		t.Fatalf("String() leaks the password: %q", s)
	}
	if _, err := bus.ReadCredentials(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("ReadCredentials of a missing file succeeded")
	}
}

func TestCredentialsConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	got := make([]bus.Credentials, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := bus.LoadOrCreateCredentials(dir)
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		})
	}
	wg.Wait()
	onDisk, err := bus.ReadCredentials(filepath.Join(dir, bus.CredentialsFile))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range got {
		if c != onDisk {
			t.Fatalf("caller %d got %v, file holds %v", i, c, onDisk)
		}
	}
}

func TestStartServerRefusesMissingCreds(t *testing.T) {
	if _, err := bus.StartServer(t.Context(), bus.ServerOptions{}); err == nil {
		t.Fatal("server started without credentials")
	}
}

func TestStartServerPortInUse(t *testing.T) {
	log := testLog(t)
	creds := testCreds(t)
	s := startServer(t, log, creds, 0)
	ctx := callCtx(t, 5*time.Second)
	s2, err := bus.StartServer(ctx, bus.ServerOptions{Port: portOf(t, s), Creds: creds, Logger: log})
	if err == nil {
		s2.Shutdown()
		t.Fatal("second server on the same port started")
	}
	t.Logf("expected error: %v", err)
}

func TestWrongPasswordRefused(t *testing.T) {
	s, _, creds, log := setup(t)
	bad := creds
	bad.Password += "x"
	start := time.Now()
	c, err := bus.Connect(callCtx(t, 10*time.Second), s.URL(), bad, "intruder", log)
	if err == nil {
		c.Close()
		t.Fatal("connected with a wrong password")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("err = %v, want an authorization error", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("refusal took %s", time.Since(start))
	}
}

func TestConnectGivesUpWithContext(t *testing.T) {
	// A port nobody listens on: start a server and stop it.
	log := testLog(t)
	creds := testCreds(t)
	s := startServer(t, log, creds, 0)
	s.Shutdown()
	start := time.Now()
	_, err := bus.Connect(callCtx(t, 500*time.Millisecond), s.URL(), creds, "early", log)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %s", d)
	}
}

func TestCallRoundTrip(t *testing.T) {
	_, c, _, _ := setup(t)
	subj := bus.ComputeSubject("host1", "echo")
	if _, err := c.Handle(subj, "", echoHandler("h1")); err != nil {
		t.Fatal(err)
	}
	var resp echoResp
	if err := c.Call(callCtx(t, 5*time.Second), subj, echoReq{Text: "hello"}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp != (echoResp{Text: "hello", By: "h1"}) {
		t.Fatalf("resp = %+v", resp)
	}
	// A nil resp ignores the result; no deadline means the default one.
	if err := c.Call(t.Context(), subj, echoReq{Text: "again"}, nil); err != nil {
		t.Fatal(err)
	}
}

func TestCallBetweenConnections(t *testing.T) {
	s, caller, creds, log := setup(t)
	agent := connect(t, log, s.URL(), creds, "agent")
	subj := bus.ComputeSubject("host1", "echo")
	sub, err := agent.Handle(subj, "", echoHandler("agent"))
	if err != nil {
		t.Fatal(err)
	}
	var resp echoResp
	if err := caller.Call(callCtx(t, 5*time.Second), subj, echoReq{Text: "x"}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.By != "agent" {
		t.Fatalf("resp = %+v", resp)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	err = caller.Call(callCtx(t, 5*time.Second), subj, echoReq{Text: "x"}, &resp)
	if !errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("after Unsubscribe: err = %v, want ErrUnavailable", err)
	}
}

func TestRemoteErrorCodes(t *testing.T) {
	_, c, _, _ := setup(t)
	subj := bus.ComputeSubject("host1", "echo")
	if _, err := c.Handle(subj, "", echoHandler("h1")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req      any
		code     string
		contains string
	}{
		{echoReq{Text: "i-42", Fail: bus.CodeNotFound}, bus.CodeNotFound, "instance i-42 not found"},
		{echoReq{Fail: bus.CodeConflict}, bus.CodeConflict, "generation conflict"},
		{echoReq{Fail: "plain"}, bus.CodeInternal, "disk on fire"},
		{"not an object", bus.CodeInvalid, "decode"},
	} {
		err := c.Call(callCtx(t, 5*time.Second), subj, tc.req, nil)
		var re *bus.RemoteError
		if !errors.As(err, &re) {
			t.Fatalf("%v: err = %v (%T), want *RemoteError", tc.req, err, err)
		}
		if re.Code != tc.code || !bus.IsCode(err, tc.code) || !strings.Contains(re.Message, tc.contains) {
			t.Fatalf("%v: got %q %q, want %q containing %q", tc.req, re.Code, re.Message, tc.code, tc.contains)
		}
		if errors.Is(err, bus.ErrUnavailable) {
			t.Fatalf("%v: a remote error must not look like an unavailable agent", tc.req)
		}
	}
}

func TestForwardedRemoteErrorKeepsCode(t *testing.T) {
	_, c, _, _ := setup(t)
	agent := bus.ComputeSubject("host1", "echo")
	conductor := bus.ConductorSubject("proxy")
	if _, err := c.Handle(agent, "", echoHandler("h1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Handle(conductor, "", func(ctx context.Context, data json.RawMessage) (any, error) {
		return nil, c.Call(ctx, agent, data, nil)
	}); err != nil {
		t.Fatal(err)
	}
	err := c.Call(callCtx(t, 5*time.Second), conductor, echoReq{Text: "i-1", Fail: bus.CodeNotFound}, nil)
	var re *bus.RemoteError
	if !errors.As(err, &re) || re.Code != bus.CodeNotFound || re.Message != "instance i-1 not found" {
		t.Fatalf("err = %#v", err)
	}
}

func TestCallDeadline(t *testing.T) {
	_, c, _, _ := setup(t)
	subj := bus.ComputeSubject("host1", "slow")
	handlerDeadline := make(chan time.Duration, 1)
	if _, err := c.Handle(subj, "", func(ctx context.Context, data json.RawMessage) (any, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			handlerDeadline <- -1
		} else {
			handlerDeadline <- time.Until(dl)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := c.Call(callCtx(t, 300*time.Millisecond), subj, nil, nil)
	elapsed := time.Since(start)
	if !errors.Is(err, bus.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if errors.Is(err, bus.ErrNotDelivered) {
		t.Fatalf("a timed-out call must not claim it was not delivered: %v", err)
	}
	if !bus.IsCode(err, bus.CodeUnavailable) {
		t.Fatalf("code = %q", bus.ErrorCode(err))
	}
	if elapsed < 250*time.Millisecond || elapsed > 3*time.Second {
		t.Fatalf("call returned after %s", elapsed)
	}
	t.Logf("timeout error: %v", err)
	select {
	case d := <-handlerDeadline:
		if d <= 0 || d > 300*time.Millisecond {
			t.Fatalf("handler's remaining time %s, want within (0, 300ms]", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler never ran")
	}
}

// A call whose deadline has already passed is not sent, and says so
// (it read "no agent answered … within -1.757s" at 8,300 agents starting).
func TestCallPastItsDeadline(t *testing.T) {
	_, c, _, _ := setup(t)
	subj := bus.ComputeSubject("host1", "late")
	ran := make(chan struct{}, 1)
	if _, err := c.Handle(subj, "", func(context.Context, json.RawMessage) (any, error) {
		ran <- struct{}{}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-1500*time.Millisecond))
	defer cancel()
	err := c.Call(ctx, subj, nil, nil)
	if !errors.Is(err, bus.ErrUnavailable) || !errors.Is(err, bus.ErrNotDelivered) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrUnavailable, ErrNotDelivered and DeadlineExceeded", err)
	}
	if msg := err.Error(); strings.Contains(msg, "within -") || !strings.Contains(msg, "not sent") {
		t.Fatalf("err = %q, want it to say the call was not sent, with no negative wait", msg)
	}
	// The subject answers a call that has time: the handler is there, and
	// it did not run for the late one.
	if err := c.Call(callCtx(t, 10*time.Second), subj, nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	default:
		t.Fatal("the handler did not run for a call with time left")
	}
	select {
	case <-ran:
		t.Fatal("the late call reached the handler")
	default:
	}
}

func TestNoResponder(t *testing.T) {
	_, c, _, _ := setup(t)
	start := time.Now()
	err := c.Call(callCtx(t, 10*time.Second), bus.ComputeSubject("ghost", "echo"), echoReq{}, nil)
	if !errors.Is(err, bus.ErrUnavailable) || !errors.Is(err, bus.ErrNotDelivered) {
		t.Fatalf("err = %v, want ErrUnavailable and ErrNotDelivered", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("no-responder error took %s", d)
	}
	var re *bus.RemoteError
	if errors.As(err, &re) {
		t.Fatal("no responder looks like a remote error")
	}
	t.Logf("no responder error: %v", err)
}

func TestCast(t *testing.T) {
	_, c, _, _ := setup(t)
	subj := bus.ComputeSubject("host1", "build_and_run_instance")
	got := make(chan string, 2)
	if _, err := c.Handle(subj, "", func(ctx context.Context, data json.RawMessage) (any, error) {
		var req echoReq
		if err := bus.Decode(data, &req); err != nil {
			return nil, err
		}
		got <- req.Text
		return nil, errors.New("cast errors are only logged")
	}); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"a", "b"} {
		if err := c.Cast(t.Context(), subj, echoReq{Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for range 2 {
		select {
		case s := <-got:
			seen[s] = true
		case <-time.After(5 * time.Second):
			t.Fatal("cast not delivered")
		}
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("delivered %v", seen)
	}
	// A cast nobody listens to is not an error: at most once.
	if err := c.Cast(t.Context(), bus.ComputeSubject("ghost", "x"), nil); err != nil {
		t.Fatal(err)
	}
}

func TestQueueGroupDeliversToOne(t *testing.T) {
	s, caller, creds, log := setup(t)
	subj := bus.ConductorSubject("work")
	var counts [2]atomic.Int64
	var subs []bus.Subscription
	for i := range 2 {
		conn := connect(t, log, s.URL(), creds, fmt.Sprintf("worker%d", i))
		sub, err := conn.Handle(subj, "conductors", func(ctx context.Context, data json.RawMessage) (any, error) {
			counts[i].Add(1)
			return i, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	const n = 40
	var byWorker [2]int
	for range n {
		var who int
		if err := caller.Call(callCtx(t, 5*time.Second), subj, nil, &who); err != nil {
			t.Fatal(err)
		}
		byWorker[who]++
	}
	// Drain waits for every handler already started: counts are final.
	for _, sub := range subs {
		if err := sub.Drain(); err != nil {
			t.Fatal(err)
		}
	}
	c0, c1 := counts[0].Load(), counts[1].Load()
	if c0+c1 != n {
		t.Fatalf("handlers ran %d+%d times for %d calls", c0, c1, n)
	}
	if int(c0) != byWorker[0] || int(c1) != byWorker[1] {
		t.Fatalf("handlers ran %d/%d, replies came from %v", c0, c1, byWorker)
	}
	t.Logf("split %d/%d", c0, c1)
}

func TestHandlerPanic(t *testing.T) {
	_, c, _, _ := setup(t)
	subj := bus.ComputeSubject("host1", "echo")
	if _, err := c.Handle(subj, "", echoHandler("h1")); err != nil {
		t.Fatal(err)
	}
	err := c.Call(callCtx(t, 5*time.Second), subj, echoReq{Panic: true}, nil)
	var re *bus.RemoteError
	if !errors.As(err, &re) || re.Code != bus.CodeInternal || !strings.Contains(re.Message, "boom") {
		t.Fatalf("err = %v, want an internal remote error mentioning the panic", err)
	}
	// A panicking cast handler does not stop the server either.
	if err := c.Cast(t.Context(), subj, echoReq{Panic: true}); err != nil {
		t.Fatal(err)
	}
	var resp echoResp
	if err := c.Call(callCtx(t, 5*time.Second), subj, echoReq{Text: "still here"}, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Text != "still here" {
		t.Fatalf("resp = %+v", resp)
	}
}

func TestPublishSubscribe(t *testing.T) {
	_, c, _, _ := setup(t)
	got := make(chan string, 10)
	sub, err := c.Subscribe(bus.NotificationSubject("instance.>"), func(data json.RawMessage) {
		var ev struct{ Event string }
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Error(err)
		}
		if ev.Event == "panic" {
			panic("subscriber bug")
		}
		got <- ev.Event
	})
	if err != nil {
		t.Fatal(err)
	}
	events := []string{"create.start", "panic", "create.end", "delete"}
	for _, e := range events {
		if err := c.Publish(t.Context(), bus.NotificationSubject("instance."+e), map[string]string{"event": e}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"create.start", "create.end", "delete"} {
		select {
		case e := <-got:
			if e != want {
				t.Fatalf("got %q, want %q (in order)", e, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("notification %q not delivered", want)
		}
	}
	if err := sub.Drain(); err != nil {
		t.Fatal(err)
	}
}

func TestReconnectAfterServerRestart(t *testing.T) {
	log := testLog(t)
	creds := testCreds(t)
	s1 := startServer(t, log, creds, 0)
	port := portOf(t, s1)
	agent := connect(t, log, s1.URL(), creds, "agent")
	caller := connect(t, log, s1.URL(), creds, "conductor")
	subj := bus.ComputeSubject("host1", "echo")
	if _, err := agent.Handle(subj, "", echoHandler("agent")); err != nil {
		t.Fatal(err)
	}
	if err := caller.Call(callCtx(t, 5*time.Second), subj, echoReq{Text: "before"}, nil); err != nil {
		t.Fatal(err)
	}

	s1.Shutdown()
	testenv.Poll(t, "caller notices the outage", func() error {
		if caller.IsConnected() {
			return errors.New("still connected")
		}
		return nil
	})
	start := time.Now()
	err := caller.Call(callCtx(t, 5*time.Second), subj, echoReq{Text: "during"}, nil)
	if !errors.Is(err, bus.ErrUnavailable) || !errors.Is(err, bus.ErrNotDelivered) || time.Since(start) > time.Second {
		t.Fatalf("call while disconnected: %v after %s, want a fast ErrUnavailable+ErrNotDelivered", err, time.Since(start))
	}
	if err := caller.Cast(t.Context(), subj, echoReq{}); !errors.Is(err, bus.ErrNotDelivered) {
		t.Fatalf("cast while disconnected: %v, want ErrNotDelivered", err)
	}

	s2 := startServer(t, log, creds, port)
	if s2.URL() != s1.URL() {
		t.Fatalf("restarted on %s, want %s", s2.URL(), s1.URL())
	}
	restarted := time.Now()
	var resp echoResp
	testenv.Poll(t, "call after restart", func() error {
		return caller.Call(callCtx(t, time.Second), subj, echoReq{Text: "after"}, &resp)
	})
	t.Logf("working again %s after the restart", time.Since(restarted).Round(time.Millisecond))
	if resp.Text != "after" {
		t.Fatalf("resp = %+v", resp)
	}
}

func TestClusterURLList(t *testing.T) {
	log := testLog(t)
	creds := testCreds(t)
	a := startServer(t, log, creds, 0)
	b := startServer(t, log, creds, 0)
	c := connect(t, log, a.URL()+", "+b.URL(), creds, "multi")
	subj := bus.ComputeSubject("host1", "echo")
	if _, err := c.Handle(subj, "", echoHandler("self")); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(callCtx(t, 5*time.Second), subj, echoReq{Text: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	// Fail over: stop whichever server the connection uses.
	first := c.ConnectedURL()
	var other string
	switch first {
	case a.URL():
		a.Shutdown()
		other = b.URL()
	case b.URL():
		b.Shutdown()
		other = a.URL()
	default:
		t.Fatalf("connected to %q, neither %s nor %s", first, a.URL(), b.URL())
	}
	testenv.Poll(t, "call after failover", func() error {
		return c.Call(callCtx(t, time.Second), subj, echoReq{Text: "y"}, nil)
	})
	if got := c.ConnectedURL(); got != other {
		t.Fatalf("connected to %s after failover, want %s", got, other)
	}
}

func TestClosedConn(t *testing.T) {
	_, c, _, _ := setup(t)
	c.Close()
	err := c.Call(callCtx(t, time.Second), bus.ConductorSubject("x"), nil, nil)
	if err == nil || errors.Is(err, bus.ErrUnavailable) {
		t.Fatalf("call on a closed conn: %v", err)
	}
	if err := c.Cast(t.Context(), bus.ConductorSubject("x"), nil); err == nil {
		t.Fatal("cast on a closed conn succeeded")
	}
}

func TestSubjects(t *testing.T) {
	if got := bus.ComputeSubject("node-1", "live_migration"); got != "keel.compute.node-1.live_migration" {
		t.Fatal(got)
	}
	if got := bus.ConductorSubject("migration_done"); got != "keel.conductor.migration_done" {
		t.Fatal(got)
	}
	if got := bus.NotificationSubject("instance.create.end"); got != "keel.notify.instance.create.end" {
		t.Fatal(got)
	}
	for _, ok := range []string{"node-1", "compute_07", "HOST"} {
		if err := bus.ValidHostName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "node1.example.com", "node*", "a>b", "node 1", "node\t1", ">"} {
		if err := bus.ValidHostName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestErrorCodes(t *testing.T) {
	base := errors.New("x")
	if got := bus.ErrorCode(nil); got != "" {
		t.Fatalf("ErrorCode(nil) = %q", got)
	}
	if got := bus.ErrorCode(base); got != bus.CodeInternal {
		t.Fatalf("plain error: %q", got)
	}
	err := fmt.Errorf("context: %w", bus.WithCode(bus.CodeConflict, base))
	if got := bus.ErrorCode(err); got != bus.CodeConflict || !errors.Is(err, base) || err.Error() != "context: x" {
		t.Fatalf("wrapped WithCode: %q, %v", got, err)
	}
	if bus.WithCode(bus.CodeInvalid, nil) != nil {
		t.Fatal("WithCode(code, nil) != nil")
	}
	if !bus.IsCode(bus.ErrUnavailable, bus.CodeUnavailable) {
		t.Fatal("ErrUnavailable's code")
	}
	if bus.IsCode(nil, bus.CodeInternal) {
		t.Fatal("IsCode(nil)")
	}
	if err := bus.Decode(json.RawMessage(`{"text": 1}`), &echoReq{}); !bus.IsCode(err, bus.CodeInvalid) {
		t.Fatalf("Decode: %v", err)
	}
	if err := bus.Decode(nil, &echoReq{}); !bus.IsCode(err, bus.CodeInvalid) {
		t.Fatalf("Decode(nil): %v", err)
	}
}

// TestRepeatedCallRunsOnce: a call whose connection drops while the
// handler runs fails at once with ErrConnectionLost (not at its deadline);
// sent again with the same request id after the NATS server is back, it
// gets the first run's answer and the handler has run once. Another id
// runs it again.
func TestRepeatedCallRunsOnce(t *testing.T) {
	log := testLog(t)
	creds := testCreds(t)
	s1 := startServer(t, log, creds, 0)
	port := portOf(t, s1)
	agent := connect(t, log, s1.URL(), creds, "agent")
	caller := connect(t, log, s1.URL(), creds, "conductor")
	subj := bus.ComputeSubject("host1", "build")
	var runs atomic.Int64
	started, release := make(chan struct{}, 1), make(chan struct{})
	if _, err := agent.Handle(subj, "", func(ctx context.Context, data json.RawMessage) (any, error) {
		n := runs.Add(1)
		started <- struct{}{}
		<-release
		return echoResp{Text: fmt.Sprint(n)}, nil
	}); err != nil {
		t.Fatal(err)
	}

	ctx := bus.WithRequestID(callCtx(t, 20*time.Second), bus.NewRequestID())
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- caller.Call(ctx, subj, echoReq{}, nil) }()
	<-started
	s1.Shutdown()
	err := <-errc
	if !errors.Is(err, bus.ErrUnavailable) || !errors.Is(err, bus.ErrConnectionLost) || errors.Is(err, bus.ErrNotDelivered) {
		t.Fatalf("call cut by the outage: %v; want ErrUnavailable and ErrConnectionLost, not ErrNotDelivered", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("call cut by the outage failed after %s; want at once, not at its deadline", d)
	}
	close(release) // the handler ends while the bus is down: its answer is kept

	startServer(t, log, creds, port)
	var resp echoResp
	testenv.Poll(t, "the repeated call", func() error { return caller.Call(ctx, subj, echoReq{}, &resp) })
	if resp.Text != "1" || runs.Load() != 1 {
		t.Fatalf("repeat answered %q with %d runs; want the first run's answer (1) and one run", resp.Text, runs.Load())
	}
	if agent.RepeatedCalls() < 1 {
		t.Errorf("RepeatedCalls = %d, want ≥ 1", agent.RepeatedCalls())
	}
	started2 := make(chan struct{})
	go func() { <-started; close(started2) }()
	if err := caller.Call(bus.WithRequestID(callCtx(t, 5*time.Second), bus.NewRequestID()), subj, echoReq{}, &resp); err != nil || resp.Text != "2" {
		t.Fatalf("a new request id: %v, %q; want the handler run again (2)", err, resp.Text)
	}
	<-started2
}

// TestAttemptTimeRepeatsWithoutRerunning: an attempt that waits longer
// than its attempt time fails with ErrNoAnswerYet while the handler goes
// on with the call's whole deadline; repeats with the same request id wait
// for that first run's answer, and the handler runs once.
func TestAttemptTimeRepeatsWithoutRerunning(t *testing.T) {
	_, c, _, _ := setup(t)
	subj := bus.ComputeSubject("host1", "slow")
	var runs atomic.Int64
	var handlerDeadline atomic.Int64
	if _, err := c.Handle(subj, "", func(ctx context.Context, data json.RawMessage) (any, error) {
		runs.Add(1)
		if dl, ok := ctx.Deadline(); ok {
			handlerDeadline.Store(int64(time.Until(dl)))
		}
		time.Sleep(700 * time.Millisecond)
		return echoResp{Text: "done"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx := bus.WithAttempt(bus.WithRequestID(callCtx(t, 10*time.Second), bus.NewRequestID()), 200*time.Millisecond)
	start := time.Now()
	err := c.Call(ctx, subj, echoReq{}, nil)
	if !errors.Is(err, bus.ErrNoAnswerYet) || !errors.Is(err, bus.ErrUnavailable) || time.Since(start) > 600*time.Millisecond {
		t.Fatalf("first attempt: %v after %s; want ErrNoAnswerYet after about 200ms", err, time.Since(start))
	}
	if d := time.Duration(handlerDeadline.Load()); d < 5*time.Second {
		t.Errorf("handler's deadline %s away; want the call's whole 10s, not the attempt's", d)
	}
	var resp echoResp
	attempts := 1
	for {
		attempts++
		err := c.Call(ctx, subj, echoReq{}, &resp)
		if err == nil {
			break
		}
		if !errors.Is(err, bus.ErrNoAnswerYet) {
			t.Fatalf("repeat: %v", err)
		}
	}
	if resp.Text != "done" || runs.Load() != 1 {
		t.Fatalf("after %d attempts: %q, %d runs; want the answer and one run", attempts, resp.Text, runs.Load())
	}
}
