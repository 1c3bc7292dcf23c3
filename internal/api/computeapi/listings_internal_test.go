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
	build := func(context.Context) ([]byte, int, error) {
		advance(12 * time.Second) // the build takes longer than the stale bound
		return []byte("rebuilt"), 5, nil
	}
	serve := func() (bool, string) {
		rec := httptest.NewRecorder()
		ok := c.serve(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/os-hypervisors/detail", nil), "k", build)
		return ok, rec.Body.String()
	}
	c.keep("k", []byte("first"), 5, clock())
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
