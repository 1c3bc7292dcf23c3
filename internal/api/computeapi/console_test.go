package computeapi_test

import (
	"strings"
	"testing"
)

// TestConsoleOutput reads a server's console log as Nova's
// os-getConsoleOutput answers: all of it, its last lines with length (a
// number or a string of digits), nothing for 0, a stopped server's log
// too (with the stop in it), and Nova's 400s for a length its schema
// refuses.
func TestConsoleOutput(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "1", "imageRef": "img"}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")
	output := func(args map[string]any) string {
		t.Helper()
		out := e.act(id, "member", "", map[string]any{"os-getConsoleOutput": args}, 200)
		s, ok := out["output"].(string)
		if !ok {
			t.Fatalf("os-getConsoleOutput %v: %v, no output string", args, out)
		}
		return s
	}
	all := output(map[string]any{})
	if n := len(strings.Split(all, "\n")); n <= 3 || !strings.Contains(all, id) || !strings.Contains(all, "vm1 login:") {
		t.Fatalf("whole console log: %d lines %q, want more than 3 naming the server", n, all)
	}
	for _, c := range []struct {
		length any
		lines  int
	}{{3, 3}, {"2", 2}, {nil, len(strings.Split(all, "\n"))}, {-1, len(strings.Split(all, "\n"))}, {1000, len(strings.Split(all, "\n"))}} {
		got := output(map[string]any{"length": c.length})
		if n := len(strings.Split(got, "\n")); n != c.lines || !strings.HasSuffix(all, got) {
			t.Errorf("length %v: %d lines %q, want the last %d of the log", c.length, n, got, c.lines)
		}
	}
	if got := output(map[string]any{"length": 0}); got != "" {
		t.Errorf("length 0: %q, want nothing", got)
	}
	for _, c := range []struct {
		args any
		msg  string
	}{
		{map[string]any{"length": -2}, "Invalid input for field/attribute length. Value: -2. -2 is less than the minimum of -1"},
		{map[string]any{"length": "ten"}, "Invalid input for field/attribute length. Value: ten. 'ten' does not match '^-?[0-9]+$'"},
		{map[string]any{"length": true}, "Invalid input for field/attribute length. Value: true. True is not of type 'integer', 'string', 'null'"},
		{map[string]any{"length": 2.5}, "Invalid input for field/attribute length. Value: 2.5. 2.5 is not of type 'integer', 'string', 'null'"},
		{map[string]any{"lines": 2}, `Invalid input for field/attribute os-getConsoleOutput. Value: {"lines":2}. Additional properties are not allowed ('lines' was unexpected)`},
		{nil, "Invalid input for field/attribute os-getConsoleOutput. Value: null. None is not of type 'object'"},
	} {
		out := e.act(id, "member", "", map[string]any{"os-getConsoleOutput": c.args}, 400)
		if msg := out["badRequest"].(map[string]any)["message"]; msg != c.msg {
			t.Errorf("os-getConsoleOutput %v: %q, want %q", c.args, msg, c.msg)
		}
	}
	e.act(id, "member", "", map[string]any{"os-stop": nil}, 202)
	e.waitStatus(id, "member", "SHUTOFF")
	if got := output(map[string]any{"length": 3}); len(strings.Split(got, "\n")) != 3 || !strings.Contains(got, "stop_instance, now stopped") {
		t.Errorf("a stopped server's last 3 lines: %q, want 3 with the stop", got)
	}
	// Another project's server is not found, as Nova's.
	var other struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm2", "flavorRef": "1", "imageRef": "img"}}, &other)
	out := e.act(other.Server.ID, "member", "", map[string]any{"os-getConsoleOutput": map[string]any{}}, 404)
	if msg := out["itemNotFound"].(map[string]any)["message"]; msg != "Instance "+other.Server.ID+" could not be found." {
		t.Errorf("another project's server: %q", msg)
	}
}

// TestDeferredDeleteActions: forceDelete and restore are actions Nova
// knows, so a server that does not exist is a 404 in Nova's shape (keel
// said 400 "There is no such action", failing Tempest's negative tests);
// with no soft delete, restoring a server that exists is Nova's 409 and
// forceDelete deletes it (202), a locked one only for an admin.
func TestDeferredDeleteActions(t *testing.T) {
	e := newEnv(t)
	missing := "00000000-0000-0000-0000-00000000abcd"
	for _, action := range []string{"forceDelete", "restore", "os-getConsoleOutput"} {
		var args any
		if action == "os-getConsoleOutput" {
			args = map[string]any{"length": 5}
		}
		out := e.act(missing, "member", "", map[string]any{action: args}, 404)
		nf, _ := out["itemNotFound"].(map[string]any)
		if nf["message"] != "Instance "+missing+" could not be found." || nf["code"] != float64(404) {
			t.Errorf("%s of a server that does not exist: %v, want Nova's itemNotFound", action, out)
		}
	}
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "1", "imageRef": "img"}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")
	out := e.act(id, "member", "", map[string]any{"restore": nil}, 409)
	if msg := out["conflictingRequest"].(map[string]any)["message"]; msg != "Cannot 'restore' instance "+id+" while it is in vm_state active" {
		t.Errorf("restore of an active server: %q", msg)
	}
	e.act(id, "admin", "", map[string]any{"lock": nil}, 202)
	out = e.act(id, "member", "", map[string]any{"forceDelete": nil}, 409)
	if msg := out["conflictingRequest"].(map[string]any)["message"]; msg != "Instance "+id+" is locked" {
		t.Errorf("a member's forceDelete of a locked server: %q", msg)
	}
	e.act(id, "admin", "", map[string]any{"forceDelete": nil}, 202)
	for range 200 {
		if resp := e.call("GET", "/compute/v2.1/servers/"+id, "member", "", nil, nil); resp.StatusCode == 404 {
			return
		}
		e.clk.Advance(500e6)
	}
	t.Fatalf("server %s still there after forceDelete", id)
}
