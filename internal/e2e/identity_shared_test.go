package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"keel/internal/identity"
)

// revocationBound is how long a token revoked through one replica may
// still be accepted by another: identity.DefaultRefresh (each replica asks
// the store for a newer directory once a second) plus a store read, with
// slack for a loaded test machine.
const revocationBound = identity.DefaultRefresh + 2*time.Second

// identityCall sends an identity API request to r with token (none if
// ""), and returns the status and the X-Subject-Token answered.
func identityCall(t *testing.T, r *replica, method, path, token string, headers map[string]string, body any) (int, string) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, r.url+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, r.proc.name, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Subject-Token")
}

func passwordLogin(t *testing.T, r *replica, user, password, project string) (int, string) {
	t.Helper()
	return identityCall(t, r, "POST", "/identity/v3/auth/tokens", "", nil, map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{"user": map[string]any{
			"name": user, "domain": map[string]any{"id": "default"}, "password": password}}},
		"scope": map[string]any{"project": map[string]any{"name": project, "domain": map[string]any{"id": "default"}}},
	}})
}

// checkSharedIdentity: a project, user and role made through replica A
// let the user log in through B (whose data dir never held a copy of the
// users), and a token A revokes is refused by B within revocationBound.
func checkSharedIdentity(t *testing.T, sc *scaleCloud) {
	t.Helper()
	a, b := sc.replicas[0], sc.replicas[1]
	if st, _ := passwordLogin(t, b, "carol", "carol-pw", "carolp"); st != 401 {
		t.Fatalf("carol's login on B before she exists: %d, want 401", st)
	}
	admin := a.login()
	if st, _ := identityCall(t, a, "POST", "/identity/v3/projects", admin, nil, map[string]any{"project": map[string]any{"name": "carolp"}}); st != 201 {
		t.Fatalf("creating project carolp on A: %d", st)
	}
	if st, _ := identityCall(t, a, "POST", "/identity/v3/users", admin, nil, map[string]any{"user": map[string]any{"name": "carol", "password": "carol-pw"}}); st != 201 {
		t.Fatalf("creating user carol on A: %d", st)
	}
	path := fmt.Sprintf("/identity/v3/projects/%s/users/%s/roles/member",
		identity.ProjectID(identity.DefaultDomainID, "carolp"), identity.UserID(identity.DefaultDomainID, "carol"))
	if st, _ := identityCall(t, a, "PUT", path, admin, nil, nil); st != 204 {
		t.Fatalf("granting carol member on A: %d", st)
	}
	// Wait for B to see the role assignment through its admin API (a
	// login attempt per poll would trip the failed-login throttle), then
	// log in on B once.
	start := time.Now()
	for {
		if st, _ := identityCall(t, b, "GET", path, b.login(), nil, nil); st == 204 {
			break
		}
		if time.Since(start) > revocationBound {
			t.Fatalf("B does not see carol's role, granted on A, after %v", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("a user and role made on A were seen by B %v after the grant", time.Since(start).Round(time.Millisecond))
	st, tok := passwordLogin(t, b, "carol", "carol-pw", "carolp")
	if st != 201 {
		t.Fatalf("carol, made on A, logs in on B: %d", st)
	}
	servers := func(r *replica) int {
		st, _ := identityCall(t, r, "GET", "/compute/v2.1/servers", tok, nil, nil)
		return st
	}
	if st := servers(b); st != 200 {
		t.Fatalf("carol's token on B: %d", st)
	}
	if st, _ := identityCall(t, a, "DELETE", "/identity/v3/auth/tokens", admin, map[string]string{"X-Subject-Token": tok}, nil); st != 204 {
		t.Fatalf("revoking carol's token on A: %d", st)
	}
	if st := servers(a); st != 401 {
		t.Fatalf("the revoked token on A itself: %d, want 401", st)
	}
	start = time.Now()
	for servers(b) != 401 {
		if time.Since(start) > revocationBound {
			t.Fatalf("B still accepts the token A revoked after %v", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("a token revoked on A was refused by B after %v (bound %v)", time.Since(start).Round(time.Millisecond), revocationBound)
	if st := servers(sc.replicas[2]); st != 401 {
		t.Fatalf("the revoked token on C: %d, want 401", st)
	}
}
