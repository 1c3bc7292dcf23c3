package computeapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// A hypervisor listing that is not paged (before 2.33, or with a
// hostname pattern) shows every host: at 10,000 hosts that is megabytes
// of JSON built from every host's record and service, far more than one
// call's budget. Such a listing of more than listingCacheAbove hosts is
// kept encoded and served again: a kept listing younger than
// listingFresh is served as it is; an older one is served too while one
// rebuild runs in the background; one whose last build ended
// listingStale ago or more is rebuilt before it is served. So a large
// listing shows the hosts as they were at most listingStale ago, or one
// build's time past listingFresh when builds are slower than that (an
// overloaded server's: judged by when a 12 s build had started, the
// listing it kept was dropped as stale and the next caller waited for a
// build of its own); their heartbeats and reports are report_interval,
// 10 s, apart anyway. Its cost is about one build per listingFresh
// however often it is asked for, and a cloud of at most
// listingCacheAbove hosts (every test's) is always read afresh.
const (
	listingCacheAbove = maxLimit
	listingFresh      = 2 * time.Second
	listingStale      = 10 * time.Second
	// listingBuildTimeout bounds one background rebuild.
	listingBuildTimeout = time.Minute
)

// listingCache keeps the large unpaged hypervisor listings, encoded, by
// what they depend on (the microversion, detail or not, the query).
type listingCache struct {
	above        int // only listings of more hosts than this are kept
	fresh, stale time.Duration
	now          func() time.Time

	mu    sync.Mutex
	byKey map[string]*keptListing
	built int // listings built while kept ones served (tests read it)
}

// keptListing is one encoded listing, when its build started (what it
// shows) and when it ended (how long nobody has asked for it since).
type keptListing struct {
	body     []byte
	at, done time.Time
	building bool
}

func newListingCache(now func() time.Time) *listingCache {
	return &listingCache{above: listingCacheAbove, fresh: listingFresh, stale: listingStale, now: now, byKey: map[string]*keptListing{}}
}

// listingBuild builds a listing: its encoded body and how many hosts it
// shows.
type listingBuild func(ctx context.Context) (body []byte, hosts int, err error)

// serve writes the listing kept under key if it is younger than stale
// (starting a background rebuild if it is older than fresh) and reports
// whether it did; otherwise the caller builds it and offers it to keep.
func (c *listingCache) serve(w http.ResponseWriter, r *http.Request, key string, build listingBuild) bool {
	c.mu.Lock()
	now := c.now()
	for k, e := range c.byKey {
		if !e.building && now.Sub(e.done) >= c.stale {
			delete(c.byKey, k) // nobody asked for it lately: not kept
		}
	}
	e := c.byKey[key]
	if e == nil {
		c.mu.Unlock()
		return false
	}
	body := e.body
	if now.Sub(e.at) >= c.fresh && !e.building {
		e.building = true
		// The rebuild outlives the request, not its values (caller,
		// microversion).
		ctx := context.WithoutCancel(r.Context())
		go c.rebuild(ctx, key, now, build)
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return true
}

// rebuild builds the listing under key again, in the background.
func (c *listingCache) rebuild(ctx context.Context, key string, at time.Time, build listingBuild) {
	ctx, cancel := context.WithTimeout(ctx, listingBuildTimeout)
	defer cancel()
	body, hosts, err := build(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.built++
	e := c.byKey[key]
	if e == nil {
		return
	}
	e.building = false
	e.done = c.now()
	if !e.at.Before(at) {
		return // a newer one was kept meanwhile
	}
	if err != nil || hosts <= c.above {
		delete(c.byKey, key) // the next call builds it and answers the error
		return
	}
	e.body, e.at = body, at
}

// keep keeps a listing built at at that shows hosts hosts, if it is
// large.
func (c *listingCache) keep(key string, body []byte, hosts int, at time.Time) {
	if hosts <= c.above {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[key]; e != nil && !e.at.Before(at) {
		return
	}
	c.byKey[key] = &keptListing{body: body, at: at, done: c.now()}
}

// encodeBody encodes a response body as writeJSON does.
func encodeBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// now is the API's clock's time (the real time without one).
func (b *base) now() time.Time {
	if b.clock == nil {
		return time.Now()
	}
	return b.clock.Now()
}
