package computeapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"keel/internal/records"
)

// TestStoppedServerMoves: Nova resizes and cold-migrates a stopped server
// without starting it: RESIZE, then VERIFY_RESIZE with power_state 4
// (shutdown) on the destination; a confirm leaves it SHUTOFF there with
// the new flavor, and a cold migration's revert brings it back SHUTOFF to
// the host it left.
func TestStoppedServerMoves(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.st.CreateFlavor(ctx, records.Flavor{ID: "3", Name: "m1.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 40}); err != nil {
		t.Fatal(err)
	}
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "imageRef": "img"}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")
	e.act(id, "member", "", map[string]any{"os-stop": nil}, 202)
	first := e.waitStatus(id, "admin", "SHUTOFF")["OS-EXT-SRV-ATTR:host"]

	e.act(id, "member", "", map[string]any{"resize": map[string]any{"flavorRef": "3"}}, 202)
	var show struct{ Server map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+id, "member", "", nil, &show)
	if show.Server["status"] != "RESIZE" {
		t.Fatalf("a stopped server's resize shows %v, want RESIZE", show.Server["status"])
	}
	v := e.waitStatus(id, "admin", "VERIFY_RESIZE")
	dest := v["OS-EXT-SRV-ATTR:host"]
	if dest == first || v["OS-EXT-STS:power_state"] != float64(records.PowerShutdown) || v["OS-EXT-STS:vm_state"] != "resized" {
		t.Fatalf("VERIFY_RESIZE on %v (from %v), power %v, vm_state %v; want another host, powered off", dest, first, v["OS-EXT-STS:power_state"], v["OS-EXT-STS:vm_state"])
	}
	e.act(id, "member", "", map[string]any{"confirmResize": nil}, 204)
	v = e.waitStatus(id, "admin", "SHUTOFF")
	if fl, _ := v["flavor"].(map[string]any); v["OS-EXT-SRV-ATTR:host"] != dest || fl["original_name"] != "m1.medium" || v["OS-EXT-STS:power_state"] != float64(records.PowerShutdown) {
		t.Fatalf("confirmed: on %v with %v, power %v; want SHUTOFF on %v with m1.medium", v["OS-EXT-SRV-ATTR:host"], v["flavor"], v["OS-EXT-STS:power_state"], dest)
	}

	e.act(id, "admin", "", map[string]any{"migrate": nil}, 202)
	v = e.waitStatus(id, "admin", "VERIFY_RESIZE")
	if v["OS-EXT-SRV-ATTR:host"] == dest || v["OS-EXT-STS:power_state"] != float64(records.PowerShutdown) {
		t.Fatalf("cold migration waits on %v, power %v", v["OS-EXT-SRV-ATTR:host"], v["OS-EXT-STS:power_state"])
	}
	e.act(id, "member", "", map[string]any{"revertResize": nil}, 202)
	v = e.waitStatus(id, "admin", "SHUTOFF")
	if v["OS-EXT-SRV-ATTR:host"] != dest {
		t.Fatalf("reverted to %v, want SHUTOFF on %v", v["OS-EXT-SRV-ATTR:host"], dest)
	}
	// It starts where it is, as any stopped server.
	e.act(id, "member", "", map[string]any{"os-start": nil}, 202)
	e.waitStatus(id, "member", "ACTIVE")
}

// TestLiveMigrationRefusedStates: Nova live-migrates ACTIVE and PAUSED
// servers only; a suspended or stopped one is refused with its 409 text,
// nothing recorded, the server left as it was. A paused one moves and
// arrives paused.
func TestLiveMigrationRefusedStates(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "imageRef": "img"}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")
	live := map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}
	for _, s := range []struct{ action, status, vmState, undo, back string }{
		{"suspend", "SUSPENDED", "suspended", "resume", "ACTIVE"},
		{"os-stop", "SHUTOFF", "stopped", "os-start", "ACTIVE"},
	} {
		e.act(id, "member", "", map[string]any{s.action: nil}, 202)
		e.waitStatus(id, "member", s.status)
		var fault map[string]map[string]any
		resp := e.call("POST", "/compute/v2.1/servers/"+id+"/action", "admin", "2.30", live, &fault)
		want := "Cannot 'os-migrateLive' instance " + id + " while it is in vm_state " + s.vmState
		if resp.StatusCode != 409 || fault["conflictingRequest"]["message"] != want {
			t.Errorf("live migration when %s: %d %v, want 409 %q", s.vmState, resp.StatusCode, fault, want)
		}
		var ms struct{ Migrations []map[string]any }
		e.call("GET", "/compute/v2.1/os-migrations", "admin", "", nil, &ms)
		if len(ms.Migrations) != 0 {
			t.Errorf("a refused live migration left migrations %v", ms.Migrations)
		}
		e.waitStatus(id, "member", s.status)
		e.act(id, "member", "", map[string]any{s.undo: nil}, 202)
		e.waitStatus(id, "member", s.back)
	}
	e.act(id, "member", "", map[string]any{"pause": nil}, 202)
	host := e.waitStatus(id, "admin", "PAUSED")["OS-EXT-SRV-ATTR:host"]
	e.act(id, "admin", "2.30", live, 202)
	if v := e.waitStatus(id, "admin", "PAUSED"); v["OS-EXT-SRV-ATTR:host"] == host {
		t.Errorf("the paused server is still on %v after its live migration", host)
	}
}

// BenchmarkMovesThroughTheAPI is the control plane's own time per move
// through the compute API (HTTP, the API's checks and views, the
// conductor, the scheduler, the memory store, the fake agents in process):
// the driver's time is virtual (the clock is advanced past the disk copy
// or the memory copy at once), so what is timed is everything else. Each
// round trip is its requests and the reads that see its end:
//
//	resize+confirm  resize, (disk moves), GET VERIFY_RESIZE, confirmResize, GET ACTIVE
//	migrate+revert  migrate, (disk moves), GET VERIFY_RESIZE, revertResize, GET ACTIVE
//	live            os-migrateLive, (memory copies), GET ACTIVE on another host
//	evacuate        (source forced down, untimed) evacuate, (rebuild), GET ACTIVE elsewhere
//
//	go test -run '^$' -bench MovesThroughTheAPI -benchtime 300x ./internal/api/computeapi/
func BenchmarkMovesThroughTheAPI(b *testing.B) {
	for _, kind := range []string{"resize+confirm", "migrate+revert", "live", "evacuate"} {
		b.Run(kind, func(b *testing.B) {
			e := newEnv(b)
			ctx := context.Background()
			if _, err := e.st.CreateFlavor(ctx, records.Flavor{ID: "3", Name: "m1.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 20}); err != nil {
				b.Fatal(err)
			}
			var created struct{ Server struct{ ID string } }
			e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "imageRef": "img"}}, &created)
			id := created.Server.ID
			e.clk.Advance(5 * time.Second)
			show := func(want string) map[string]any {
				var out struct{ Server map[string]any }
				e.call("GET", "/compute/v2.1/servers/"+id, "admin", "2.73", nil, &out)
				if out.Server["status"] != want || out.Server["OS-EXT-STS:task_state"] != nil {
					b.Fatalf("%s: server %v (task %v), want %s", kind, out.Server["status"], out.Server["OS-EXT-STS:task_state"], want)
				}
				return out.Server
			}
			host := show("ACTIVE")["OS-EXT-SRV-ATTR:host"].(string)
			flavor := "3"
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				switch kind {
				case "resize+confirm":
					e.act(id, "member", "", map[string]any{"resize": map[string]any{"flavorRef": flavor}}, 202)
					e.clk.Advance(time.Minute)
					show("VERIFY_RESIZE")
					e.act(id, "member", "", map[string]any{"confirmResize": nil}, 204)
					show("ACTIVE")
					flavor = map[string]string{"2": "3", "3": "2"}[flavor]
				case "migrate+revert":
					e.act(id, "admin", "", map[string]any{"migrate": nil}, 202)
					e.clk.Advance(time.Minute)
					show("VERIFY_RESIZE")
					e.act(id, "member", "", map[string]any{"revertResize": nil}, 202)
					show("ACTIVE")
				case "live":
					e.act(id, "admin", "2.30", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, 202)
					e.clk.Advance(time.Minute)
					show("ACTIVE")
				case "evacuate":
					b.StopTimer()
					if _, err := e.st.UpdateService(ctx, host, func(s *records.Service) error { s.ForcedDown = true; return nil }); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					e.act(id, "admin", "", map[string]any{"evacuate": map[string]any{}}, 200)
					e.clk.Advance(time.Minute)
					v := show("ACTIVE")
					b.StopTimer()
					if _, err := e.st.UpdateService(ctx, host, func(s *records.Service) error { s.ForcedDown = false; return nil }); err != nil {
						b.Fatal(err)
					}
					host = v["OS-EXT-SRV-ATTR:host"].(string)
					e.clk.Advance(time.Minute) // the source comes back: the evacuation completes
					b.StartTimer()
				}
			}
		})
	}
}

// TestRefusedResizeChangesNothing: a resize refused for the server's
// state (paused: 409) or its flavor (the same one: 400 with Nova's
// "When resizing, instances must change flavor!", as Nova's
// CannotResizeToSameFlavor; 409 before), and a cold migration to the
// server's own host (400 "Cannot migrate to the host where the server
// exists.", Nova's CannotMigrateToSameHost; 409 before), leave the server as
// it was, its disk config too — the request's OS-DCF:diskConfig is saved
// with the resize's start, not before its checks; a resize that starts
// takes it. Before, the API wrote the disk config before the conductor's
// state check: the refused resize left the server AUTO.
func TestRefusedResizeChangesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.st.CreateFlavor(ctx, records.Flavor{ID: "3", Name: "m1.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 40}); err != nil {
		t.Fatal(err)
	}
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "imageRef": "img"}}, &created)
	id := created.Server.ID
	e.waitStatus(id, "member", "ACTIVE")
	diskConfig := func() any {
		var show struct{ Server map[string]any }
		e.call("GET", "/compute/v2.1/servers/"+id, "member", "", nil, &show)
		return show.Server["OS-DCF:diskConfig"]
	}
	resize := func(flavor string, want int) {
		t.Helper()
		e.act(id, "member", "", map[string]any{"resize": map[string]any{"flavorRef": flavor, "OS-DCF:diskConfig": "AUTO"}}, want)
	}
	out := e.act(id, "member", "", map[string]any{"resize": map[string]any{"flavorRef": "2", "OS-DCF:diskConfig": "AUTO"}}, 400) // the flavor it has
	if !strings.Contains(fmt.Sprint(out), "When resizing, instances must change flavor!") {
		t.Fatalf("a resize to the same flavor answered %v, want Nova's text", out)
	}
	if got := diskConfig(); got != "MANUAL" {
		t.Fatalf("a resize refused for its flavor left the disk config %v, want MANUAL", got)
	}
	var show struct{ Server map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+id, "admin", "", nil, &show)
	host := show.Server["OS-EXT-SRV-ATTR:host"]
	out = e.act(id, "admin", "2.56", map[string]any{"migrate": map[string]any{"host": host}}, 400)
	if !strings.Contains(fmt.Sprint(out), "Cannot migrate to the host where the server exists.") {
		t.Fatalf("a cold migration to the server's own host %v answered %v, want Nova's text", host, out)
	}
	e.act(id, "member", "", map[string]any{"pause": nil}, 202)
	e.waitStatus(id, "member", "PAUSED")
	resize("3", 409)
	if got := diskConfig(); got != "MANUAL" {
		t.Fatalf("a resize refused for the server's state left the disk config %v, want MANUAL", got)
	}
	e.act(id, "member", "", map[string]any{"unpause": nil}, 202)
	e.waitStatus(id, "member", "ACTIVE")
	resize("3", 202)
	if got := diskConfig(); got != "AUTO" {
		t.Fatalf("a resize that started has the disk config %v, want AUTO", got)
	}
	e.waitStatus(id, "member", "VERIFY_RESIZE")
}
