package computeapi_test

import "testing"

// TestServiceForceDownBefore253: PUT /os-services/force-down is Nova's
// path from 2.11 to 2.52 (openstackclient's `compute service set --down`
// at 2.11); it sets forced_down and answers the service as Nova does, is
// unknown outside those microversions, and refuses Nova's bad bodies.
func TestServiceForceDownBefore253(t *testing.T) {
	e := newEnv(t)
	forced := func(version string) any {
		t.Helper()
		var list struct{ Services []map[string]any }
		e.call("GET", "/compute/v2.1/os-services?host=h1", "admin", version, nil, &list)
		if len(list.Services) != 1 {
			t.Fatalf("services of h1: %v", list.Services)
		}
		return list.Services[0]["forced_down"]
	}
	var out map[string]map[string]any
	resp := e.call("PUT", "/compute/v2.1/os-services/force-down", "admin", "2.11", map[string]any{"host": "h1", "binary": "nova-compute", "forced_down": true}, &out)
	if resp.StatusCode != 200 || out["service"]["forced_down"] != true || out["service"]["host"] != "h1" || out["service"]["binary"] != "nova-compute" {
		t.Fatalf("force-down at 2.11: %d %v", resp.StatusCode, out)
	}
	if f := forced("2.11"); f != true {
		t.Fatalf("h1 forced_down after force-down: %v", f)
	}
	resp = e.call("PUT", "/compute/v2.1/os-services/force-down", "admin", "2.52", map[string]any{"host": "h1", "binary": "nova-compute", "forced_down": false}, &out)
	if resp.StatusCode != 200 || out["service"]["forced_down"] != false || forced("2.52") != false {
		t.Fatalf("force-down false at 2.52: %d %v", resp.StatusCode, out)
	}
	for _, c := range []struct {
		version string
		body    map[string]any
		status  int
		key     string
		msg     string
	}{
		{"2.10", map[string]any{"host": "h1", "binary": "nova-compute", "forced_down": true}, 404, "itemNotFound", "Unknown action"},
		{"2.11", map[string]any{"host": "h1", "binary": "nova-compute"}, 400, "badRequest", "Missing forced_down field"},
		{"2.11", map[string]any{"binary": "nova-compute", "forced_down": true}, 400, "badRequest", "Invalid input for the request body: 'host' is a required property"},
		{"2.11", map[string]any{"host": "h1", "binary": "nova-scheduler", "forced_down": true}, 400, "badRequest", "Updating a nova-scheduler service is not supported. Only nova-compute services can be updated."},
		{"2.11", map[string]any{"host": "nohost", "binary": "nova-compute", "forced_down": true}, 404, "itemNotFound", "Compute host nohost could not be found."},
		{"2.11", map[string]any{"host": "h1", "binary": "nova-compute", "forced_down": true, "x": 1}, 400, "badRequest", ""},
	} {
		var errOut map[string]map[string]any
		resp := e.call("PUT", "/compute/v2.1/os-services/force-down", "admin", c.version, c.body, &errOut)
		if resp.StatusCode != c.status || errOut[c.key] == nil || (c.msg != "" && errOut[c.key]["message"] != c.msg) {
			t.Errorf("force-down at %s with %v: %d %v, want %d %s %q", c.version, c.body, resp.StatusCode, errOut, c.status, c.key, c.msg)
		}
	}
	if resp := e.call("PUT", "/compute/v2.1/os-services/force-down", "member", "2.11", map[string]any{"host": "h1", "binary": "nova-compute", "forced_down": true}, nil); resp.StatusCode != 403 {
		t.Errorf("a member's force-down: %d, want 403", resp.StatusCode)
	}
	if forced("2.11") != false {
		t.Errorf("a refused force-down changed h1")
	}
}

// TestExtensions: GET /extensions lists the v2 extensions keel serves,
// to any caller, and shows one by alias (404 for an unknown one).
func TestExtensions(t *testing.T) {
	e := newEnv(t)
	var list struct{ Extensions []map[string]any }
	if resp := e.call("GET", "/compute/v2.1/extensions", "member", "", nil, &list); resp.StatusCode != 200 || len(list.Extensions) < 20 {
		t.Fatalf("extensions: %d, %d of them", resp.StatusCode, len(list.Extensions))
	}
	found := false
	for _, x := range list.Extensions {
		for _, k := range []string{"alias", "name", "description", "namespace", "updated", "links"} {
			if _, ok := x[k]; !ok {
				t.Fatalf("extension %v has no %s", x, k)
			}
		}
		found = found || x["alias"] == "os-services"
	}
	if !found {
		t.Fatalf("os-services is not listed")
	}
	var one struct{ Extension map[string]any }
	if resp := e.call("GET", "/compute/v2.1/extensions/os-hypervisors", "member", "", nil, &one); resp.StatusCode != 200 || one.Extension["name"] != "Hypervisors" {
		t.Fatalf("extension os-hypervisors: %d %v", resp.StatusCode, one)
	}
	if resp := e.call("GET", "/compute/v2.1/extensions/os-networks", "member", "", nil, nil); resp.StatusCode != 404 {
		t.Fatalf("an extension keel does not serve: %d, want 404", resp.StatusCode)
	}
}

// TestRemovedAPIsAreGone: the APIs Nova removed answer 410 in Nova's
// shape, not 404.
func TestRemovedAPIsAreGone(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ method, path string }{
		{"GET", "/compute/v2.1/os-agents"}, {"GET", "/compute/v2.1/os-cells/detail"}, {"POST", "/compute/v2.1/os-networks/add"},
		{"GET", "/compute/v2.1/os-fping"}, {"GET", "/compute/v2.1/servers/x/consoles"}, {"GET", "/compute/v2.1/os-security-group-default-rules"},
	} {
		var out map[string]map[string]any
		resp := e.call(c.method, c.path, "member", "", map[string]any{}, &out)
		if resp.StatusCode != 410 || out["computeFault"]["code"] != float64(410) {
			t.Errorf("%s %s: %d %v, want Nova's 410", c.method, c.path, resp.StatusCode, out)
		}
	}
}

// TestServerPasswordAndNetworkActions: a server's password reads empty and
// clears with 204 for its owner (another project's server is 404);
// resetNetwork is 410 as Nova's, even for a server that does not exist;
// injectNetworkInfo is an admin's 202; the extensions Tempest looks up
// (os-consoles, os-server-password) are listed.
func TestServerPasswordAndNetworkActions(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	if resp := e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "pw", "flavorRef": "1"}}, &created); resp.StatusCode != 202 {
		t.Fatalf("boot: %d", resp.StatusCode)
	}
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")
	var pw map[string]any
	if resp := e.call("GET", "/compute/v2.1/servers/"+id+"/os-server-password", "member", "", nil, &pw); resp.StatusCode != 200 || pw["password"] != "" || len(pw) != 1 {
		t.Errorf("password: %d %v, want 200 {\"password\": \"\"}", resp.StatusCode, pw)
	}
	if resp := e.call("DELETE", "/compute/v2.1/servers/"+id+"/os-server-password", "member", "", nil, nil); resp.StatusCode != 204 {
		t.Errorf("clear password: %d, want 204", resp.StatusCode)
	}
	other := e.call("GET", "/compute/v2.1/servers/"+id+"/os-server-password", "admin", "", nil, nil).StatusCode
	if other != 200 {
		t.Errorf("admin reads the password: %d, want 200", other)
	}
	var fault map[string]map[string]any
	if resp := e.call("GET", "/compute/v2.1/servers/00000000-0000-4000-8000-000000000000/os-server-password", "member", "", nil, &fault); resp.StatusCode != 404 || fault["itemNotFound"] == nil {
		t.Errorf("password of no server: %d %v, want 404", resp.StatusCode, fault)
	}
	for _, c := range []struct {
		server, token, action string
		status                int
	}{
		{id, "admin", "resetNetwork", 410},
		{"00000000-0000-4000-8000-000000000000", "member", "resetNetwork", 410},
		{id, "admin", "injectNetworkInfo", 202},
		{id, "member", "injectNetworkInfo", 403},
		{"00000000-0000-4000-8000-000000000000", "admin", "injectNetworkInfo", 404},
	} {
		if resp := e.call("POST", "/compute/v2.1/servers/"+c.server+"/action", c.token, "", map[string]any{c.action: nil}, nil); resp.StatusCode != c.status {
			t.Errorf("%s by %s on %s: %d, want %d", c.action, c.token, c.server, resp.StatusCode, c.status)
		}
	}
	for _, alias := range []string{"os-consoles", "os-server-password"} {
		var one struct{ Extension map[string]any }
		if resp := e.call("GET", "/compute/v2.1/extensions/"+alias, "member", "", nil, &one); resp.StatusCode != 200 || one.Extension["alias"] != alias {
			t.Errorf("extension %s: %d %v", alias, resp.StatusCode, one)
		}
	}
}
