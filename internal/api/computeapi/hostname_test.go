package computeapi_test

import "testing"

// TestRequestedHostname: from 2.90 create, update and rebuild take a
// hostname (Nova's pattern, 2–63 characters), refused before; every
// caller sees OS-EXT-SRV-ATTR:hostname from 2.90 (only admins before,
// from 2.3). Without one the hostname is the name sanitized as Nova does,
// kept from the create: a rename does not change it.
func TestRequestedHostname(t *testing.T) {
	e := newEnv(t)
	create := func(version string, server map[string]any) (int, string, string) {
		t.Helper()
		server["flavorRef"], server["imageRef"], server["networks"] = "1", "img", "none"
		var out map[string]map[string]any
		resp := e.call("POST", "/compute/v2.1/servers", "member", version, map[string]any{"server": server}, &out)
		id, _ := out["server"]["id"].(string)
		msg, _ := out["badRequest"]["message"].(string)
		return resp.StatusCode, id, msg
	}
	hostnameOf := func(id, token, version string) (any, bool) {
		t.Helper()
		var show struct{ Server map[string]any }
		e.call("GET", "/compute/v2.1/servers/"+id, token, version, nil, &show)
		h, ok := show.Server["OS-EXT-SRV-ATTR:hostname"]
		return h, ok
	}

	for _, c := range []struct {
		version string
		server  map[string]any
		msg     string
	}{
		{"2.89", map[string]any{"name": "a", "hostname": "web-01"}, "Invalid input for field/attribute server. Additional properties are not allowed ('hostname' was unexpected)"},
		{"2.90", map[string]any{"name": "a", "hostname": "w"}, "Invalid input for field/attribute hostname. Value: w. 'w' is too short"},
		{"2.90", map[string]any{"name": "a", "hostname": "web_01"}, "Invalid input for field/attribute hostname. Value: web_01. 'web_01' does not match '^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$'"},
		{"2.90", map[string]any{"name": "a", "hostname": "-web"}, "Invalid input for field/attribute hostname. Value: -web. '-web' does not match '^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$'"},
		{"2.90", map[string]any{"name": "a", "hostname": 7}, "Invalid input for field/attribute hostname. Value: 7. 7 is not of type 'string'"},
		{"2.90", map[string]any{"name": "a", "hostname": "web", "max_count": 2}, "Unable to allocate a single hostname to multiple instances"},
	} {
		if code, _, msg := create(c.version, c.server); code != 400 || msg != c.msg {
			t.Errorf("create at %s with %v: %d %q, want 400 %q", c.version, c.server, code, msg, c.msg)
		}
	}

	code, id, _ := create("2.90", map[string]any{"name": "vm one", "hostname": "Web-01"})
	if code != 202 {
		t.Fatalf("create with a hostname: %d", code)
	}
	e.waitStatus(id, "member", "ACTIVE")
	if h, ok := hostnameOf(id, "member", "2.90"); h != "Web-01" {
		t.Errorf("member at 2.90: hostname %v (shown %t), want Web-01", h, ok)
	}
	if h, ok := hostnameOf(id, "member", "2.89"); ok {
		t.Errorf("member at 2.89 sees hostname %v", h)
	}
	if h, _ := hostnameOf(id, "admin", "2.3"); h != "Web-01" {
		t.Errorf("admin at 2.3: hostname %v, want Web-01", h)
	}

	_, plain, _ := create("2.90", map[string]any{"name": "My Server_1.example"})
	e.waitStatus(plain, "member", "ACTIVE")
	if h, _ := hostnameOf(plain, "member", "2.90"); h != "my-server-1-example" {
		t.Errorf("hostname of %q: %v, want my-server-1-example", "My Server_1.example", h)
	}
	var upd struct{ Server map[string]any }
	e.call("PUT", "/compute/v2.1/servers/"+plain, "member", "2.90", map[string]any{"server": map[string]any{"name": "renamed"}}, &upd)
	if h := upd.Server["OS-EXT-SRV-ATTR:hostname"]; h != "my-server-1-example" {
		t.Errorf("after a rename: hostname %v, want my-server-1-example still", h)
	}
	if resp := e.call("PUT", "/compute/v2.1/servers/"+plain, "member", "2.89", map[string]any{"server": map[string]any{"hostname": "nope"}}, nil); resp.StatusCode != 400 {
		t.Errorf("update of the hostname at 2.89: %d, want 400", resp.StatusCode)
	}
	if resp := e.call("PUT", "/compute/v2.1/servers/"+plain, "member", "2.90", map[string]any{"server": map[string]any{"hostname": "x"}}, nil); resp.StatusCode != 400 {
		t.Errorf("update to hostname x: %d, want 400", resp.StatusCode)
	}
	e.call("PUT", "/compute/v2.1/servers/"+plain, "member", "2.90", map[string]any{"server": map[string]any{"hostname": "db-02"}}, &upd)
	if h := upd.Server["OS-EXT-SRV-ATTR:hostname"]; h != "db-02" {
		t.Errorf("update to db-02 answered hostname %v", h)
	}

	e.act(id, "member", "2.89", map[string]any{"rebuild": map[string]any{"imageRef": "img", "hostname": "rb-1"}}, 400)
	out := e.act(id, "member", "2.90", map[string]any{"rebuild": map[string]any{"imageRef": "img", "hostname": "rb-1"}}, 202)
	if srv, _ := out["server"].(map[string]any); srv["OS-EXT-SRV-ATTR:hostname"] != "rb-1" {
		t.Errorf("rebuild with hostname rb-1 answered %v", srv["OS-EXT-SRV-ATTR:hostname"])
	}
	e.waitStatus(id, "member", "ACTIVE")
	if h, _ := hostnameOf(id, "member", "2.90"); h != "rb-1" {
		t.Errorf("after the rebuild: hostname %v, want rb-1", h)
	}
}
