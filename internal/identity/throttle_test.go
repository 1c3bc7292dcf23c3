package identity

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFailedLoginsAreThrottled: after five wrong passwords for admin from
// one address, the sixth attempt (even with the right password) gets 429
// with Retry-After and costs no password check; another user from the
// same address still logs in; a minute later admin may try again.
func TestFailedLoginsAreThrottled(t *testing.T) {
	ts := newTestServer(t)
	for i := range maxFailures {
		if r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(adminByName, "wrong", "")); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d", i, r.status)
		}
	}
	r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(adminByName, testPassword, ""))
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("after %d failures: %d, want 429", maxFailures, r.status)
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(demoByName, testPassword, "")); r.status != http.StatusCreated {
		t.Fatalf("demo from the same address: %d, want 201", r.status)
	}
	// Scope errors with the right password are not guesses.
	for range maxFailures + 1 {
		if r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(demoByName, testPassword, projectScope("admin"))); r.status != http.StatusUnauthorized {
			t.Fatalf("demo on admin's project: %d, want 401", r.status)
		}
	}
	ts.clk.Advance(failWindow)
	if r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(adminByName, testPassword, "")); r.status != http.StatusCreated {
		t.Fatalf("admin a minute later: %d, want 201", r.status)
	}
}

// TestLoginFloodLeavesOtherRequestsFast: while many wrong-password logins
// for different users run at once, a request that needs no password check
// (validating a token) is not held behind them: password checks queue on
// a few slots, the rest of the API does not.
func TestLoginFloodLeavesOtherRequestsFast(t *testing.T) {
	old := hashIterations
	hashIterations = 20_000 // costlier than the tests' usual hash, so the flood is a real load
	t.Cleanup(func() { hashIterations = old })
	ts := newTestServer(t)
	tok, _ := ts.login(t, adminByName, "")
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := `{"name": "nobody` + strconv.Itoa(i) + `", "domain": {"name": "Default"}}`
			for {
				select {
				case <-done:
					return
				default:
				}
				// Errors are the flood's own business; the probe below is checked.
				if resp, err := ts.Client().Post(ts.URL+"/identity/v3/auth/tokens", "application/json", strings.NewReader(passwordAuth(user, "x", ""))); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	defer wg.Wait()
	defer close(done)
	time.Sleep(200 * time.Millisecond)
	var worst time.Duration
	for range 20 {
		start := time.Now()
		if r := ts.do(t, "GET", "/probe", "", "X-Auth-Token", tok); r.status != 200 {
			t.Fatalf("probe during the flood: %d", r.status)
		}
		worst = max(worst, time.Since(start))
	}
	t.Logf("worst token-checked request during a 16-way login flood: %v", worst)
	if worst > 2*time.Second {
		t.Fatalf("a token-checked request took %v during a login flood", worst)
	}
}

// TestConcurrentGuessesAreBounded: wrong passwords for one user sent all
// at once (20, 40, 100), or four at a time, get at most maxFailures
// password checks per window; the rest are 429 without a check.
func TestConcurrentGuessesAreBounded(t *testing.T) {
	old := hashIterations
	hashIterations = 20_000 // a check as long as a real one takes on a busy machine: the window a racing attempt slipped through
	t.Cleanup(func() { hashIterations = old })
	for _, c := range []struct {
		name           string
		workers, total int
	}{
		{"20 at once", 20, 20},
		{"40 at once", 40, 40},
		{"100 at once", 100, 100},
		{"4 at a time", 4, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := newTestServer(t)
			before := passwordChecks.Load()
			var (
				mu     sync.Mutex
				counts = map[int]int{}
				wg     sync.WaitGroup
				start  = make(chan struct{})
				left   = make(chan struct{}, c.total)
			)
			for range c.total {
				left <- struct{}{}
			}
			close(left)
			for range c.workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range left {
						resp, err := ts.Client().Post(ts.URL+"/identity/v3/auth/tokens", "application/json", strings.NewReader(passwordAuth(adminByName, "wrong", "")))
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
						mu.Lock()
						counts[resp.StatusCode]++
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			checks := passwordChecks.Load() - before
			t.Logf("%d attempts, %d workers: %v, %d password checks", c.total, c.workers, counts, checks)
			if counts[http.StatusUnauthorized] > maxFailures || checks > maxFailures {
				t.Errorf("%d wrong passwords checked (%d answered 401), want at most %d", checks, counts[http.StatusUnauthorized], maxFailures)
			}
			if counts[http.StatusUnauthorized]+counts[http.StatusTooManyRequests] != c.total {
				t.Errorf("answers %v: want only 401 and 429", counts)
			}
		})
	}
}

// TestThrottleKeyIsTheUser: once admin is locked out by name, attempts
// naming admin by id, or by id and name, are 429 too (one key per user,
// not per spelling); another user is not locked.
func TestThrottleKeyIsTheUser(t *testing.T) {
	ts := newTestServer(t)
	admin, ok := ts.iss.dir().UserByName(DefaultDomainID, "admin")
	if !ok {
		t.Fatal("no admin")
	}
	for i := range maxFailures {
		if r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(adminByName, "wrong", "")); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d", i, r.status)
		}
	}
	before := passwordChecks.Load()
	for what, user := range map[string]string{
		"by id":          fmt.Sprintf(`{"id": %q}`, admin.ID),
		"by id and name": fmt.Sprintf(`{"id": %q, "name": "admin", "domain": {"id": "default"}}`, admin.ID),
		"by domain id":   `{"name": "admin", "domain": {"id": "default"}}`,
	} {
		for _, pw := range []string{"wrong", testPassword} {
			if r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(user, pw, "")); r.status != http.StatusTooManyRequests {
				t.Errorf("admin %s (password %q) once locked by name: %d, want 429", what, pw, r.status)
			}
		}
	}
	if n := passwordChecks.Load() - before; n != 0 {
		t.Errorf("%d password checks for a locked-out user", n)
	}
	if r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(demoByName, testPassword, "")); r.status != http.StatusCreated {
		t.Errorf("demo: %d, want 201", r.status)
	}
}
