package computeapi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"keel/internal/store"
)

// TestDeleteService: DELETE /os-services/{id} is refused with Nova's 409s
// while the host has an instance or a migration in progress (a cold
// migration waiting to be confirmed involves both hosts), and Nova's
// 400s and 404s for a bad or unknown id at 2.1 and 2.53; once the move
// is confirmed the source's service goes with its hypervisor, its
// provider and its aggregate membership (204), and a second delete is
// 404. A member gets 403.
func TestDeleteService(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ids := func(version string) map[string]any {
		t.Helper()
		var list struct{ Services []map[string]any }
		e.call("GET", "/compute/v2.1/os-services", "admin", version, nil, &list)
		out := map[string]any{}
		for _, s := range list.Services {
			out[s["host"].(string)] = s["id"]
		}
		return out
	}
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "member", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "imageRef": "img"}}, &created)
	id := created.Server.ID
	src := e.waitStatus(id, "admin", "ACTIVE")["OS-EXT-SRV-ATTR:host"].(string)
	var agg struct{ Aggregate struct{ ID float64 } }
	e.call("POST", "/compute/v2.1/os-aggregates", "admin", "", map[string]any{"aggregate": map[string]any{"name": "rack1"}}, &agg)
	aggPath := fmt.Sprintf("/compute/v2.1/os-aggregates/%d", int(agg.Aggregate.ID))
	for _, h := range []string{"h1", "h2", "h3"} {
		if resp := e.call("POST", aggPath+"/action", "admin", "", map[string]any{"add_host": map[string]any{"host": h}}, nil); resp.StatusCode != 200 {
			t.Fatalf("add_host %s: %d", h, resp.StatusCode)
		}
	}
	e.act(id, "admin", "", map[string]any{"migrate": nil}, 202)
	dest := e.waitStatus(id, "admin", "VERIFY_RESIZE")["OS-EXT-SRV-ATTR:host"].(string)

	v253, v21 := ids("2.53"), ids("2.1")
	hosting := "Unable to delete compute service that is hosting instances. Migrate or delete the instances first."
	moving := "Unable to delete compute service that has in-progress migrations. Complete the migrations or delete the instances first."
	for _, c := range []struct {
		version, id string
		status      int
		key, msg    string
	}{
		{"2.53", v253[dest].(string), 409, "conflictingRequest", hosting},
		{"2.53", v253[src].(string), 409, "conflictingRequest", moving},
		{"2.1", fmt.Sprint(int64(v21[dest].(float64))), 409, "conflictingRequest", hosting},
		{"2.52", fmt.Sprint(int64(v21[src].(float64))), 409, "conflictingRequest", moving},
		{"2.53", "not-a-uuid", 400, "badRequest", "Invalid uuid not-a-uuid"},
		{"2.53", "8d9c0b64-6a5e-4a8e-9f0e-000000000001", 404, "itemNotFound", "Service 8d9c0b64-6a5e-4a8e-9f0e-000000000001 not found."},
		{"2.52", "abc", 400, "badRequest", "Invalid input received: id must be an integer"},
		{"2.52", "12345", 404, "itemNotFound", "Service 12345 not found."},
		{"2.52", v253[src].(string), 400, "badRequest", "Invalid input received: id must be an integer"},
	} {
		var out map[string]map[string]any
		resp := e.call("DELETE", "/compute/v2.1/os-services/"+c.id, "admin", c.version, nil, &out)
		if resp.StatusCode != c.status || out[c.key]["message"] != c.msg {
			t.Errorf("DELETE os-services/%s at %s: %d %v, want %d %s %q", c.id, c.version, resp.StatusCode, out, c.status, c.key, c.msg)
		}
	}
	if resp := e.call("DELETE", "/compute/v2.1/os-services/"+v253[src].(string), "member", "2.53", nil, nil); resp.StatusCode != 403 {
		t.Errorf("a member's delete: %d, want 403", resp.StatusCode)
	}
	if got := ids("2.53"); len(got) != 3 {
		t.Fatalf("refused deletes changed the services: %v", got)
	}

	e.act(id, "member", "", map[string]any{"confirmResize": nil}, 204)
	e.waitStatus(id, "admin", "ACTIVE")
	if resp := e.call("DELETE", "/compute/v2.1/os-services/"+v253[src].(string), "admin", "2.53", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("deleting the idle %s: %d, want 204", src, resp.StatusCode)
	}
	if got := ids("2.53"); len(got) != 2 || got[src] != nil {
		t.Errorf("services after the delete: %v, want no %s", got, src)
	}
	var hyps struct{ Hypervisors []map[string]any }
	e.call("GET", "/compute/v2.1/os-hypervisors/detail", "admin", "2.53", nil, &hyps)
	for _, h := range hyps.Hypervisors {
		if h["hypervisor_hostname"] == src {
			t.Errorf("%s still a hypervisor: %v", src, h)
		}
	}
	if len(hyps.Hypervisors) != 2 {
		t.Errorf("%d hypervisors after the delete, want 2", len(hyps.Hypervisors))
	}
	sums, err := e.st.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.Name == src {
			t.Errorf("%s's provider %s is still there", src, s.UUID)
		}
	}
	var shown struct{ Aggregate struct{ Hosts []string } }
	e.call("GET", aggPath, "admin", "", nil, &shown)
	if slices.Contains(shown.Aggregate.Hosts, src) || len(shown.Aggregate.Hosts) != 2 {
		t.Errorf("aggregate hosts after the delete: %v, want the two others", shown.Aggregate.Hosts)
	}
	if _, err := e.st.GetHostRecord(ctx, src); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s's host record: %v, want gone", src, err)
	}
	var out map[string]map[string]any
	if resp := e.call("DELETE", "/compute/v2.1/os-services/"+v253[src].(string), "admin", "2.53", nil, &out); resp.StatusCode != 404 {
		t.Errorf("deleting it again: %d %v, want 404", resp.StatusCode, out)
	}
}
