package identity

import (
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
