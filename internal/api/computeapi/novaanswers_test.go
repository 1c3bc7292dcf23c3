package computeapi_test

import (
	"encoding/json"
	"testing"
)

// TestAnswersAsNova: requests keel answered unlike Nova (issue 31) get
// Nova's status and words: an action nobody implements (on a server that
// exists or not, and on a migration), a null body where Nova's schema
// wants an object, a service update without host and binary, a
// changes-before earlier than changes-since, a microversion past int's
// range, and a member asking for every project's servers.
func TestAnswersAsNova(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "1", "imageRef": "img"}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")
	null := json.RawMessage(`null`)
	for _, c := range []struct {
		what, method, path, token, version string
		body                               any
		status                             int
		key, msg                           string
	}{
		{"an unknown server action", "POST", "/compute/v2.1/servers/" + id + "/action", "member", "", map[string]any{"noSuchAction": nil},
			400, "badRequest", "There is no such action: noSuchAction"},
		{"one Nova has and keel does not", "POST", "/compute/v2.1/servers/" + id + "/action", "admin", "", map[string]any{"addSecurityGroup": map[string]any{"name": "default"}},
			400, "badRequest", "There is no such action: addSecurityGroup"},
		{"an unknown action on a server that is not there", "POST", "/compute/v2.1/servers/00000000-0000-0000-0000-000000000000/action", "admin", "", map[string]any{"noSuchAction": nil},
			400, "badRequest", "There is no such action: noSuchAction"},
		{"an unknown migration action", "POST", "/compute/v2.1/servers/" + id + "/migrations/1/action", "admin", "2.22", map[string]any{"noSuchAction": nil},
			400, "badRequest", "There is no such action: noSuchAction"},
		{"force_complete with another key", "POST", "/compute/v2.1/servers/" + id + "/migrations/1/action", "admin", "2.22", map[string]any{"force_complete": nil, "noSuchAction": nil},
			400, "badRequest", "Malformed request body: too many body keys (an action body names exactly one action)"},
		{"migrate with a property 2.56 does not take", "POST", "/compute/v2.1/servers/" + id + "/action", "admin", "2.56", map[string]any{"migrate": map[string]any{"bogus": 1}},
			400, "badRequest", `Invalid input for field/attribute migrate. Value: {"bogus":1}. json: unknown field "bogus"`},
		{"null to os-services/disable", "PUT", "/compute/v2.1/os-services/disable", "admin", "", null,
			400, "badRequest", "Invalid input for the request body: None is not of type 'object'"},
		{"{} to os-services/disable", "PUT", "/compute/v2.1/os-services/disable", "admin", "", map[string]any{},
			400, "badRequest", "Invalid input for the request body: 'host' is a required property"},
		{"no binary to os-services/enable", "PUT", "/compute/v2.1/os-services/enable", "admin", "", map[string]any{"host": "h1"},
			400, "badRequest", "Invalid input for the request body: 'binary' is a required property"},
		{"changes-before before changes-since, migrations", "GET", "/compute/v2.1/os-migrations?changes-since=2026-01-02T00:00:00Z&changes-before=2026-01-01T00:00:00Z", "admin", "2.66", nil,
			400, "badRequest", "The value of changes-since must be less than or equal to changes-before."},
		{"changes-before before changes-since, instance actions", "GET", "/compute/v2.1/servers/" + id + "/os-instance-actions?changes-since=2026-01-02T00:00:00Z&changes-before=2026-01-01T00:00:00Z", "member", "2.66", nil,
			400, "badRequest", "The value of changes-since must be less than or equal to changes-before."},
		{"changes-before before changes-since, servers", "GET", "/compute/v2.1/servers?changes-since=2026-01-02T00:00:00Z&changes-before=2026-01-01T00:00:00Z", "member", "2.66", nil,
			400, "badRequest", "The value of changes-since must be less than or equal to changes-before."},
		{"a microversion past int's range", "GET", "/compute/v2.1/flavors", "member", "2.99999999999999999999", nil,
			406, "notAcceptable", "Version 2.99999999999999999999 is not supported by the API. Minimum is 2.1 and maximum is 2.91."},
		{"a microversion above the maximum", "GET", "/compute/v2.1/flavors", "member", "2.92", nil,
			406, "notAcceptable", "Version 2.92 is not supported by the API. Minimum is 2.1 and maximum is 2.91."},
		{"a member's all_tenants=1", "GET", "/compute/v2.1/servers?all_tenants=1", "member", "", nil,
			403, "forbidden", "Policy doesn't allow os_compute_api:servers:index:get_all_tenants to be performed."},
		{"a member's all_tenants=yes, detail", "GET", "/compute/v2.1/servers/detail?all_tenants=yes", "member", "", nil,
			403, "forbidden", "Policy doesn't allow os_compute_api:servers:detail:get_all_tenants to be performed."},
		{"a member's empty all_tenants", "GET", "/compute/v2.1/servers?all_tenants", "member", "", nil,
			403, "forbidden", "Policy doesn't allow os_compute_api:servers:index:get_all_tenants to be performed."},
		{"all_tenants that is no boolean", "GET", "/compute/v2.1/servers?all_tenants=maybe", "admin", "", nil,
			400, "badRequest", "Invalid input received: Unrecognized value 'maybe', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'"},
	} {
		var out map[string]struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		resp := e.call(c.method, c.path, c.token, c.version, c.body, &out)
		if resp.StatusCode != c.status || out[c.key].Code != c.status || out[c.key].Message != c.msg {
			t.Errorf("%s: %d %+v, want %d %s %q", c.what, resp.StatusCode, out, c.status, c.key, c.msg)
		}
	}
	// What Nova takes, keel takes: a member's all_tenants=0 lists its own,
	// an admin's all_tenants=True lists everyone's.
	var list struct{ Servers []map[string]any }
	for _, c := range []struct{ token, query string }{{"member", "all_tenants=0"}, {"admin", "all_tenants=True"}, {"admin", "all_tenants=on"}} {
		list.Servers = nil
		if resp := e.call("GET", "/compute/v2.1/servers?"+c.query, c.token, "", nil, &list); resp.StatusCode != 200 || len(list.Servers) != 1 {
			t.Errorf("%s's %s: %d, %d servers; want 200 and the one", c.token, c.query, resp.StatusCode, len(list.Servers))
		}
	}
}
