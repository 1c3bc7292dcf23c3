package computeapi_test

import (
	"context"
	"strconv"
	"testing"
)

// faultOf sends an action and returns its status and its fault's message.
func (e *env) faultOf(id, token, version string, body map[string]any) (int, string) {
	e.t.Helper()
	var fault map[string]map[string]any
	resp := e.call("POST", "/compute/v2.1/servers/"+id+"/action", token, version, body, &fault)
	for _, f := range fault {
		msg, _ := f["message"].(string)
		return resp.StatusCode, msg
	}
	return resp.StatusCode, ""
}

// TestUnshelveToHost: from 2.91 an admin's unshelve names the host the
// shelved-offloaded server boots on (Nova's requested_destination: the
// scheduler considers that host alone, its filters still apply), and the
// claim is exactly the flavor's on that host's provider; Nova's 400, 403
// and 409 for the requests it refuses, and availability_zone null unpins.
func TestUnshelveToHost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "imageRef": "img"}}, &created)
	id := created.Server.ID
	v := e.waitStatus(id, "admin", "ACTIVE")
	first, _ := v["OS-EXT-SRV-ATTR:host"].(string)

	shelveOffloaded := func() {
		t.Helper()
		e.act(id, "member", "", map[string]any{"shelve": nil}, 202)
		e.waitStatus(id, "admin", "SHELVED_OFFLOADED")
	}
	landsOn := func(host string) {
		t.Helper()
		v := e.waitStatus(id, "admin", "ACTIVE")
		if got := v["OS-EXT-SRV-ATTR:host"]; got != host {
			t.Fatalf("unshelved to %s, landed on %v", host, got)
		}
		c, err := e.st.GetConsumer(ctx, id)
		if err != nil || len(c.Allocations) != 1 {
			t.Fatalf("claim after unshelve to %s: %v (%v)", host, c.Allocations, err)
		}
		r := c.Allocations["rp-"+host]
		if r["VCPU"] != 1 || r["MEMORY_MB"] != 2048 || r["DISK_GB"] != 20 {
			t.Errorf("claim on %s: %v, want m1.small's 1 VCPU, 2048 MB, 20 GB", host, c.Allocations)
		}
	}

	shelveOffloaded()
	// Refused before 2.91 (Nova's 2.77 schema), to a member, an unknown
	// host, a host outside the server's zone.
	for _, c := range []struct {
		token, version string
		body           map[string]any
		code           int
		msg            string
	}{
		{"admin", "2.90", map[string]any{"unshelve": map[string]any{"host": "h2"}}, 400, ""},
		{"admin", "2.90", map[string]any{"unshelve": map[string]any{"availability_zone": nil}}, 400, ""},
		{"admin", "2.77", map[string]any{"unshelve": map[string]any{}}, 400, ""},
		{"admin", "2.91", map[string]any{"unshelve": map[string]any{"host": "h2", "x": 1}}, 400, ""},
		{"admin", "2.91", map[string]any{"unshelve": map[string]any{"host": 7}}, 400, ""},
		{"member", "2.91", map[string]any{"unshelve": map[string]any{"host": "h2"}}, 403, "Policy doesn't allow os_compute_api:os-shelve:unshelve_to_host to be performed."},
		{"admin", "2.91", map[string]any{"unshelve": map[string]any{"host": "h99"}}, 400, "Compute host h99 could not be found."},
		{"admin", "2.91", map[string]any{"unshelve": map[string]any{"availability_zone": "elsewhere"}}, 400, "The requested availability zone is not available"},
	} {
		code, msg := e.faultOf(id, c.token, c.version, c.body)
		if code != c.code || c.msg != "" && msg != c.msg {
			t.Errorf("%s %s %v: %d %q, want %d %q", c.token, c.version, c.body, code, msg, c.code, c.msg)
		}
	}

	// To the host it came from, then to another.
	other := "h1"
	if first == other {
		other = "h2"
	}
	e.act(id, "admin", "2.91", map[string]any{"unshelve": map[string]any{"host": first}}, 202)
	landsOn(first)
	for _, h := range []string{other, first, other} {
		shelveOffloaded()
		e.act(id, "admin", "2.91", map[string]any{"unshelve": map[string]any{"host": h}}, 202)
		landsOn(h)
	}

	// A host in another zone than the one the server is pinned to: 409;
	// unpinned (availability_zone null) it may go there.
	var agg struct{ Aggregate struct{ ID float64 } }
	e.call("POST", "/compute/v2.1/os-aggregates", "admin", "", map[string]any{"aggregate": map[string]any{"name": "far", "availability_zone": "far"}}, &agg)
	e.call("POST", "/compute/v2.1/os-aggregates/"+strconv.Itoa(int(agg.Aggregate.ID))+"/action", "admin", "", map[string]any{"add_host": map[string]any{"host": "h3"}}, nil)
	shelveOffloaded()
	e.act(id, "admin", "2.91", map[string]any{"unshelve": map[string]any{"availability_zone": "nova"}}, 202)
	e.waitStatus(id, "admin", "ACTIVE")
	shelveOffloaded()
	if code, msg := e.faultOf(id, "admin", "2.91", map[string]any{"unshelve": map[string]any{"host": "h3"}}); code != 409 || msg != `Host "h3" is not in the availability zone "nova".` {
		t.Errorf("unshelve to a host outside the pinned zone: %d %q", code, msg)
	}
	e.act(id, "admin", "2.91", map[string]any{"unshelve": map[string]any{"availability_zone": nil, "host": "h3"}}, 202)
	landsOn("h3")
	if v := e.waitStatus(id, "admin", "ACTIVE"); v["OS-EXT-AZ:availability_zone"] != "far" {
		t.Errorf("unpinned server on h3 is in zone %v, want its host's, far", v["OS-EXT-AZ:availability_zone"])
	}

	// A host the filters refuse (its service disabled): no valid host,
	// the server stays shelved_offloaded and holds no claim.
	shelveOffloaded()
	e.call("PUT", "/compute/v2.1/os-services/disable", "admin", "", map[string]any{"host": "h2", "binary": "nova-compute"}, nil)
	e.act(id, "admin", "2.91", map[string]any{"unshelve": map[string]any{"host": "h2"}}, 202)
	v = e.waitStatus(id, "admin", "SHELVED_OFFLOADED")
	if c, err := e.st.GetConsumer(ctx, id); err == nil && len(c.Allocations) > 0 {
		t.Errorf("unshelve to a disabled host left a claim: %v", c.Allocations)
	}
	// A later unshelve without a host goes where the scheduler picks.
	e.act(id, "member", "2.91", map[string]any{"unshelve": nil}, 202)
	v = e.waitStatus(id, "admin", "ACTIVE")
	if v["OS-EXT-SRV-ATTR:host"] == "h2" {
		t.Errorf("unshelve without a host went to the disabled h2")
	}
}
