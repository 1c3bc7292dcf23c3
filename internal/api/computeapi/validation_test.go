package computeapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// validationSnapshot renders everything the validation cases could change.
func (e *env) validationSnapshot() string {
	var b strings.Builder
	for _, p := range []string{"/servers/detail?all_tenants=1", "/flavors/detail?is_public=None", "/os-services",
		"/os-aggregates", "/os-server-groups?all_projects=true", "/os-migrations", "/os-quota-sets/demo"} {
		req, _ := http.NewRequest("GET", e.srv.URL+"/compute/v2.1"+p, nil)
		req.Header.Set("X-Auth-Token", "admin")
		req.Header.Set("OpenStack-API-Version", "compute 2.87")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			e.t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(&b, "%s %d %s\n", p, resp.StatusCode, requestIDs(data))
	}
	return b.String()
}

func requestIDs(b []byte) string {
	// Instance actions carry request ids; nothing else here varies.
	return string(b)
}

// TestRequestsNovaRefuses drives the HTTP API with requests Nova's request
// schemas (and its API code) answer with 400: wrong types, properties the
// schemas forbid, numbers out of range, malformed identifiers, names too
// long, blank or with control characters, and the query and microversion
// errors. Each must be a 400 in Nova's fault shape ({"badRequest": {"code":
// 400, "message": …}}) and change nothing.
func TestRequestsNovaRefuses(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	if resp := e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "1", "networks": "none"}}, &created); resp.StatusCode != 202 {
		t.Fatalf("creating the server to act on: %d", resp.StatusCode)
	}
	e.clk.Advance(2 * time.Second)
	var services struct{ Services []struct{ ID any } }
	e.call("GET", "/compute/v2.1/os-services", "admin", "2.53", nil, &services)
	if len(services.Services) == 0 {
		t.Fatal("no services")
	}
	svc := fmt.Sprint(services.Services[0].ID)
	var agg struct{ Aggregate struct{ ID int } }
	if resp := e.call("POST", "/compute/v2.1/os-aggregates", "admin", "", map[string]any{"aggregate": map[string]any{"name": "a1"}}, &agg); resp.StatusCode != 200 {
		t.Fatalf("creating the aggregate to act on: %d", resp.StatusCode)
	}
	srv := "/servers/" + created.Server.ID
	aggr := fmt.Sprintf("/os-aggregates/%d", agg.Aggregate.ID)
	long := strings.Repeat("a", 256)
	server := func(extra string) string {
		return `{"server": {"name": "vm2", "flavorRef": "1", "networks": "none"` + extra + `}}`
	}
	flavor := func(extra string) string {
		return `{"flavor": {"name": "f9", "ram": 512, "vcpus": 1, "disk": 1` + extra + `}}`
	}
	cases := []struct {
		what, method, path, version, body string
	}{
		// Server create (Nova forbids additional properties in server).
		{"server name with a control character", "POST", "/servers", "2.1", `{"server": {"name": "vm\u0007", "flavorRef": "1"}}`},
		{"server name with NUL", "POST", "/servers", "2.1", `{"server": {"name": "v\u0000m", "flavorRef": "1"}}`},
		{"server name empty", "POST", "/servers", "2.1", `{"server": {"name": "", "flavorRef": "1"}}`},
		{"server name of 256", "POST", "/servers", "2.1", `{"server": {"name": "` + long + `", "flavorRef": "1"}}`},
		{"server name not a string", "POST", "/servers", "2.1", `{"server": {"name": ["vm"], "flavorRef": "1"}}`},
		{"server without flavorRef", "POST", "/servers", "2.1", `{"server": {"name": "vm2"}}`},
		{"server with an unknown field", "POST", "/servers", "2.37", server(`, "color": "red"`)},
		{"server create with an unknown top-level field", "POST", "/servers", "2.37", `{"server": {"name": "vm2", "flavorRef": "1", "networks": "none"}, "evil": 1}`},
		{"server body not an object", "POST", "/servers", "2.1", `{"server": "vm2"}`},
		{"server in an unknown zone", "POST", "/servers", "2.37", server(`, "availability_zone": "nowhere"`)},
		{"server without networks at 2.37", "POST", "/servers", "2.37", `{"server": {"name": "vm2", "flavorRef": "1"}}`},
		{"server with user_data not base64", "POST", "/servers", "2.37", server(`, "user_data": "not base64 at all!"`)},
		{"server with block_device_mapping_v2 not a list", "POST", "/servers", "2.37", server(`, "block_device_mapping_v2": "disk"`)},
		{"server with a bdm of an unknown source_type", "POST", "/servers", "2.37", server(`, "block_device_mapping_v2": [{"source_type": "cloud", "boot_index": 0}]`)},
		{"server with a bdm with an unknown field", "POST", "/servers", "2.37", server(`, "block_device_mapping_v2": [{"source_type": "blank", "destination_type": "local", "evil": 1}]`)},
		{"server with min_count not a number", "POST", "/servers", "2.37", server(`, "min_count": "some"`)},
		{"server with a metadata value not a string", "POST", "/servers", "2.37", server(`, "metadata": {"k": 1}`)},
		{"server with a metadata key of 256", "POST", "/servers", "2.37", server(`, "metadata": {"` + long + `": "v"}`)},
		// Server update and actions.
		{"rename with a control character", "PUT", srv, "2.1", `{"server": {"name": "vm\u001b[31m"}}`},
		{"rename to 256 characters", "PUT", srv, "2.1", `{"server": {"name": "` + long + `"}}`},
		{"live migration with an unknown field", "POST", srv + "/action", "2.25", `{"os-migrateLive": {"host": null, "block_migration": "auto", "evil": 1}}`},
		{"live migration with block_migration maybe", "POST", srv + "/action", "2.25", `{"os-migrateLive": {"host": null, "block_migration": "maybe"}}`},
		{"live migration with a null body", "POST", srv + "/action", "2.25", `{"os-migrateLive": null}`},
		{"live migration without block_migration", "POST", srv + "/action", "2.25", `{"os-migrateLive": {"host": null}}`},
		{"live migration with force not a boolean", "POST", srv + "/action", "2.30", `{"os-migrateLive": {"host": "h2", "block_migration": "auto", "force": "maybe"}}`},
		{"two actions in one body", "POST", srv + "/action", "2.1", `{"pause": null, "lock": null}`},
		{"reboot of an unknown type", "POST", srv + "/action", "2.1", `{"reboot": {"type": "GENTLE"}}`},
		{"resize without flavorRef", "POST", srv + "/action", "2.1", `{"resize": {}}`},
		{"reset to an unknown state", "POST", srv + "/action", "2.1", `{"os-resetState": {"state": "evil"}}`},
		// Flavor create (additional properties forbidden, integers bounded
		// by the database's 2^31-1).
		{"flavor name with a control character", "POST", "/flavors", "2.1", `{"flavor": {"name": "f\u0001", "ram": 512, "vcpus": 1, "disk": 1}}`},
		{"flavor name blank", "POST", "/flavors", "2.1", `{"flavor": {"name": "   ", "ram": 512, "vcpus": 1, "disk": 1}}`},
		{"flavor name of 256", "POST", "/flavors", "2.1", `{"flavor": {"name": "` + long + `", "ram": 512, "vcpus": 1, "disk": 1}}`},
		{"flavor with an unknown field", "POST", "/flavors", "2.1", flavor(`, "gpus": 1`)},
		{"flavor ram of 2^31", "POST", "/flavors", "2.1", `{"flavor": {"name": "f9", "ram": 2147483648, "vcpus": 1, "disk": 1}}`},
		{"flavor vcpus of 2^31", "POST", "/flavors", "2.1", `{"flavor": {"name": "f9", "ram": 512, "vcpus": 2147483648, "disk": 1}}`},
		{"flavor disk of 2^31", "POST", "/flavors", "2.1", `{"flavor": {"name": "f9", "ram": 512, "vcpus": 1, "disk": 2147483648}}`},
		{"flavor ram 0", "POST", "/flavors", "2.1", `{"flavor": {"name": "f9", "ram": 0, "vcpus": 1, "disk": 1}}`},
		{"flavor vcpus not a number", "POST", "/flavors", "2.1", `{"flavor": {"name": "f9", "ram": 512, "vcpus": "x", "disk": 1}}`},
		{"flavor disk negative", "POST", "/flavors", "2.1", `{"flavor": {"name": "f9", "ram": 512, "vcpus": 1, "disk": -1}}`},
		{"flavor ram fractional", "POST", "/flavors", "2.1", `{"flavor": {"name": "f9", "ram": 512.5, "vcpus": 1, "disk": 1}}`},
		{"flavor id with a slash", "POST", "/flavors", "2.1", flavor(`, "id": "a/b"`)},
		{"flavor id ..", "POST", "/flavors", "2.1", flavor(`, "id": ".."`)},
		{"flavor id with NUL", "POST", "/flavors", "2.1", flavor(`, "id": "a\u0000"`)},
		{"flavor id of 256", "POST", "/flavors", "2.1", flavor(`, "id": "` + long + `"`)},
		{"flavor swap negative", "POST", "/flavors", "2.1", flavor(`, "swap": -1`)},
		{"flavor ephemeral of 2^31", "POST", "/flavors", "2.1", flavor(`, "OS-FLV-EXT-DATA:ephemeral": 2147483648`)},
		{"flavor rxtx_factor 0", "POST", "/flavors", "2.1", flavor(`, "rxtx_factor": 0`)},
		{"flavor is_public maybe", "POST", "/flavors", "2.1", flavor(`, "os-flavor-access:is_public": "maybe"`)},
		{"flavor description of 65536", "POST", "/flavors", "2.55", flavor(`, "description": "` + strings.Repeat("d", 65536) + `"`)},
		// Services.
		{"disable reason of 256", "PUT", "/os-services/disable-log-reason", "2.1", `{"host": "h1", "binary": "nova-compute", "disabled_reason": "` + long + `"}`},
		{"service update with disabled_reason of 256", "PUT", "/os-services/" + svc, "2.53", `{"status": "disabled", "disabled_reason": "` + long + `"}`},
		{"service status maybe", "PUT", "/os-services/" + svc, "2.53", `{"status": "maybe"}`},
		{"service update with an unknown field", "PUT", "/os-services/" + svc, "2.53", `{"status": "enabled", "evil": 1}`},
		// Aggregates.
		{"aggregate name with a control character", "POST", "/os-aggregates", "2.1", `{"aggregate": {"name": "a\u0002"}}`},
		{"aggregate name of 256", "POST", "/os-aggregates", "2.1", `{"aggregate": {"name": "` + long + `"}}`},
		{"aggregate name blank", "POST", "/os-aggregates", "2.1", `{"aggregate": {"name": ""}}`},
		{"aggregate zone with a colon", "POST", "/os-aggregates", "2.1", `{"aggregate": {"name": "a2", "availability_zone": "z:1"}}`},
		{"aggregate with an unknown field", "POST", "/os-aggregates", "2.1", `{"aggregate": {"name": "a2", "evil": 1}}`},
		{"aggregate action with two actions", "POST", aggr + "/action", "2.1", `{"add_host": {"host": "h1"}, "set_metadata": {"metadata": {"k": "v"}}}`},
		{"add_host with an unknown field", "POST", aggr + "/action", "2.1", `{"add_host": {"host": "h1", "evil": 1}}`},
		{"set_metadata not an object", "POST", aggr + "/action", "2.1", `{"set_metadata": {"metadata": "k=v"}}`},
		{"aggregate rename to a zone with a colon", "PUT", aggr, "2.1", `{"aggregate": {"availability_zone": "a:b"}}`},
		// Server groups.
		{"group name with a control character", "POST", "/os-server-groups", "2.1", `{"server_group": {"name": "g\u0003", "policies": ["affinity"]}}`},
		{"group name of 256", "POST", "/os-server-groups", "2.1", `{"server_group": {"name": "` + long + `", "policies": ["affinity"]}}`},
		{"group with an unknown policy", "POST", "/os-server-groups", "2.1", `{"server_group": {"name": "g", "policies": ["evil"]}}`},
		{"group with an unknown field", "POST", "/os-server-groups", "2.64", `{"server_group": {"name": "g", "policy": "affinity", "evil": 1}}`},
		// Quotas.
		{"quota not a number", "PUT", "/os-quota-sets/demo", "2.1", `{"quota_set": {"cores": "many"}}`},
		{"quota of an unknown resource", "PUT", "/os-quota-sets/demo", "2.1", `{"quota_set": {"evil": 1}}`},
		// List queries.
		{"status EVIL", "GET", "/servers?status=EVIL", "2.38", ""},
		{"sort_key evil", "GET", "/servers/detail?sort_key=evil", "2.1", ""},
		{"sort_dir sideways", "GET", "/servers?sort_dir=sideways", "2.1", ""},
		{"changes-before before changes-since", "GET", "/servers?changes-since=2020-01-02T00:00:00Z&changes-before=2020-01-01T00:00:00Z", "2.66", ""},
		// Microversions: malformed is 400 (out of range is 406).
		{"microversion 2.01", "GET", "/servers", "2.01", ""},
		{"microversion abc", "GET", "/servers", "abc", ""},
		{"microversion 2", "GET", "/servers", "2", ""},
		{"microversion 2.1.1", "GET", "/servers", "2.1.1", ""},
	}
	refused := 0
	for _, c := range cases {
		before := e.validationSnapshot()
		var rd io.Reader
		if c.body != "" {
			rd = bytes.NewReader([]byte(c.body))
		}
		req, _ := http.NewRequest(c.method, e.srv.URL+"/compute/v2.1"+c.path, rd)
		req.Header.Set("X-Auth-Token", "admin")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("OpenStack-API-Version", "compute "+c.version)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var fault map[string]struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &fault)
		f, ok := fault["badRequest"]
		if resp.StatusCode != 400 || !ok || len(fault) != 1 || f.Code != 400 || f.Message == "" {
			t.Errorf("%s: %d %.300s, want 400 in Nova's badRequest shape", c.what, resp.StatusCode, data)
			continue
		}
		if strings.Contains(f.Message, "Go struct") || strings.Contains(f.Message, "json:") {
			t.Errorf("%s: the message names Go's decoding: %s", c.what, f.Message)
		}
		refused++
		if after := e.validationSnapshot(); after != before {
			t.Errorf("%s: refused but the state changed:\nbefore %.2000s\nafter  %.2000s", c.what, before, after)
		}
	}
	t.Logf("%d of %d requests refused with 400", refused, len(cases))
}
