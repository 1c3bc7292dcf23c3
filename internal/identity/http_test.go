package identity

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// testServer serves the identity API, and behind Require a probe that
// reports the principal, at /probe.
type testServer struct {
	*httptest.Server
	iss *Issuer
	clk *testClock
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	iss, clk := newTestIssuer(t)
	mux := http.NewServeMux()
	ts := &testServer{Server: httptest.NewServer(mux), iss: iss, clk: clk}
	t.Cleanup(ts.Close)
	h := iss.Handler(ts.URL)
	mux.Handle("/identity/", h)
	mux.Handle("/identity", h)
	mux.Handle("/probe", iss.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := PrincipalFrom(r.Context())
		writeJSON(w, http.StatusOK, map[string]any{"ok": ok, "user": p.UserName, "project": p.ProjectName, "roles": p.Roles})
	}), ts.URL, computeError))
	return ts
}

// computeError is the compute API's error shape, to show it plugs in.
func computeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"unauthorized": map[string]any{"code": status, "message": msg}})
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	return m
}

func (ts *testServer) do(t *testing.T, method, path, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k+1 < len(header); k += 2 {
		req.Header.Set(header[k], header[k+1])
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, b}
}

// passwordAuth is a login body; scope is raw JSON or "" for none.
func passwordAuth(user, password, scope string) string {
	k := strings.LastIndex(user, "}")
	s := fmt.Sprintf(`{"auth": {"identity": {"methods": ["password"], "password": {"user": %s, "password": %q}}}`,
		user[:k], password)
	if scope != "" {
		s += `, "scope": ` + scope
	}
	return s + "}}"
}

const (
	adminByName = `{"name": "admin", "domain": {"name": "Default"}}`
	demoByName  = `{"name": "demo", "domain": {"id": "default"}}`
)

func projectScope(name string) string {
	return fmt.Sprintf(`{"project": {"name": %q, "domain": {"name": "Default"}}}`, name)
}

func (ts *testServer) login(t *testing.T, user, scope string) (string, map[string]any) {
	t.Helper()
	r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(user, testPassword, scope))
	if r.status != http.StatusCreated {
		t.Fatalf("login: %d %s", r.status, r.body)
	}
	return r.header.Get("X-Subject-Token"), r.json(t)["token"].(map[string]any)
}

func TestVersionDocuments(t *testing.T) {
	ts := newTestServer(t)
	wantVersion := map[string]any{
		"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
		"links": []any{map[string]any{"rel": "self", "href": ts.URL + "/identity/v3/"}},
		"media-types": []any{map[string]any{
			"base": "application/json", "type": "application/vnd.openstack.identity-v3+json",
		}},
	}
	for _, path := range []string{"/identity", "/identity/"} {
		r := ts.do(t, "GET", path, "")
		if r.status != http.StatusMultipleChoices {
			t.Errorf("GET %s: %d, want 300", path, r.status)
		}
		want := map[string]any{"versions": map[string]any{"values": []any{wantVersion}}}
		if got := r.json(t); !reflect.DeepEqual(got, want) {
			t.Errorf("GET %s:\n got %v\nwant %v", path, got, want)
		}
	}
	for _, path := range []string{"/identity/v3", "/identity/v3/"} {
		r := ts.do(t, "GET", path, "")
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %d %s", path, r.status, r.header.Get("Content-Type"))
		}
		if got := r.json(t); !reflect.DeepEqual(got, map[string]any{"version": wantVersion}) {
			t.Errorf("GET %s: %v", path, got)
		}
		if !strings.HasPrefix(r.header.Get("X-Openstack-Request-Id"), "req-") {
			t.Errorf("GET %s: no request id", path)
		}
	}
	if r := ts.do(t, "GET", "/identity/v2.0", ""); r.status != 404 || r.json(t)["error"] == nil {
		t.Errorf("GET /identity/v2.0: %d %s", r.status, r.body)
	}
}

var keystoneTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

func TestLoginTokenBody(t *testing.T) {
	ts := newTestServer(t)
	tok, body := ts.login(t, adminByName, projectScope("admin"))
	if _, err := ts.iss.Validate(tok); err != nil {
		t.Fatalf("X-Subject-Token does not validate: %v", err)
	}
	dom := map[string]any{"id": "default", "name": "Default"}
	wantUser := map[string]any{"id": adminUser, "name": "admin", "domain": dom, "password_expires_at": nil}
	if !reflect.DeepEqual(body["user"], wantUser) {
		t.Errorf("user %v, want %v", body["user"], wantUser)
	}
	wantProject := map[string]any{"id": adminProject, "name": "admin", "domain": dom}
	if !reflect.DeepEqual(body["project"], wantProject) {
		t.Errorf("project %v, want %v", body["project"], wantProject)
	}
	if got := body["issued_at"]; got != "2026-11-30T12:00:00.123456Z" {
		t.Errorf("issued_at %v", got)
	}
	if got := body["expires_at"]; got != "2026-11-30T13:00:00.123456Z" || !keystoneTime.MatchString(got.(string)) {
		t.Errorf("expires_at %v", got)
	}
	if !reflect.DeepEqual(body["methods"], []any{"password"}) || body["is_domain"] != false {
		t.Errorf("methods %v, is_domain %v", body["methods"], body["is_domain"])
	}
	if a := body["audit_ids"].([]any); len(a) != 1 || len(a[0].(string)) != 22 {
		t.Errorf("audit_ids %v", a)
	}
	wantRoles := []any{
		map[string]any{"id": RoleID("admin"), "name": "admin"},
		map[string]any{"id": RoleID("member"), "name": "member"},
		map[string]any{"id": RoleID("reader"), "name": "reader"},
	}
	if !reflect.DeepEqual(body["roles"], wantRoles) {
		t.Errorf("roles %v", body["roles"])
	}

	_, demo := ts.login(t, demoByName, projectScope("demo"))
	if got := tokenRoleNames(demo); !reflect.DeepEqual(got, []string{"member", "reader"}) {
		t.Errorf("demo roles %v", got)
	}
}

func tokenRoleNames(token map[string]any) []string {
	var out []string
	for _, r := range token["roles"].([]any) {
		out = append(out, r.(map[string]any)["name"].(string))
	}
	return out
}

func TestCatalog(t *testing.T) {
	ts := newTestServer(t)
	_, body := ts.login(t, demoByName, "")
	raw, _ := json.Marshal(body["catalog"])
	var cat []CatalogEntry
	if err := json.Unmarshal(raw, &cat); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"identity":  {"keystone", ts.URL + "/identity/v3"},
		"compute":   {"nova", ts.URL + "/compute/v2.1"},
		"placement": {"placement", ts.URL + "/placement"},
		"image":     {"glance", ts.URL + "/image"},
	}
	if len(cat) != len(want) {
		t.Fatalf("catalog has %d entries, want %d: %s", len(cat), len(want), raw)
	}
	ids := map[string]bool{}
	for _, e := range cat {
		w, ok := want[e.Type]
		if !ok || e.Name != w[0] || !hex32.MatchString(e.ID) || len(e.Endpoints) != 3 {
			t.Errorf("entry %+v", e)
			continue
		}
		// public, internal and admin, all at the one URL (keystonemiddleware
		// looks for internal; clients of admin APIs for admin).
		for k, ep := range e.Endpoints {
			if ep.URL != w[1] || ep.Interface != Interfaces[k] || ep.Region != "RegionOne" || ep.RegionID != "RegionOne" || !hex32.MatchString(ep.ID) || ids[ep.ID] {
				t.Errorf("%s endpoint %+v, want %s at %s", e.Type, ep, Interfaces[k], w[1])
			}
			ids[ep.ID] = true
		}
	}
	// Every field Tempest reads is there under its own name.
	for _, key := range []string{`"type"`, `"name"`, `"id"`, `"endpoints"`, `"interface"`, `"region"`, `"region_id"`, `"url"`} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("catalog lacks %s", key)
		}
	}

	r := ts.do(t, "POST", "/identity/v3/auth/tokens?nocatalog", passwordAuth(demoByName, testPassword, ""))
	if _, has := r.json(t)["token"].(map[string]any)["catalog"]; r.status != 201 || has {
		t.Errorf("nocatalog: %d, catalog present %v", r.status, has)
	}
}

// TestCatalogOptions: configured internal and admin bases move keel's
// endpoints of those interfaces, and another service (Watcher) is listed
// at its URL on all three; /v3/services and /v3/endpoints show the same
// to the admin only.
func TestCatalogOptions(t *testing.T) {
	ts := newTestServer(t)
	ts.iss.Catalog = CatalogOptions{InternalURL: "http://10.0.0.5:8080/", AdminURL: "http://10.0.0.6:8080",
		Services: []Service{{Type: "infra-optim", Name: "watcher", URL: "http://127.0.0.1:9322"}}}
	_, body := ts.login(t, adminByName, projectScope("admin"))
	raw, _ := json.Marshal(body["catalog"])
	var cat []CatalogEntry
	if err := json.Unmarshal(raw, &cat); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range cat {
		for _, ep := range e.Endpoints {
			got[e.Type+"/"+e.Name+"/"+ep.Interface] = ep.URL
		}
	}
	for key, url := range map[string]string{
		"compute/nova/public":          ts.URL + "/compute/v2.1",
		"compute/nova/internal":        "http://10.0.0.5:8080/compute/v2.1",
		"compute/nova/admin":           "http://10.0.0.6:8080/compute/v2.1",
		"identity/keystone/internal":   "http://10.0.0.5:8080/identity/v3",
		"infra-optim/watcher/public":   "http://127.0.0.1:9322",
		"infra-optim/watcher/internal": "http://127.0.0.1:9322",
		"infra-optim/watcher/admin":    "http://127.0.0.1:9322",
	} {
		if got[key] != url {
			t.Errorf("%s: %q, want %q", key, got[key], url)
		}
	}
	if len(got) != 15 {
		t.Errorf("catalog has %d endpoints, want 15: %s", len(got), raw)
	}

	admin, _ := ts.login(t, adminByName, projectScope("admin"))
	demo, _ := ts.login(t, demoByName, "")
	r := ts.do(t, "GET", "/identity/v3/services?type=infra-optim", "", "X-Auth-Token", admin)
	svcs, _ := r.json(t)["services"].([]any)
	if r.status != 200 || len(svcs) != 1 || svcs[0].(map[string]any)["name"] != "watcher" {
		t.Fatalf("services?type=infra-optim: %d %s", r.status, r.body)
	}
	sid := svcs[0].(map[string]any)["id"].(string)
	r = ts.do(t, "GET", "/identity/v3/endpoints?service_id="+sid, "", "X-Auth-Token", admin)
	eps, _ := r.json(t)["endpoints"].([]any)
	if r.status != 200 || len(eps) != 3 {
		t.Fatalf("endpoints?service_id: %d %s", r.status, r.body)
	}
	ep := eps[1].(map[string]any)
	if ep["interface"] != "internal" || ep["url"] != "http://127.0.0.1:9322" || ep["service_id"] != sid || ep["region_id"] != "RegionOne" {
		t.Errorf("endpoint %v", ep)
	}
	if r := ts.do(t, "GET", "/identity/v3/endpoints/"+ep["id"].(string), "", "X-Auth-Token", admin); r.status != 200 {
		t.Errorf("show endpoint: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/identity/v3/services/"+sid, "", "X-Auth-Token", admin); r.status != 200 {
		t.Errorf("show service: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/identity/v3/services/nope", "", "X-Auth-Token", admin); r.status != 404 {
		t.Errorf("show unknown service: %d", r.status)
	}
	for _, path := range []string{"/identity/v3/services", "/identity/v3/endpoints"} {
		if r := ts.do(t, "GET", path, "", "X-Auth-Token", demo); r.status != 403 {
			t.Errorf("%s as demo: %d, want 403", path, r.status)
		}
	}
}

func TestParseService(t *testing.T) {
	if s, err := ParseService(" infra-optim:watcher = http://127.0.0.1:9322/ "); err != nil || s != (Service{"infra-optim", "watcher", "http://127.0.0.1:9322"}) {
		t.Errorf("got %+v, %v", s, err)
	}
	for _, bad := range []string{"", "infra-optim=http://x", ":watcher=http://x", "a:b", "a:b=ftp://x", "a:b=http://"} {
		if _, err := ParseService(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestLoginVariants(t *testing.T) {
	ts := newTestServer(t)
	cases := []struct {
		name, body  string
		wantProject string
	}{
		{"name and domain name", passwordAuth(adminByName, testPassword, projectScope("admin")), adminProject},
		{"name and domain id", passwordAuth(`{"name": "admin", "domain": {"id": "default"}}`, testPassword, projectScope("admin")), adminProject},
		{"domain name any case", passwordAuth(`{"name": "admin", "domain": {"name": "default"}}`, testPassword, projectScope("admin")), adminProject},
		{"user id", passwordAuth(fmt.Sprintf(`{"id": %q}`, demoUser), testPassword, projectScope("demo")), demoProject},
		{"project id", passwordAuth(demoByName, testPassword, fmt.Sprintf(`{"project": {"id": %q}}`, demoProject)), demoProject},
		{"project domain id", passwordAuth(demoByName, testPassword, `{"project": {"name": "demo", "domain": {"id": "default"}}}`), demoProject},
		{"unscoped", passwordAuth(demoByName, testPassword, ""), demoProject},
		{"explicitly unscoped", passwordAuth(adminByName, testPassword, `"unscoped"`), adminProject},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/identity/v3/auth/tokens", c.body)
			if r.status != http.StatusCreated {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if got := r.json(t)["token"].(map[string]any)["project"].(map[string]any)["id"]; got != c.wantProject {
				t.Errorf("project %v, want %v", got, c.wantProject)
			}
		})
	}
}

func TestLoginRefusals(t *testing.T) {
	ts := newTestServer(t)
	cases := []struct {
		name, body string
		status     int
	}{
		{"wrong password", passwordAuth(adminByName, "wrong", projectScope("admin")), 401},
		{"unknown user", passwordAuth(`{"name": "eve", "domain": {"name": "Default"}}`, testPassword, ""), 401},
		{"unknown user id", passwordAuth(`{"id": "0123"}`, testPassword, ""), 401},
		{"unknown domain", passwordAuth(`{"name": "admin", "domain": {"name": "Other"}}`, testPassword, ""), 401},
		{"unknown project", passwordAuth(adminByName, testPassword, projectScope("nowhere")), 401},
		{"unknown project id", passwordAuth(adminByName, testPassword, `{"project": {"id": "0123"}}`), 401},
		{"no role on project", passwordAuth(demoByName, testPassword, projectScope("admin")), 401},
		{"domain scope", passwordAuth(adminByName, testPassword, `{"domain": {"id": "default"}}`), 401},
		{"system scope", passwordAuth(adminByName, testPassword, `{"system": {"all": true}}`), 401},
		{"token method", `{"auth": {"identity": {"methods": ["token"], "token": {"id": "x"}}}}`, 401},
		{"not JSON", `{"auth": `, 400},
		{"no auth", `{}`, 400},
		{"no identity", `{"auth": {}}`, 400},
		{"no methods", `{"auth": {"identity": {"password": {}}}}`, 400},
		{"no password object", `{"auth": {"identity": {"methods": ["password"]}}}`, 400},
		{"no user name or id", passwordAuth(`{"domain": {"id": "default"}}`, testPassword, ""), 400},
		{"name without domain", passwordAuth(`{"name": "admin"}`, testPassword, ""), 400},
		{"no password", `{"auth": {"identity": {"methods": ["password"], "password": {"user": {"id": "x"}}}}}`, 400},
		{"scope not an object", passwordAuth(adminByName, testPassword, `42`), 400},
		{"project name without domain", passwordAuth(adminByName, testPassword, `{"project": {"name": "admin"}}`), 400},
		{"wrong field type", `{"auth": {"identity": {"methods": "password"}}}`, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ts.do(t, "POST", "/identity/v3/auth/tokens", c.body)
			if r.status != c.status {
				t.Fatalf("%d %s, want %d", r.status, r.body, c.status)
			}
			if r.header.Get("X-Subject-Token") != "" {
				t.Error("refusal carries a token")
			}
			e, _ := r.json(t)["error"].(map[string]any)
			if e == nil || e["code"] != float64(c.status) || e["title"] != http.StatusText(c.status) || e["message"] == "" {
				t.Errorf("error body %s", r.body)
			}
			if c.status == 401 {
				if e["message"] != "The request you have made requires authentication." && c.name != "token method" && !strings.Contains(c.name, "scope") {
					t.Errorf("message %q", e["message"])
				}
				if got := r.header.Get("WWW-Authenticate"); got != `Keystone uri="`+ts.URL+`/identity"` {
					t.Errorf("WWW-Authenticate %q", got)
				}
			}
		})
	}
	// The exact 401 body for bad credentials.
	r := ts.do(t, "POST", "/identity/v3/auth/tokens", passwordAuth(adminByName, "wrong", ""))
	want := `{"error":{"code":401,"message":"The request you have made requires authentication.","title":"Unauthorized"}}`
	if strings.TrimSpace(string(r.body)) != want {
		t.Errorf("401 body %s, want %s", r.body, want)
	}
}

func TestValidateTokenEndpoint(t *testing.T) {
	ts := newTestServer(t)
	admin, _ := ts.login(t, adminByName, projectScope("admin"))
	demo, demoBody := ts.login(t, demoByName, "")
	otherIssuer := &Issuer{Key: make([]byte, KeySize), Clock: ts.iss.Clock, Directory: ts.iss.Directory}
	forged, _, _ := otherIssuer.Issue(adminUser, adminProject)

	const path = "/identity/v3/auth/tokens"
	cases := []struct {
		name, caller, subject string
		status                int
	}{
		{"admin checks demo", admin, demo, 200},
		{"demo checks itself", demo, demo, 200},
		{"admin checks itself", admin, admin, 200},
		{"demo checks admin", demo, admin, 403},
		{"forged subject", admin, forged, 404},
		{"garbage subject", admin, "garbage", 404},
		{"no subject", admin, "", 400},
		{"no caller", "", demo, 401},
		{"forged caller", forged, demo, 401},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ts.do(t, "GET", path, "", "X-Auth-Token", c.caller, "X-Subject-Token", c.subject)
			if r.status != c.status {
				t.Fatalf("GET: %d %s, want %d", r.status, r.body, c.status)
			}
			h := ts.do(t, "HEAD", path, "", "X-Auth-Token", c.caller, "X-Subject-Token", c.subject)
			if h.status != c.status || len(h.body) != 0 {
				t.Errorf("HEAD: %d %q, want %d and no body", h.status, h.body, c.status)
			}
			if c.status != 200 {
				return
			}
			if r.header.Get("X-Subject-Token") != c.subject || h.header.Get("X-Subject-Token") != c.subject {
				t.Error("X-Subject-Token not echoed")
			}
			if c.subject == demo {
				if got := r.json(t)["token"]; !reflect.DeepEqual(got, demoBody) {
					t.Errorf("validation body\n %v\nwant the login body\n %v", got, demoBody)
				}
			}
		})
	}
	ts.clk.Advance(2 * time.Hour)
	ts.iss.TTL = 3 * time.Hour
	fresh, _, _ := ts.iss.Issue(adminUser, adminProject)
	if r := ts.do(t, "GET", path, "", "X-Auth-Token", fresh, "X-Subject-Token", demo); r.status != 404 {
		t.Errorf("expired subject: %d, want 404", r.status)
	}
}

func TestRequire(t *testing.T) {
	ts := newTestServer(t)
	admin, _ := ts.login(t, adminByName, projectScope("admin"))
	demo, _ := ts.login(t, demoByName, "")
	tampered := retoken(t, demo, func(b []byte) []byte { b[len(b)-5] ^= 0x40; return b })

	r := ts.do(t, "GET", "/probe", "", "X-Auth-Token", admin)
	if got, want := r.json(t), map[string]any{"ok": true, "user": "admin", "project": "admin", "roles": []any{"admin", "member", "reader"}}; r.status != 200 || !reflect.DeepEqual(got, want) {
		t.Errorf("admin: %d %v, want %v", r.status, got, want)
	}
	r = ts.do(t, "GET", "/probe", "", "X-Auth-Token", demo)
	if got := r.json(t); r.status != 200 || got["user"] != "demo" || !reflect.DeepEqual(got["roles"], []any{"member", "reader"}) {
		t.Errorf("demo: %d %v", r.status, got)
	}

	refused := func(name, token string) {
		t.Helper()
		r := ts.do(t, "GET", "/probe", "", "X-Auth-Token", token)
		want := map[string]any{"unauthorized": map[string]any{"code": float64(401), "message": "The request you have made requires authentication."}}
		if r.status != 401 || !reflect.DeepEqual(r.json(t), want) {
			t.Errorf("%s: %d %s", name, r.status, r.body)
		}
		if got := r.header.Get("WWW-Authenticate"); got != `Keystone uri="`+ts.URL+`/identity"` {
			t.Errorf("%s: WWW-Authenticate %q", name, got)
		}
	}
	refused("no token", "")
	refused("garbage", "abc")
	refused("tampered", tampered)
	ts.clk.Advance(time.Hour)
	refused("expired", demo)
}

func TestRequireDefaults(t *testing.T) {
	iss, _ := newTestIssuer(t)
	h := iss.Require(http.NotFoundHandler(), "", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://keel.example:8080/compute/v2.1/servers", nil))
	if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") != `Keystone uri="http://keel.example:8080/identity"` {
		t.Errorf("%d %q", rec.Code, rec.Header().Get("WWW-Authenticate"))
	}
	if !strings.Contains(rec.Body.String(), `"title":"Unauthorized"`) {
		t.Errorf("body %s", rec.Body)
	}
	if _, ok := PrincipalFrom(t.Context()); ok {
		t.Error("principal in a bare context")
	}
}

func TestResources(t *testing.T) {
	ts := newTestServer(t)
	admin, _ := ts.login(t, adminByName, projectScope("admin"))
	demo, _ := ts.login(t, demoByName, "")
	count := func(r response, key string) int { return len(r.json(t)[key].([]any)) }

	cases := []struct {
		name, token, path string
		status            int
		check             func(r response)
	}{
		{"admin lists projects", admin, "/identity/v3/projects", 200, func(r response) {
			if count(r, "projects") != 3 {
				t.Errorf("projects %s", r.body)
			}
		}},
		{"filter by name", admin, "/identity/v3/projects?name=demo", 200, func(r response) {
			p := r.json(t)["projects"].([]any)
			if len(p) != 1 || p[0].(map[string]any)["id"] != demoProject {
				t.Errorf("projects %s", r.body)
			}
		}},
		{"demo may not list projects", demo, "/identity/v3/projects", 403, nil},
		{"demo shows its project", demo, "/identity/v3/projects/" + demoProject, 200, func(r response) {
			if r.json(t)["project"].(map[string]any)["name"] != "demo" {
				t.Errorf("%s", r.body)
			}
		}},
		{"demo may not show admin project", demo, "/identity/v3/projects/" + adminProject, 403, nil},
		{"unknown project", admin, "/identity/v3/projects/nope", 404, nil},
		{"demo shows itself", demo, "/identity/v3/users/" + demoUser, 200, func(r response) {
			u := r.json(t)["user"].(map[string]any)
			if u["name"] != "demo" || u["domain_id"] != "default" {
				t.Errorf("%s", r.body)
			}
		}},
		{"demo may not show admin", demo, "/identity/v3/users/" + adminUser, 403, nil},
		{"admin lists users", admin, "/identity/v3/users", 200, func(r response) {
			if count(r, "users") != 3 || strings.Contains(string(r.body), "pbkdf2") {
				t.Errorf("users %s", r.body)
			}
		}},
		{"demo's projects", demo, "/identity/v3/users/" + demoUser + "/projects", 200, func(r response) {
			if count(r, "projects") != 1 {
				t.Errorf("%s", r.body)
			}
		}},
		{"auth projects", demo, "/identity/v3/auth/projects", 200, func(r response) {
			if count(r, "projects") != 1 {
				t.Errorf("%s", r.body)
			}
		}},
		{"auth catalog", demo, "/identity/v3/auth/catalog", 200, func(r response) {
			if count(r, "catalog") != 4 {
				t.Errorf("%s", r.body)
			}
		}},
		{"roles", demo, "/identity/v3/roles", 200, func(r response) {
			if count(r, "roles") != 3 {
				t.Errorf("%s", r.body)
			}
		}},
		{"role by name", demo, "/identity/v3/roles?name=member", 200, func(r response) {
			if count(r, "roles") != 1 {
				t.Errorf("%s", r.body)
			}
		}},
		{"role by id", demo, "/identity/v3/roles/" + RoleID("reader"), 200, nil},
		{"no token", "", "/identity/v3/projects", 401, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ts.do(t, "GET", c.path, "", "X-Auth-Token", c.token)
			if r.status != c.status {
				t.Fatalf("%d %s, want %d", r.status, r.body, c.status)
			}
			if c.status >= 400 && r.json(t)["error"] == nil {
				t.Errorf("error body %s", r.body)
			}
			if c.check != nil {
				c.check(r)
			}
		})
	}
}

func TestBaseFromRequest(t *testing.T) {
	iss, _ := newTestIssuer(t)
	h := iss.Handler("")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "http://10.1.2.3:5000/identity/v3/auth/tokens",
		strings.NewReader(passwordAuth(demoByName, testPassword, ""))))
	if rec.Code != 201 || !strings.Contains(rec.Body.String(), `"url":"http://10.1.2.3:5000/compute/v2.1"`) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}
