package identity

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Failed logins are throttled per user name and client address: after
// maxFailures wrong passwords within failWindow, that pair gets 429 with
// Retry-After until the window has passed, without a password check (each
// costs a tenth of a second of CPU). A right password does not reset the
// count early, so guessing cannot be interleaved with a known login.
const (
	maxFailures = 5
	failWindow  = time.Minute
	maxTracked  = 10000 // pairs kept before old windows are dropped
)

type throttle struct {
	mu    sync.Mutex
	fails map[string]*failCount
}

type failCount struct {
	n     int
	since time.Time
}

func throttleKey(r *http.Request, user string) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return user + "\x00" + host
}

// wait is how long key must wait before its next attempt (0: go ahead).
func (t *throttle) wait(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fails[key]
	if f == nil || now.Sub(f.since) >= failWindow {
		return 0
	}
	if f.n >= maxFailures {
		return failWindow - now.Sub(f.since)
	}
	return 0
}

// failed counts a wrong password for key.
func (t *throttle) failed(key string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fails == nil {
		t.fails = map[string]*failCount{}
	}
	if len(t.fails) >= maxTracked {
		for k, f := range t.fails {
			if now.Sub(f.since) >= failWindow {
				delete(t.fails, k)
			}
		}
	}
	f := t.fails[key]
	if f == nil || now.Sub(f.since) >= failWindow {
		f = &failCount{since: now}
		t.fails[key] = f
	}
	f.n++
}

// tooMany answers 429 with Retry-After (whole seconds, at least 1).
func tooMany(w http.ResponseWriter, wait time.Duration) {
	secs := int(wait.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	WriteError(w, http.StatusTooManyRequests, "Too many failed logins for this user from this address; try again in "+strconv.Itoa(secs)+" seconds.")
}
