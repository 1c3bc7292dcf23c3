package placementapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"keel/internal/api/placementapi"
	"keel/internal/placement"
	"keel/internal/store/memory"
)

// newServer serves the placement API over an in-memory store holding
// three hosts of 8 VCPU (ratio 2) and 16384 MB (512 reserved), with
// project p1 holding 4 VCPU and 8192 MB on h1.
func newServer(t *testing.T) (*httptest.Server, map[string]string) {
	t.Helper()
	ctx := context.Background()
	st := memory.New()
	uuids := map[string]string{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("h%d", i)
		vcpu := placement.NewInventory(8)
		vcpu.AllocationRatio = 2
		mem := placement.NewInventory(16384)
		mem.Reserved = 512
		p, err := st.CreateProvider(ctx, placement.Provider{UUID: fmt.Sprintf("00000000-0000-0000-0000-00000000000%d", i), Name: name,
			Inventories: placement.Inventories{placement.VCPU: vcpu, placement.MemoryMB: mem}})
		if err != nil {
			t.Fatal(err)
		}
		uuids[name] = p.UUID
	}
	if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c1", ProjectID: "p1", UserID: "u1", Type: placement.ConsumerInstance,
		Allocations: map[string]placement.Resources{uuids["h1"]: {placement.VCPU: 4, placement.MemoryMB: 8192}}}); err != nil {
		t.Fatal(err)
	}
	api := placementapi.New(st, func(r *http.Request) bool { return r.Header.Get("X-Auth-Token") == "admin" })
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return srv, uuids
}

func get(t *testing.T, srv *httptest.Server, path, token, version string, out any) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	req.Header.Set("X-Auth-Token", token)
	if version != "" {
		req.Header.Set("OpenStack-API-Version", "placement "+version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("GET %s: %d, not JSON: %v", path, resp.StatusCode, err)
		}
	}
	return resp
}

type fault struct {
	Errors []struct {
		Status    int
		Code      string
		RequestID string `json:"request_id"`
	}
}

func TestVersionsPolicyAndErrors(t *testing.T) {
	srv, _ := newServer(t)
	var doc struct {
		Versions []struct {
			MinVersion string `json:"min_version"`
			MaxVersion string `json:"max_version"`
		} `json:"versions"`
	}
	get(t, srv, "/placement/", "", "", &doc)
	if len(doc.Versions) != 1 || doc.Versions[0].MinVersion != "1.0" || doc.Versions[0].MaxVersion != "1.39" {
		t.Errorf("version document: %+v", doc)
	}
	var f fault
	if resp := get(t, srv, "/placement/resource_providers", "member", "", &f); resp.StatusCode != 403 || len(f.Errors) != 1 || f.Errors[0].Status != 403 || f.Errors[0].RequestID == "" {
		t.Errorf("member: %d %+v", resp.StatusCode, f)
	}
	if resp := get(t, srv, "/placement/resource_providers", "admin", "1.40", &f); resp.StatusCode != 406 {
		t.Errorf("version 1.40: %d", resp.StatusCode)
	}
	resp := get(t, srv, "/placement/resource_providers", "admin", "1.20", nil)
	if resp.StatusCode != 200 || resp.Header.Get("OpenStack-API-Version") != "placement 1.20" {
		t.Errorf("1.20: %d %q", resp.StatusCode, resp.Header.Get("OpenStack-API-Version"))
	}
	if resp := get(t, srv, "/placement/resource_providers/nope/inventories", "admin", "", &f); resp.StatusCode != 404 {
		t.Errorf("unknown provider: %d", resp.StatusCode)
	}
	if resp := get(t, srv, "/placement/allocation_candidates?resources=VCPU:1", "admin", "1.9", &f); resp.StatusCode != 404 {
		t.Errorf("candidates at 1.9: %d, want 404", resp.StatusCode)
	}
	if resp := get(t, srv, "/placement/allocation_candidates?resources=VCPU", "admin", "1.39", &f); resp.StatusCode != 400 {
		t.Errorf("malformed resources: %d, want 400", resp.StatusCode)
	}
}

func TestProvidersUsagesAndCandidates(t *testing.T) {
	srv, uuids := newServer(t)
	var list struct {
		ResourceProviders []map[string]any `json:"resource_providers"`
	}
	get(t, srv, "/placement/resource_providers?resources=MEMORY_MB:8000", "admin", "1.39", &list)
	if len(list.ResourceProviders) != 2 {
		t.Errorf("providers with 8000 MB free (h1 has 7680): %v", list.ResourceProviders)
	}
	get(t, srv, "/placement/resource_providers?name=h2", "admin", "1.39", &list)
	if len(list.ResourceProviders) != 1 || list.ResourceProviders[0]["uuid"] != uuids["h2"] || list.ResourceProviders[0]["root_provider_uuid"] != uuids["h2"] {
		t.Errorf("name=h2: %v", list.ResourceProviders)
	}

	var inv struct {
		Inventories map[string]placement.Inventory
		Generation  int64 `json:"resource_provider_generation"`
	}
	get(t, srv, "/placement/resource_providers/"+uuids["h1"]+"/inventories", "admin", "", &inv)
	if m := inv.Inventories["MEMORY_MB"]; m.Total != 16384 || m.Reserved != 512 || inv.Inventories["VCPU"].AllocationRatio != 2 {
		t.Errorf("inventories: %+v", inv)
	}
	var use struct{ Usages map[string]int64 }
	get(t, srv, "/placement/resource_providers/"+uuids["h1"]+"/usages", "admin", "", &use)
	if use.Usages["VCPU"] != 4 || use.Usages["MEMORY_MB"] != 8192 {
		t.Errorf("h1 usages: %v", use.Usages)
	}
	get(t, srv, "/placement/usages?project_id=p1", "admin", "1.9", &use)
	if use.Usages["VCPU"] != 4 || use.Usages["MEMORY_MB"] != 8192 {
		t.Errorf("p1 usages: %v", use.Usages)
	}
	use.Usages = nil
	get(t, srv, "/placement/usages?project_id=p2", "admin", "1.9", &use)
	if len(use.Usages) != 0 {
		t.Errorf("p2 usages: %v", use.Usages)
	}

	var ac struct {
		AllocationRequests []struct {
			Allocations map[string]struct{ Resources map[string]int64 }
		} `json:"allocation_requests"`
		ProviderSummaries map[string]struct {
			Resources map[string]struct{ Capacity, Used int64 }
		} `json:"provider_summaries"`
	}
	// h1 has 15872 − 8192 = 7680 MB free: 8000 fits only on h2 and h3.
	get(t, srv, "/placement/allocation_candidates?resources=VCPU:1,MEMORY_MB:8000", "admin", "1.39", &ac)
	if len(ac.AllocationRequests) != 2 || len(ac.ProviderSummaries) != 2 {
		t.Fatalf("candidates: %+v", ac)
	}
	for _, r := range ac.AllocationRequests {
		for rp, a := range r.Allocations {
			if rp == uuids["h1"] || a.Resources["MEMORY_MB"] != 8000 || a.Resources["VCPU"] != 1 {
				t.Errorf("candidate %s: %v", rp, a.Resources)
			}
		}
	}
	if s := ac.ProviderSummaries[uuids["h2"]].Resources["MEMORY_MB"]; s.Capacity != 15872 || s.Used != 0 {
		t.Errorf("h2 summary: %+v", s)
	}
	get(t, srv, "/placement/allocation_candidates?resources=VCPU:1&limit=1", "admin", "1.39", &ac)
	if len(ac.AllocationRequests) != 1 {
		t.Errorf("limit=1: %d candidates", len(ac.AllocationRequests))
	}
}
