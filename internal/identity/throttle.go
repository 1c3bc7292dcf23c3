package identity

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Failed logins are throttled per user and client address: at most
// maxFailures password checks that fail within failWindow, then that pair
// gets 429 with Retry-After until the window has passed, without a
// password check (each costs a tenth of a second of CPU). The user is the
// one the request resolves to, however it was named (by id, by name and
// domain, or both); a name nobody has is its own key. An attempt is
// counted before its password is checked — it reserves one of the
// window's checks, and gives it back once the password proves right — so
// however many attempts arrive at once, no more than maxFailures wrong
// passwords are ever checked per window. A right password gives back only
// its own attempt and does not reset the count, so guessing cannot be
// interleaved with a known login.
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

// attempt is one reserved password check: give it back (release) once the
// password proves right.
type attempt struct {
	key   string
	since time.Time // the window it was counted in
}

// throttleKey is the key of user (as resolved) from the request's client
// address.
func throttleKey(r *http.Request, user string) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return user + "\x00" + host
}

// reserve counts one attempt for key at now, before its password is
// checked. It returns the attempt, or how long key must wait when the
// window's checks are all taken (the attempt is then not made).
func (t *throttle) reserve(key string, now time.Time) (attempt, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fails == nil {
		t.fails = map[string]*failCount{}
	}
	f := t.fails[key]
	if f == nil || now.Sub(f.since) >= failWindow {
		if f == nil && len(t.fails) >= maxTracked {
			for k, old := range t.fails {
				if now.Sub(old.since) >= failWindow {
					delete(t.fails, k)
				}
			}
		}
		f = &failCount{since: now}
		t.fails[key] = f
	}
	if f.n >= maxFailures {
		return attempt{}, failWindow - now.Sub(f.since)
	}
	f.n++
	return attempt{key: key, since: f.since}, 0
}

// release gives back an attempt whose password was right (if its window
// is still the current one).
func (t *throttle) release(a attempt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.fails[a.key]; f != nil && f.since.Equal(a.since) && f.n > 0 {
		f.n--
	}
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
