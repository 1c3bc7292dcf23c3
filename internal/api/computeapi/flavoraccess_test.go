package computeapi_test

import (
	"slices"
	"strings"
	"testing"
)

// flavorIDs lists the flavor ids a caller sees at path.
func (e *env) flavorIDs(path, token string) []string {
	e.t.Helper()
	var out struct {
		Flavors []struct {
			ID       string
			IsPublic *bool `json:"os-flavor-access:is_public"`
		}
	}
	if resp := e.call("GET", path, token, "", nil, &out); resp.StatusCode != 200 {
		e.t.Fatalf("GET %s as %s: %d", path, token, resp.StatusCode)
	}
	var ids []string
	for _, f := range out.Flavors {
		ids = append(ids, f.ID)
	}
	return ids
}

func TestPrivateFlavorsAndAccess(t *testing.T) {
	e := newEnv(t)
	var created struct{ Flavor map[string]any }
	resp := e.call("POST", "/compute/v2.1/flavors", "admin", "", map[string]any{"flavor": map[string]any{
		"name": "secret", "id": "p1", "ram": 512, "vcpus": 1, "disk": 1, "os-flavor-access:is_public": false}}, &created)
	if resp.StatusCode != 200 || created.Flavor["os-flavor-access:is_public"] != false {
		t.Fatalf("create private: %d %v", resp.StatusCode, created)
	}
	var show struct{ Flavor map[string]any }
	if e.call("GET", "/compute/v2.1/flavors/1", "member", "", nil, &show); show.Flavor["os-flavor-access:is_public"] != true {
		t.Fatalf("public flavor's view: %v", show.Flavor)
	}

	// Lists: who sees p1, and with which is_public filter.
	for _, tc := range []struct {
		path, token string
		sees        bool
		others      bool // the public flavors listed too
	}{
		{"/compute/v2.1/flavors", "member", false, true},
		{"/compute/v2.1/flavors/detail", "member", false, true},
		{"/compute/v2.1/flavors/detail?is_public=none", "member", false, true}, // a member's filter is fixed
		{"/compute/v2.1/flavors/detail", "admin", false, true},                 // is_public defaults to true
		{"/compute/v2.1/flavors/detail?is_public=true", "admin", false, true},
		{"/compute/v2.1/flavors/detail?is_public=false", "admin", true, false},
		{"/compute/v2.1/flavors/detail?is_public=None", "admin", true, true},
	} {
		ids := e.flavorIDs(tc.path, tc.token)
		if slices.Contains(ids, "p1") != tc.sees || slices.Contains(ids, "1") != tc.others {
			t.Errorf("%s as %s: %v (private listed: want %v, public: want %v)", tc.path, tc.token, ids, tc.sees, tc.others)
		}
	}
	var fault map[string]map[string]any
	if resp := e.call("GET", "/compute/v2.1/flavors?is_public=maybe", "admin", "", nil, &fault); resp.StatusCode != 400 || fault["badRequest"]["message"] != "Invalid is_public filter [maybe]" {
		t.Errorf("bad is_public: %d %v", resp.StatusCode, fault)
	}

	// Without access a member can neither see nor boot it.
	if resp := e.call("GET", "/compute/v2.1/flavors/p1", "member", "", nil, &fault); resp.StatusCode != 404 {
		t.Errorf("member shows private flavor: %d %v", resp.StatusCode, fault)
	}
	if resp := e.call("GET", "/compute/v2.1/flavors/p1", "admin", "", nil, nil); resp.StatusCode != 200 {
		t.Errorf("admin shows private flavor: %d", resp.StatusCode)
	}
	boot := map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "p1"}}
	if resp := e.call("POST", "/compute/v2.1/servers", "member", "", boot, &fault); resp.StatusCode != 400 {
		t.Fatalf("member boots private flavor: %d %v", resp.StatusCode, fault)
	}

	// The access list and its actions.
	type access struct {
		FlavorAccess []struct {
			FlavorID string `json:"flavor_id"`
			TenantID string `json:"tenant_id"`
		} `json:"flavor_access"`
	}
	var acc access
	if resp := e.call("GET", "/compute/v2.1/flavors/p1/os-flavor-access", "admin", "", nil, &acc); resp.StatusCode != 200 || len(acc.FlavorAccess) != 0 {
		t.Fatalf("empty access list: %d %+v", resp.StatusCode, acc)
	}
	add := map[string]any{"addTenantAccess": map[string]any{"tenant": "p-demo"}}
	remove := map[string]any{"removeTenantAccess": map[string]any{"tenant": "p-demo"}}
	for _, tc := range []struct {
		name, method, path, token string
		body                      any
		status                    int
		fault                     string
	}{
		{"member may not add", "POST", "/compute/v2.1/flavors/p1/action", "member", add, 403, ""},
		{"member may not list", "GET", "/compute/v2.1/flavors/p1/os-flavor-access", "member", nil, 403, ""},
		{"public flavor has no list", "GET", "/compute/v2.1/flavors/1/os-flavor-access", "admin", nil, 404, "Access list not available for public flavors."},
		{"no such flavor", "GET", "/compute/v2.1/flavors/nope/os-flavor-access", "admin", nil, 404, "Flavor nope could not be found."},
		{"add to a public flavor", "POST", "/compute/v2.1/flavors/1/action", "admin", add, 409, "Can not add access to a public flavor."},
		{"remove what is not there", "POST", "/compute/v2.1/flavors/p1/action", "admin", remove, 404, "Flavor access not found for p1 / p-demo combination."},
		{"tenant required", "POST", "/compute/v2.1/flavors/p1/action", "admin", map[string]any{"addTenantAccess": map[string]any{}}, 400, "'tenant' is a required property"},
		{"unknown action", "POST", "/compute/v2.1/flavors/p1/action", "admin", map[string]any{"fly": map[string]any{}}, 400, "There is no such action: fly"},
		{"add", "POST", "/compute/v2.1/flavors/p1/action", "admin", add, 200, ""},
		{"add twice", "POST", "/compute/v2.1/flavors/p1/action", "admin", add, 409, "Flavor access already exists for flavor p1 and project p-demo combination."},
		{"add to a missing flavor", "POST", "/compute/v2.1/flavors/nope/action", "admin", add, 404, "Flavor nope could not be found."},
	} {
		fault = nil
		var out any = &fault
		if tc.status == 200 {
			out = &acc
		}
		resp := e.call(tc.method, tc.path, tc.token, "", tc.body, out)
		if resp.StatusCode != tc.status {
			t.Fatalf("%s: %d, want %d: %v", tc.name, resp.StatusCode, tc.status, fault)
		}
		if tc.fault != "" {
			var msg string
			for _, v := range fault {
				msg, _ = v["message"].(string)
			}
			if !strings.Contains(msg, tc.fault) {
				t.Fatalf("%s: fault %q, want %q", tc.name, msg, tc.fault)
			}
		}
	}
	if e.call("GET", "/compute/v2.1/flavors/p1/os-flavor-access", "admin", "", nil, &acc); len(acc.FlavorAccess) != 1 || acc.FlavorAccess[0] != (struct {
		FlavorID string `json:"flavor_id"`
		TenantID string `json:"tenant_id"`
	}{"p1", "p-demo"}) {
		t.Fatalf("access list after add: %+v", acc)
	}
	// With access the member sees and boots it.
	if ids := e.flavorIDs("/compute/v2.1/flavors", "member"); !slices.Contains(ids, "p1") {
		t.Fatalf("member with access lists %v", ids)
	}
	if resp := e.call("GET", "/compute/v2.1/flavors/p1", "member", "", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("member with access shows: %d", resp.StatusCode)
	}
	if resp := e.call("POST", "/compute/v2.1/servers", "member", "", boot, &fault); resp.StatusCode != 202 {
		t.Fatalf("member with access boots: %d %v", resp.StatusCode, fault)
	}
	// Removed again, it is gone for the member.
	if resp := e.call("POST", "/compute/v2.1/flavors/p1/action", "admin", "", remove, &acc); resp.StatusCode != 200 || len(acc.FlavorAccess) != 0 {
		t.Fatalf("remove: %d %+v", resp.StatusCode, acc)
	}
	if ids := e.flavorIDs("/compute/v2.1/flavors", "member"); slices.Contains(ids, "p1") {
		t.Fatalf("member after removal lists %v", ids)
	}
}

func TestFlavorDescriptionByMicroversion(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 65536)
	for _, tc := range []struct {
		name, method, path, version string
		body                        any
		status                      int
		want                        any // the description in the answer
		fault                       string
	}{
		{"create with a description at 2.55", "POST", "/compute/v2.1/flavors", "2.55", map[string]any{"flavor": map[string]any{"name": "d1", "id": "d1", "ram": 64, "vcpus": 1, "disk": 0, "description": "first"}}, 200, "first", ""},
		{"create with a null description", "POST", "/compute/v2.1/flavors", "2.55", map[string]any{"flavor": map[string]any{"name": "d2", "id": "d2", "ram": 64, "vcpus": 1, "disk": 0, "description": nil}}, 200, nil, ""},
		{"description before 2.55", "POST", "/compute/v2.1/flavors", "2.54", map[string]any{"flavor": map[string]any{"name": "d3", "ram": 64, "vcpus": 1, "disk": 0, "description": "x"}}, 400, nil, "('description' was unexpected)"},
		{"description too long", "POST", "/compute/v2.1/flavors", "2.55", map[string]any{"flavor": map[string]any{"name": "d4", "ram": 64, "vcpus": 1, "disk": 0, "description": long}}, 400, nil, "too long"},
		{"update at 2.55", "PUT", "/compute/v2.1/flavors/d1", "2.55", map[string]any{"flavor": map[string]any{"description": "second"}}, 200, "second", ""},
		{"update at 2.61", "PUT", "/compute/v2.1/flavors/d1", "2.61", map[string]any{"flavor": map[string]any{"description": "third"}}, 200, "third", ""},
		{"update to null", "PUT", "/compute/v2.1/flavors/d2", "2.55", map[string]any{"flavor": map[string]any{"description": nil}}, 200, nil, ""},
		{"update before 2.55", "PUT", "/compute/v2.1/flavors/d1", "2.54", map[string]any{"flavor": map[string]any{"description": "x"}}, 404, nil, ""},
		{"update without description", "PUT", "/compute/v2.1/flavors/d1", "2.55", map[string]any{"flavor": map[string]any{}}, 400, nil, "'description' is a required property"},
		{"update of another field", "PUT", "/compute/v2.1/flavors/d1", "2.55", map[string]any{"flavor": map[string]any{"description": "x", "ram": 1}}, 400, nil, "('ram' was unexpected)"},
		{"update a missing flavor", "PUT", "/compute/v2.1/flavors/nope", "2.55", map[string]any{"flavor": map[string]any{"description": "x"}}, 404, nil, "Flavor nope could not be found."},
		{"update not a string", "PUT", "/compute/v2.1/flavors/d1", "2.55", map[string]any{"flavor": map[string]any{"description": 5}}, 400, nil, "is not of type 'string', 'null'"},
	} {
		var out map[string]map[string]any
		resp := e.call(tc.method, tc.path, "admin", tc.version, tc.body, &out)
		if resp.StatusCode != tc.status {
			t.Fatalf("%s: %d, want %d: %v", tc.name, resp.StatusCode, tc.status, out)
		}
		if tc.status == 200 {
			d, ok := out["flavor"]["description"]
			if !ok || d != tc.want {
				t.Fatalf("%s: description %v (present %v), want %v", tc.name, d, ok, tc.want)
			}
		}
		if tc.fault != "" {
			msg, _ := out["badRequest"]["message"].(string)
			if m, ok := out["itemNotFound"]["message"].(string); ok {
				msg = m
			}
			if !strings.Contains(msg, tc.fault) {
				t.Fatalf("%s: fault %q, want %q", tc.name, msg, tc.fault)
			}
		}
	}
	// The member's view shows the description from 2.55 only.
	var show struct{ Flavor map[string]any }
	if e.call("GET", "/compute/v2.1/flavors/d1", "member", "2.55", nil, &show); show.Flavor["description"] != "third" {
		t.Fatalf("show at 2.55: %v", show.Flavor)
	}
	show.Flavor = nil
	if e.call("GET", "/compute/v2.1/flavors/d1", "member", "2.54", nil, &show); show.Flavor["description"] != nil {
		t.Fatalf("show at 2.54 has a description: %v", show.Flavor)
	}
	if _, ok := show.Flavor["description"]; ok || show.Flavor["name"] != "d1" {
		t.Fatalf("show at 2.54: %v", show.Flavor)
	}
	if resp := e.call("PUT", "/compute/v2.1/flavors/d1", "member", "2.55", map[string]any{"flavor": map[string]any{"description": "x"}}, nil); resp.StatusCode != 403 {
		t.Fatalf("member updates: %d", resp.StatusCode)
	}
}
