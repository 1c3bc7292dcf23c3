package computeapi_test

import (
	"net/url"
	"strings"
	"testing"
)

// TestOSHosts: os-hosts before 2.43 (list, zone filter, detail with the
// host's instances, status updates, power actions not implemented), 404
// from 2.43, admin only.
func TestOSHosts(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1"}}, &created)
	srv := e.waitStatus(created.Server.ID, "admin", "ACTIVE")
	host := srv["OS-EXT-SRV-ATTR:host"].(string)

	var list struct{ Hosts []map[string]string }
	if resp := e.call("GET", "/compute/v2.1/os-hosts", "admin", "2.42", nil, &list); resp.StatusCode != 200 || len(list.Hosts) < 2 {
		t.Fatalf("list: %d %v", resp.StatusCode, list)
	}
	zone := ""
	for _, h := range list.Hosts {
		if h["service"] != "compute" || h["zone"] == "" {
			t.Errorf("host entry %v", h)
		}
		if h["host_name"] == host {
			zone = h["zone"]
		}
	}
	all := len(list.Hosts)
	for _, tc := range []struct {
		zone string
		want int
	}{{zone, all}, {"", all}, {"xxx", 0}} {
		list.Hosts = nil
		e.call("GET", "/compute/v2.1/os-hosts?zone="+url.QueryEscape(tc.zone), "admin", "2.42", nil, &list)
		if len(list.Hosts) != tc.want {
			t.Errorf("zone %q: %d hosts, want %d", tc.zone, len(list.Hosts), tc.want)
		}
	}

	var detail struct {
		Host []struct{ Resource map[string]any }
	}
	if resp := e.call("GET", "/compute/v2.1/os-hosts/"+host, "admin", "2.42", nil, &detail); resp.StatusCode != 200 || len(detail.Host) != 4 {
		t.Fatalf("detail: %d %v", resp.StatusCode, detail)
	}
	var projects []string
	for _, r := range detail.Host {
		if r.Resource["host"] != host {
			t.Errorf("resource of another host: %v", r.Resource)
		}
		projects = append(projects, r.Resource["project"].(string))
	}
	if strings.Join(projects, ",") != "(total),(used_now),(used_max),p-demo" {
		t.Errorf("detail rows: %v", projects)
	}
	if used := detail.Host[2].Resource; used["cpu"] != float64(1) || used["memory_mb"] != float64(512) {
		t.Errorf("(used_max): %v", used)
	}

	for _, tc := range []struct {
		name, method, path, token, version string
		body                               any
		want                               int
	}{
		{"member lists", "GET", "/compute/v2.1/os-hosts", "member", "2.42", nil, 403},
		{"gone at 2.43", "GET", "/compute/v2.1/os-hosts", "admin", "2.43", nil, 404},
		{"unknown host", "GET", "/compute/v2.1/os-hosts/nonexistent_hostname", "admin", "2.42", nil, 404},
		{"member shows", "GET", "/compute/v2.1/os-hosts/" + host, "member", "2.42", nil, 403},
		{"bad status", "PUT", "/compute/v2.1/os-hosts/" + host, "admin", "2.42", map[string]any{"status": "invalid"}, 400},
		{"bad maintenance", "PUT", "/compute/v2.1/os-hosts/" + host, "admin", "2.42", map[string]any{"maintenance_mode": "invalid"}, 400},
		{"no field", "PUT", "/compute/v2.1/os-hosts/" + host, "admin", "2.42", map[string]any{}, 400},
		{"update unknown", "PUT", "/compute/v2.1/os-hosts/nope", "admin", "2.42", map[string]any{"status": "enable"}, 404},
		{"maintenance", "PUT", "/compute/v2.1/os-hosts/" + host, "admin", "2.42", map[string]any{"maintenance_mode": "enable"}, 501},
		{"startup", "GET", "/compute/v2.1/os-hosts/" + host + "/startup", "admin", "2.42", nil, 501},
		{"reboot unknown", "GET", "/compute/v2.1/os-hosts/nope/reboot", "admin", "2.42", nil, 404},
		{"member shutdown", "GET", "/compute/v2.1/os-hosts/" + host + "/shutdown", "member", "2.42", nil, 403},
	} {
		if resp := e.call(tc.method, tc.path, tc.token, tc.version, tc.body, nil); resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}

	// Disabling through os-hosts disables the compute service.
	var upd map[string]any
	if resp := e.call("PUT", "/compute/v2.1/os-hosts/"+host, "admin", "2.42", map[string]any{"status": "disable"}, &upd); resp.StatusCode != 200 || upd["status"] != "disabled" || upd["host"] != host {
		t.Fatalf("disable: %d %v", resp.StatusCode, upd)
	}
	var svcs struct{ Services []map[string]any }
	e.call("GET", "/compute/v2.1/os-services?host="+host, "admin", "", nil, &svcs)
	if len(svcs.Services) != 1 || svcs.Services[0]["status"] != "disabled" {
		t.Errorf("service after os-hosts disable: %v", svcs)
	}
	e.call("PUT", "/compute/v2.1/os-hosts/"+host, "admin", "2.42", map[string]any{"status": "enable"}, &upd)
	if upd["status"] != "enabled" {
		t.Errorf("enable: %v", upd)
	}
}

// TestDiagnosticsEventsAuditLog: server diagnostics before and from 2.48,
// external events' per-event codes, the usage audit log, admin only.
func TestDiagnosticsEventsAuditLog(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm", "flavorRef": "1"}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")

	var d map[string]any
	if resp := e.call("GET", "/compute/v2.1/servers/"+id+"/diagnostics", "admin", "2.48", nil, &d); resp.StatusCode != 200 {
		t.Fatalf("diagnostics at 2.48: %d", resp.StatusCode)
	}
	mem, _ := d["memory_details"].(map[string]any)
	cpus, _ := d["cpu_details"].([]any)
	if d["state"] != "running" || d["num_cpus"] != float64(1) || mem["maximum"] != float64(512) || len(cpus) != 1 || d["num_nics"] != float64(0) {
		t.Errorf("diagnostics at 2.48: %v", d)
	}
	d = nil
	e.call("GET", "/compute/v2.1/servers/"+id+"/diagnostics", "admin", "2.47", nil, &d)
	if d["memory"] != float64(512) || d["memory_details"] != nil {
		t.Errorf("diagnostics at 2.47: %v", d)
	}
	if resp := e.call("GET", "/compute/v2.1/servers/"+id+"/diagnostics", "member", "2.48", nil, nil); resp.StatusCode != 403 {
		t.Errorf("member's diagnostics: %d", resp.StatusCode)
	}

	var ev struct{ Events []map[string]any }
	one := map[string]any{"events": []map[string]any{{"name": "network-changed", "server_uuid": id}}}
	if resp := e.call("POST", "/compute/v2.1/os-server-external-events", "admin", "", one, &ev); resp.StatusCode != 200 ||
		len(ev.Events) != 1 || ev.Events[0]["code"] != float64(200) || ev.Events[0]["status"] != "completed" || ev.Events[0]["server_uuid"] != id {
		t.Fatalf("event: %d %v", resp.StatusCode, ev)
	}
	mixed := map[string]any{"events": []map[string]any{{"name": "network-changed", "server_uuid": id}, {"name": "network-vif-plugged", "server_uuid": "nope"}}}
	ev.Events = nil
	if resp := e.call("POST", "/compute/v2.1/os-server-external-events", "admin", "", mixed, &ev); resp.StatusCode != 207 || ev.Events[1]["code"] != float64(404) {
		t.Errorf("mixed events: %d %v", resp.StatusCode, ev)
	}
	for _, tc := range []struct {
		name, token, version string
		body                 any
		want                 int
	}{
		{"none found", "admin", "", map[string]any{"events": []map[string]any{{"name": "network-changed", "server_uuid": "nope"}}}, 404},
		{"power-update before 2.76", "admin", "2.75", map[string]any{"events": []map[string]any{{"name": "power-update", "server_uuid": id}}}, 400},
		{"unknown name", "admin", "", map[string]any{"events": []map[string]any{{"name": "x", "server_uuid": id}}}, 400},
		{"member", "member", "", one, 403},
	} {
		if resp := e.call("POST", "/compute/v2.1/os-server-external-events", tc.token, tc.version, tc.body, nil); resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}

	var logs struct {
		Log map[string]any `json:"instance_usage_audit_logs"`
	}
	if resp := e.call("GET", "/compute/v2.1/os-instance_usage_audit_log", "admin", "", nil, &logs); resp.StatusCode != 200 || logs.Log["num_hosts"] != logs.Log["num_hosts_not_run"] || logs.Log["num_hosts"] == float64(0) {
		t.Errorf("audit log list: %d %v", resp.StatusCode, logs)
	}
	var one1 struct {
		Log map[string]any `json:"instance_usage_audit_log"`
	}
	if resp := e.call("GET", "/compute/v2.1/os-instance_usage_audit_log/2026-03-15%2010:00:00", "admin", "", nil, &one1); resp.StatusCode != 200 ||
		one1.Log["period_beginning"] != "2026-02-01 00:00:00" || one1.Log["period_ending"] != "2026-03-01 00:00:00" {
		t.Errorf("audit log before a date: %d %v", resp.StatusCode, one1)
	}
	if resp := e.call("GET", "/compute/v2.1/os-instance_usage_audit_log/invalid_time", "admin", "", nil, nil); resp.StatusCode != 400 {
		t.Errorf("invalid time: %d", resp.StatusCode)
	}
	if resp := e.call("GET", "/compute/v2.1/os-instance_usage_audit_log", "member", "", nil, nil); resp.StatusCode != 403 {
		t.Errorf("member: %d", resp.StatusCode)
	}
}
