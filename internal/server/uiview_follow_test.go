package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/records"
	"keel/internal/store/memory"
	"keel/internal/testenv"
)

// gatedRecords is a store whose host record reads wait while the gate is
// closed: a catch-up that would take long.
type gatedRecords struct {
	hostViewStore
	mu   sync.Mutex
	open chan struct{} // nil: open
}

func (g *gatedRecords) close() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedRecords) release() {
	g.mu.Lock()
	close(g.open)
	g.open = nil
	g.mu.Unlock()
}

func (g *gatedRecords) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedRecords) GetHostRecord(ctx context.Context, host string) (records.HostRecord, error) {
	if err := g.wait(ctx); err != nil {
		return records.HostRecord{}, err
	}
	return g.hostViewStore.GetHostRecord(ctx, host)
}

func (g *gatedRecords) ListHostRecords(ctx context.Context) ([]records.HostRecord, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return g.hostViewStore.ListHostRecords(ctx)
}

// TestFollowedViewAnswersWithoutCatchingUp checks the host view the
// server follows in the background (hostView.follow): a hypervisor call
// made while many changes wait to be read (more than viewInlineChanges:
// a fleet's reports since the last follow, or a quiet spell's) is
// answered from the view as the follower last left it, without waiting
// for their reads; the follower brings the view up to date on its own;
// and a call made after a few changes (a test's, an admin's disable)
// sees them at once.
func TestFollowedViewAnswersWithoutCatchingUp(t *testing.T) {
	st := memory.New()
	ctx := testenv.Context(t)
	rec := func(i, round int) records.HostRecord {
		return records.HostRecord{Host: fmt.Sprintf("h%02d", i), VCPUs: 32, VCPUsUsed: int64(round)}
	}
	const hosts = 10
	for i := range hosts {
		if err := st.PutHostRecord(ctx, rec(i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	g := &gatedRecords{hostViewStore: st}
	v := newHostView(g)
	go v.follow(ctx, 20*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	used := func(round int) error {
		recs, _, err := v.ComputeHosts(ctx)
		if err != nil {
			return err
		}
		if len(recs) != hosts {
			return fmt.Errorf("%d hosts, want %d", len(recs), hosts)
		}
		for _, r := range recs {
			if r.VCPUsUsed != int64(round) {
				return fmt.Errorf("%s shows round %d, want %d", r.Host, r.VCPUsUsed, round)
			}
		}
		return nil
	}
	testenv.Poll(t, "the followed view loaded", func() error {
		if !v.followed.Load() {
			return errors.New("not followed yet")
		}
		return used(0)
	})

	g.close()
	round := 0
	for round*hosts <= viewInlineChanges {
		round++
		for i := range hosts {
			if err := st.PutHostRecord(ctx, rec(i, round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The catch-up waits at the gate; the call must not.
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	recs, _, err := v.ComputeHosts(callCtx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call with %d changes unread waited for their catch-up", round*hosts)
	}
	if err != nil || len(recs) != hosts || recs[0].VCPUsUsed != 0 {
		t.Fatalf("a call with the catch-up under way: %d records (first %+v), %v; want the view as last followed", len(recs), recs, err)
	}
	g.release()
	testenv.Poll(t, "the follower caught up", func() error { return used(round) })

	if err := st.PutHostRecord(ctx, rec(3, round+1)); err != nil {
		t.Fatal(err)
	}
	recs, _, err = v.ComputeHosts(ctx)
	if err != nil || recs[3].VCPUsUsed != int64(round+1) {
		t.Fatalf("a call right after one change: %+v, %v; want the change in", recs[3], err)
	}
}

// countedServices counts the listings of every service.
type countedServices struct {
	hostViewStore
	lists atomic.Int64
}

func (c *countedServices) ListServices(ctx context.Context) ([]records.Service, error) {
	c.lists.Add(1)
	return c.hostViewStore.ListServices(ctx)
}

// TestAgentsMetricFromHostView checks that keel_agents counts the compute
// agents up and down (forced down, or unheard of past service_down_time;
// a server replica's service is not an agent) from the host view, not
// from a listing of every service per scrape.
func TestAgentsMetricFromHostView(t *testing.T) {
	ctx := testenv.Context(t)
	st := memory.New()
	now := time.Now()
	for i, s := range []records.Service{
		{Host: "h1", Binary: "nova-compute", LastSeenUp: now},
		{Host: "h2", Binary: "nova-compute", LastSeenUp: now},
		{Host: "h3", Binary: "nova-compute", LastSeenUp: now.Add(-time.Hour)},
		{Host: "h4", Binary: "nova-compute", LastSeenUp: now, ForcedDown: true},
		{Host: records.ServerServiceHost("keel-1"), Binary: records.ServerBinary, LastSeenUp: now},
	} {
		if err := st.PutService(ctx, s); err != nil {
			t.Fatal(i, err)
		}
	}
	c := &countedServices{hostViewStore: st}
	v := newHostView(c)
	h := newMetrics().handler(v, time.Minute, nil)
	scrape := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	body := scrape()
	for _, want := range []string{`keel_agents{state="up"} 2`, `keel_agents{state="down"} 2`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("first scrape: no %q line", want)
		}
	}
	if _, err := st.UpdateService(ctx, "h3", func(s *records.Service) error { s.LastSeenUp = time.Now(); return nil }); err != nil {
		t.Fatal(err)
	}
	before := c.lists.Load()
	body = scrape()
	if !strings.Contains(body, `keel_agents{state="up"} 3`+"\n") {
		t.Errorf("after h3's heartbeat: no up 3 line in\n%s", body)
	}
	if n := c.lists.Load() - before; n != 0 {
		t.Errorf("a scrape listed every service %d times; want the view's few changes read", n)
	}
}
