package computeapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"keel/internal/testenv"
)

// TestSlowRebuildStaysKept: a background rebuild that took longer than
// the stale bound (an overloaded server at 5,000 hosts took 10 s and
// more) keeps its listing for the next call, which is served at once and
// starts the next rebuild. Before, the listing it kept was judged by when
// the build had started, dropped as stale, and the next caller waited
// for a build of its own (os-hypervisors/detail p99 5–13 s).
func TestSlowRebuildStaysKept(t *testing.T) {
	ctx := testenv.Context(t)
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	c := newListingCache(clock)
	c.above = 1
	c.warmEvery = 0 // the fake clock's time only: no background warming
	build := func(context.Context) ([]byte, int, error) {
		advance(12 * time.Second) // the build takes longer than the stale bound
		return []byte("rebuilt"), 5, nil
	}
	serve := func() (bool, string) {
		rec := httptest.NewRecorder()
		ok := c.serve(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/os-hypervisors/detail", nil), "k", build)
		return ok, rec.Body.String()
	}
	c.keep(ctx, "k", []byte("first"), 5, clock(), build)
	advance(3 * time.Second) // past the fresh age: served, rebuilt behind
	if ok, body := serve(); !ok || body != "first" {
		t.Fatalf("past the fresh age: served %v %q, want the kept listing", ok, body)
	}
	builtAtLeast := func(n int) func() error {
		return func() error {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.built < n {
				return fmt.Errorf("%d rebuilds ended, want %d", c.built, n)
			}
			return nil
		}
	}
	testenv.Poll(t, "the background rebuild to end", builtAtLeast(1))
	advance(time.Second)
	if ok, body := serve(); !ok || body != "rebuilt" {
		t.Fatalf("a second after a 12 s rebuild ended: served %v %q, want the rebuilt listing at once", ok, body)
	}
	// Nobody asks for it for the stale bound after its last build ended:
	// it is not kept, and the next call builds it.
	testenv.Poll(t, "the second rebuild to end", builtAtLeast(2))
	advance(10 * time.Second)
	if ok, _ := serve(); ok {
		t.Error("10 s after the last build ended with nobody asking: served from the cache, want it built afresh")
	}
}

// TestQuietListingKeptWarm: a large listing asked for lately is rebuilt
// in the background while nobody asks (the fleet's ramp, an operator's
// dashboard polling once a minute), so the first call after a quiet
// spell is served at once, no older than the stale bound. Before, a
// listing nobody asked for over the stale bound was dropped, and that
// call built 10,000 hosts' listing itself (1.1–4.5 s at 10,000 hosts).
func TestQuietListingKeptWarm(t *testing.T) {
	ctx := testenv.Context(t)
	c := newListingCache(time.Now)
	c.above, c.fresh, c.stale, c.warmEvery = 1, 20*time.Millisecond, 300*time.Millisecond, 20*time.Millisecond
	var mu sync.Mutex
	builds := 0
	build := func(context.Context) ([]byte, int, error) {
		mu.Lock()
		defer mu.Unlock()
		builds++
		return fmt.Appendf(nil, "build %d", builds), 5, nil
	}
	serve := func() (bool, string) {
		rec := httptest.NewRecorder()
		ok := c.serve(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/os-hypervisors/detail", nil), "k", build)
		return ok, rec.Body.String()
	}
	c.keep(ctx, "k", []byte("first"), 5, time.Now(), build)
	if ok, _ := serve(); !ok {
		t.Fatal("a fresh kept listing was not served")
	}
	quiet := time.Now()
	testenv.Poll(t, "a quiet spell of three stale bounds", func() error {
		if d := time.Since(quiet); d < 3*c.stale {
			return fmt.Errorf("%s quiet", d)
		}
		return nil
	})
	t0 := time.Now()
	ok, body := serve()
	if !ok || body == "first" {
		t.Fatalf("after %s nobody asked: served %v %q, want a listing rebuilt meanwhile", 3*c.stale, ok, body)
	}
	c.mu.Lock()
	age := t0.Sub(c.byKey["k"].at)
	c.mu.Unlock()
	if age >= c.stale+c.fresh {
		t.Errorf("the listing served after the quiet spell was %s old, want under %s", age, c.stale+c.fresh)
	}
}
