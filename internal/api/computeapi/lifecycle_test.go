package computeapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"keel/internal/testenv"
)

// waitStatus polls the server until its status is want (the action goes
// on after the API answered), advancing the virtual clock for the fake
// driver's spawns.
func (e *env) waitStatus(id, token, want string) map[string]any {
	e.t.Helper()
	var show struct{ Server map[string]any }
	testenv.Poll(e.t, "server "+id+" "+want, func() error {
		e.call("GET", "/compute/v2.1/servers/"+id, token, "2.73", nil, &show)
		if show.Server["status"] == want && show.Server["OS-EXT-STS:task_state"] == nil {
			return nil
		}
		e.clk.Advance(500 * time.Millisecond)
		return fmt.Errorf("status %v task %v", show.Server["status"], show.Server["OS-EXT-STS:task_state"])
	})
	return show.Server
}

func (e *env) act(id, token, version string, body map[string]any, want int) map[string]any {
	e.t.Helper()
	var out map[string]any
	resp := e.call("POST", "/compute/v2.1/servers/"+id+"/action", token, version, body, &out)
	if resp.StatusCode != want {
		e.t.Fatalf("action %v: %d %v, want %d", body, resp.StatusCode, out, want)
	}
	return out
}

// TestLifecycleActions walks one server through every lifecycle action
// as a member, checking Nova's statuses, power and vm states, its 409
// texts, the lock, and that shelving gives the host's claim back.
func TestLifecycleActions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "imageRef": "img"}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")

	steps := []struct {
		body         map[string]any
		status       string
		vm           string
		power        float64
		code         int
		refusedAgain string // the same action again: Nova's 409
	}{
		{map[string]any{"os-stop": nil}, "SHUTOFF", "stopped", 4, 202, "Cannot 'stop' instance " + id + " while it is in vm_state stopped"},
		{map[string]any{"os-start": nil}, "ACTIVE", "active", 1, 202, "Cannot 'start' instance " + id + " while it is in vm_state active"},
		{map[string]any{"pause": nil}, "PAUSED", "paused", 3, 202, "Cannot 'pause' instance " + id + " while it is in vm_state paused"},
		{map[string]any{"unpause": nil}, "ACTIVE", "active", 1, 202, "Cannot 'unpause' instance " + id + " while it is in vm_state active"},
		{map[string]any{"suspend": nil}, "SUSPENDED", "suspended", 7, 202, "Cannot 'suspend' instance " + id + " while it is in vm_state suspended"},
		{map[string]any{"reboot": map[string]any{"type": "HARD"}}, "ACTIVE", "active", 1, 202, ""},
		{map[string]any{"reboot": map[string]any{"type": "soft"}}, "ACTIVE", "active", 1, 202, ""},
		{map[string]any{"rescue": nil}, "RESCUE", "rescued", 1, 200, "Cannot 'rescue' instance " + id + " while it is in vm_state rescued"},
		{map[string]any{"unrescue": nil}, "ACTIVE", "active", 1, 202, "Cannot 'unrescue' instance " + id + " while it is in vm_state active"},
		{map[string]any{"rebuild": map[string]any{"imageRef": "img2", "name": "vm1-rebuilt"}}, "ACTIVE", "active", 1, 202, ""},
	}
	for _, s := range steps {
		out := e.act(id, "member", "2.73", s.body, s.code)
		if _, ok := s.body["rescue"]; ok && out["adminPass"] == "" {
			t.Errorf("rescue answered %v, want an adminPass", out)
		}
		if _, ok := s.body["rebuild"]; ok {
			if srv, _ := out["server"].(map[string]any); srv["name"] != "vm1-rebuilt" || srv["status"] != "REBUILD" {
				t.Errorf("rebuild answered %v, want the server renamed, in REBUILD", out)
			}
		}
		v := e.waitStatus(id, "member", s.status)
		if v["OS-EXT-STS:vm_state"] != s.vm || v["OS-EXT-STS:power_state"] != s.power {
			t.Errorf("after %v: vm_state %v power %v, want %s %v", s.body, v["OS-EXT-STS:vm_state"], v["OS-EXT-STS:power_state"], s.vm, s.power)
		}
		if s.refusedAgain != "" {
			var fault map[string]map[string]any
			resp := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "member", "", s.body, &fault)
			if resp.StatusCode != 409 || fault["conflictingRequest"]["message"] != s.refusedAgain {
				t.Errorf("%v again: %d %v, want 409 %q", s.body, resp.StatusCode, fault, s.refusedAgain)
			}
		}
	}
	e.act(id, "member", "", map[string]any{"resume": nil}, 409)
	e.act(id, "member", "", map[string]any{"reboot": map[string]any{"type": "sideways"}}, 400)
	e.act(id, "member", "", map[string]any{"reboot": map[string]any{}}, 400)

	// The lock: the owner's own, with a reason at 2.73; an admin's,
	// which the owner cannot lift.
	e.act(id, "member", "2.73", map[string]any{"lock": map[string]any{"locked_reason": "maintenance"}}, 202)
	v := e.waitStatus(id, "member", "ACTIVE")
	if v["locked"] != true || v["locked_reason"] != "maintenance" {
		t.Errorf("locked server shows locked=%v reason=%v", v["locked"], v["locked_reason"])
	}
	var fault map[string]map[string]any
	if resp := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "member", "", map[string]any{"os-stop": nil}, &fault); resp.StatusCode != 409 ||
		fault["conflictingRequest"]["message"] != "Instance "+id+" is locked" {
		t.Errorf("stop of a locked server: %d %v", resp.StatusCode, fault)
	}
	if resp := e.call("DELETE", "/compute/v2.1/servers/"+id, "member", "", nil, nil); resp.StatusCode != 409 {
		t.Errorf("delete of a locked server by its owner: %d, want 409", resp.StatusCode)
	}
	e.act(id, "member", "2.72", map[string]any{"lock": map[string]any{"locked_reason": "x"}}, 400)
	e.act(id, "member", "", map[string]any{"unlock": nil}, 202)
	e.act(id, "admin", "", map[string]any{"lock": nil}, 202)
	e.act(id, "member", "", map[string]any{"unlock": nil}, 403)
	e.act(id, "admin", "", map[string]any{"unlock": nil}, 202)

	// Shelve: with shelved_offload_time 0 the server is offloaded at
	// once: no host, no claim.
	e.act(id, "member", "", map[string]any{"shelveOffload": nil}, 403)
	e.act(id, "member", "", map[string]any{"shelve": nil}, 202)
	v = e.waitStatus(id, "admin", "SHELVED_OFFLOADED")
	if v["OS-EXT-SRV-ATTR:host"] != nil || v["OS-EXT-STS:power_state"] != 0.0 {
		t.Errorf("offloaded server: host %v power %v", v["OS-EXT-SRV-ATTR:host"], v["OS-EXT-STS:power_state"])
	}
	if c, err := e.st.GetConsumer(ctx, id); err == nil && len(c.Allocations) > 0 {
		t.Errorf("offloaded server still holds %v", c.Allocations)
	}
	e.act(id, "member", "", map[string]any{"unshelve": nil}, 202)
	v = e.waitStatus(id, "admin", "ACTIVE")
	host, _ := v["OS-EXT-SRV-ATTR:host"].(string)
	c, err := e.st.GetConsumer(ctx, id)
	if host == "" || err != nil || len(c.Allocations) != 1 || c.Allocations["rp-"+host] == nil {
		t.Errorf("unshelved on %q with allocations %v (%v)", host, c.Allocations, err)
	}

	var acts struct{ InstanceActions []map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+id+"/os-instance-actions", "member", "", nil, &acts)
	var names []string
	for _, a := range acts.InstanceActions {
		names = append(names, a["action"].(string))
	}
	got := strings.Join(names, ",")
	want := "unshelve,shelve,unlock,lock,unlock,lock,rebuild,unrescue,rescue,reboot,reboot,suspend,unpause,pause,start,stop,create"
	if got != want {
		t.Errorf("instance actions %s, want %s", got, want)
	}
}
