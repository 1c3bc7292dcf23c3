package computeapi_test

import (
	"maps"
	"strings"
	"testing"
	"time"
)

// TestServerMetadata walks the /servers/{id}/metadata routes: replace,
// merge, per key show/put/delete, their refusals and the metadata_items
// quota.
func TestServerMetadata(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1", "metadata": map[string]string{"a": "1"}}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")
	base := "/compute/v2.1/servers/" + id + "/metadata"
	type meta struct {
		Metadata map[string]string
		Meta     map[string]string
	}
	get := func() map[string]string {
		var m meta
		if resp := e.call("GET", base, "member", "", nil, &m); resp.StatusCode != 200 {
			t.Fatalf("list: %d", resp.StatusCode)
		}
		return m.Metadata
	}
	if got := get(); !maps.Equal(got, map[string]string{"a": "1"}) {
		t.Fatalf("created with %v", got)
	}
	var m meta
	if resp := e.call("POST", base, "member", "", map[string]any{"metadata": map[string]string{"b": "2", "a": "one"}}, &m); resp.StatusCode != 200 ||
		!maps.Equal(m.Metadata, map[string]string{"a": "one", "b": "2"}) {
		t.Fatalf("merge: %d %v", resp.StatusCode, m)
	}
	m = meta{}
	if resp := e.call("PUT", base, "member", "", map[string]any{"metadata": map[string]string{"c": "3"}}, &m); resp.StatusCode != 200 ||
		!maps.Equal(m.Metadata, map[string]string{"c": "3"}) || !maps.Equal(get(), map[string]string{"c": "3"}) {
		t.Fatalf("replace: %d %v", resp.StatusCode, m)
	}
	m = meta{}
	if resp := e.call("PUT", base+"/d", "member", "", map[string]any{"meta": map[string]string{"d": "4"}}, &m); resp.StatusCode != 200 || m.Meta["d"] != "4" {
		t.Fatalf("put item: %d %v", resp.StatusCode, m)
	}
	m = meta{}
	if resp := e.call("GET", base+"/d", "member", "", nil, &m); resp.StatusCode != 200 || !maps.Equal(m.Meta, map[string]string{"d": "4"}) {
		t.Fatalf("show item: %d %v", resp.StatusCode, m)
	}
	var srv struct{ Server map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+id, "member", "", nil, &srv)
	if md, _ := srv.Server["metadata"].(map[string]any); md["c"] != "3" || md["d"] != "4" || len(md) != 2 {
		t.Errorf("server view's metadata: %v", srv.Server["metadata"])
	}
	if resp := e.call("DELETE", base+"/d", "member", "", nil, nil); resp.StatusCode != 204 || !maps.Equal(get(), map[string]string{"c": "3"}) {
		t.Fatalf("delete item: %d %v", resp.StatusCode, get())
	}

	for _, tc := range []struct {
		name, method, path string
		body               any
		want               int
		text               string
	}{
		{"show missing", "GET", base + "/zz", nil, 404, "Metadata item was not found"},
		{"delete missing", "DELETE", base + "/zz", nil, 404, "Metadata item was not found"},
		{"key mismatch", "PUT", base + "/key", map[string]any{"meta": map[string]string{"testkey": "v"}}, 400, "Request body and URI mismatch"},
		{"two items", "PUT", base + "/a", map[string]any{"meta": map[string]string{"a": "1", "b": "2"}}, 400, "Request body contains too many items"},
		{"blank key on replace", "PUT", base, map[string]any{"metadata": map[string]string{"": "v"}}, 400, ""},
		{"blank key on merge", "POST", base, map[string]any{"metadata": map[string]string{"": "v"}}, 400, ""},
		{"no metadata field", "PUT", base, map[string]any{"meta1": "data1"}, 400, ""},
		{"long key", "POST", base, map[string]any{"metadata": map[string]string{strings.Repeat("k", 256): "v"}}, 400, ""},
		{"unknown server", "GET", "/compute/v2.1/servers/nope/metadata", nil, 404, ""},
		{"unknown server merge", "POST", "/compute/v2.1/servers/nope/metadata", map[string]any{"metadata": map[string]string{"a": "b"}}, 404, ""},
	} {
		var fault map[string]map[string]any
		resp := e.call(tc.method, tc.path, "member", "", tc.body, &fault)
		msg := ""
		for _, v := range fault {
			msg, _ = v["message"].(string)
		}
		if resp.StatusCode != tc.want || (tc.text != "" && msg != tc.text) {
			t.Errorf("%s: %d %v, want %d %q", tc.name, resp.StatusCode, fault, tc.want, tc.text)
		}
	}
	if got := get(); !maps.Equal(got, map[string]string{"c": "3"}) {
		t.Errorf("refused requests changed the metadata: %v", got)
	}

	// Another project's server is not found.
	if resp := e.call("GET", base, "admin", "", nil, nil); resp.StatusCode != 200 {
		t.Errorf("admin reads a member's server metadata: %d", resp.StatusCode)
	}

	// metadata_items: a merge or replace past the limit is 403.
	if resp := e.call("PUT", "/compute/v2.1/os-quota-sets/p-demo", "admin", "", map[string]any{"quota_set": map[string]any{"metadata_items": 2}}, nil); resp.StatusCode != 200 {
		t.Fatalf("setting the quota: %d", resp.StatusCode)
	}
	three := map[string]any{"metadata": map[string]string{"x": "1", "y": "2", "z": "3"}}
	for _, method := range []string{"PUT", "POST"} {
		if resp := e.call(method, base, "member", "", three, nil); resp.StatusCode != 403 {
			t.Errorf("%s past metadata_items: %d", method, resp.StatusCode)
		}
	}
	if resp := e.call("POST", base, "member", "", map[string]any{"metadata": map[string]string{"x": "1", "y": "2"}}, nil); resp.StatusCode != 403 {
		t.Errorf("merge to 3 items past a limit of 2: %d", resp.StatusCode)
	}
	if resp := e.call("PUT", base+"/x", "member", "", map[string]any{"meta": map[string]string{"x": "1"}}, nil); resp.StatusCode != 200 {
		t.Errorf("second item within the limit: %d", resp.StatusCode)
	}

	// Not while the server is locked (for its owner) or has a task.
	e.act(id, "admin", "2.73", map[string]any{"lock": nil}, 202)
	if resp := e.call("POST", base, "member", "", map[string]any{"metadata": map[string]string{"c": "9"}}, nil); resp.StatusCode != 409 {
		t.Errorf("merge on a locked server: %d", resp.StatusCode)
	}
	e.act(id, "admin", "", map[string]any{"unlock": nil}, 202)
}

// TestSimpleTenantUsage: usage per project from the instance records over
// a period, the admin's list and a member's own project, and refusals.
func TestSimpleTenantUsage(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1"}}, &created)
	e.waitStatus(created.Server.ID, "member", "ACTIVE")
	booted := e.clk.Now().UTC()
	e.clk.Advance(2 * time.Hour)
	period := "?start=" + booted.Add(-24*time.Hour).Format("2006-01-02T15:04:05.000000") + "&end=" + booted.Add(24*time.Hour).Format("2006-01-02T15:04:05")

	var show struct {
		Usage map[string]any `json:"tenant_usage"`
	}
	if resp := e.call("GET", "/compute/v2.1/os-simple-tenant-usage/p-demo"+period, "member", "", nil, &show); resp.StatusCode != 200 {
		t.Fatalf("member's own usage: %d", resp.StatusCode)
	}
	u := show.Usage
	hours, _ := u["total_hours"].(float64)
	// The instance counts from its record's creation (a few virtual
	// seconds before it was ACTIVE) to the end of the period, which is cut
	// at now: about 2 hours.
	if len(u) != 8 || u["tenant_id"] != "p-demo" || hours < 2 || hours > 2.1 {
		t.Fatalf("usage: %v", u)
	}
	sus, _ := u["server_usages"].([]any)
	if len(sus) != 1 {
		t.Fatalf("server usages: %v", u["server_usages"])
	}
	su := sus[0].(map[string]any)
	if su["instance_id"] != created.Server.ID || su["state"] != "active" || su["ended_at"] != nil || su["vcpus"] != float64(1) {
		t.Errorf("server usage: %v", su)
	}
	if got := u["total_vcpus_usage"].(float64); got != hours*su["vcpus"].(float64) {
		t.Errorf("total_vcpus_usage %v, want %v", got, hours*su["vcpus"].(float64))
	}

	var list struct {
		Usages []map[string]any `json:"tenant_usages"`
	}
	if resp := e.call("GET", "/compute/v2.1/os-simple-tenant-usage"+period+"&detailed=1", "admin", "", nil, &list); resp.StatusCode != 200 || len(list.Usages) != 1 || len(list.Usages[0]) != 8 {
		t.Fatalf("admin's detailed list: %d %v", resp.StatusCode, list)
	}
	list.Usages = nil
	e.call("GET", "/compute/v2.1/os-simple-tenant-usage"+period, "admin", "", nil, &list)
	if len(list.Usages) != 1 || list.Usages[0]["server_usages"] != nil {
		t.Errorf("list without detailed: %v", list.Usages)
	}
	// A period before the boot counts nothing.
	before := "?start=" + booted.Add(-48*time.Hour).Format("2006-01-02T15:04:05") + "&end=" + booted.Add(-24*time.Hour).Format("2006-01-02T15:04:05")
	show.Usage = nil
	e.call("GET", "/compute/v2.1/os-simple-tenant-usage/p-demo"+before, "member", "", nil, &show)
	if len(show.Usage) != 0 {
		t.Errorf("usage before the boot: %v", show.Usage)
	}

	for _, tc := range []struct {
		name, path, token string
		want              int
	}{
		{"member lists all", "/compute/v2.1/os-simple-tenant-usage" + period, "member", 403},
		{"member reads another project", "/compute/v2.1/os-simple-tenant-usage/p-admin" + period, "member", 403},
		{"start after end", "/compute/v2.1/os-simple-tenant-usage/p-demo?start=" + booted.Format("2006-01-02T15:04:05") + "&end=" + booted.Add(-time.Hour).Format("2006-01-02T15:04:05"), "member", 400},
		{"bad date", "/compute/v2.1/os-simple-tenant-usage/p-demo?start=yesterday", "member", 400},
		{"empty tenant", "/compute/v2.1/os-simple-tenant-usage/" + period, "admin", 404},
	} {
		if resp := e.call("GET", tc.path, tc.token, "", nil, nil); resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

// TestLegacyVersionDocument: the v2.0 entry's self link leads to its own
// document, as Tempest's test_get_version_details follows it.
func TestLegacyVersionDocument(t *testing.T) {
	e := newEnv(t)
	var out struct{ Version map[string]any }
	if resp := e.call("GET", "/compute/v2/", "", "", nil, &out); resp.StatusCode != 200 || out.Version["id"] != "v2.0" {
		t.Fatalf("GET /compute/v2/: %d %v", resp.StatusCode, out)
	}
	links, _ := out.Version["links"].([]any)
	if len(links) != 1 || links[0].(map[string]any)["href"] != "http://keel/compute/v2/" {
		t.Errorf("links: %v", links)
	}
}
