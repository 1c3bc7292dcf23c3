package placementapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"keel/internal/api/placementapi"
	"keel/internal/placement"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// newServer serves the placement API over an in-memory store holding
// three hosts of 8 VCPU (ratio 2) and 16384 MB (512 reserved), with
// project p1 holding 4 VCPU and 8192 MB on h1.
func newServer(t *testing.T) (*httptest.Server, map[string]string) {
	t.Helper()
	srv, uuids, _ := newServerStore(t)
	return srv, uuids
}

// newServerStore is newServer that also returns the store, for tests that
// write around the API (as the scheduler and the agents do).
func newServerStore(t *testing.T) (*httptest.Server, map[string]string, *memory.Store) {
	t.Helper()
	st := memory.New()
	srv, uuids := newServerOn(t, st)
	return srv, uuids, st
}

// newServerOn is newServer on the store st.
func newServerOn(t *testing.T, st store.Store) (*httptest.Server, map[string]string) {
	t.Helper()
	ctx := context.Background()
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
	if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "cc000011-0000-4000-8000-000000000000", ProjectID: "p1", UserID: "u1", Type: placement.ConsumerInstance,
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

func send(t *testing.T, srv *httptest.Server, method, path, version string, body, out any) (int, string) {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	req.Header.Set("X-Auth-Token", "admin")
	req.Header.Set("OpenStack-API-Version", "placement "+version)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var f fault
	if resp.StatusCode >= 400 {
		_ = json.Unmarshal(data, &f)
		if len(f.Errors) == 1 {
			return resp.StatusCode, f.Errors[0].Code
		}
		return resp.StatusCode, string(data)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: not JSON: %v", method, path, err)
		}
	}
	return resp.StatusCode, ""
}

func TestWritesGoThroughGenerationsAndCapacity(t *testing.T) {
	srv, uuids := newServer(t)
	var p map[string]any
	if code, _ := send(t, srv, "POST", "/placement/resource_providers", "1.20", map[string]any{"name": "ext1"}, &p); code != 200 || p["generation"] != 0.0 {
		t.Fatalf("create: %d %v", code, p)
	}
	ext := p["uuid"].(string)
	if code, ec := send(t, srv, "POST", "/placement/resource_providers", "1.39", map[string]any{"name": "ext1"}, nil); code != 409 || ec != "placement.duplicate_name" {
		t.Errorf("duplicate name: %d %s", code, ec)
	}
	inv := map[string]any{"resource_provider_generation": 0, "inventories": map[string]any{"VCPU": map[string]any{"total": 4}}}
	var invOut struct {
		Inventories map[string]placement.Inventory
		Generation  int64 `json:"resource_provider_generation"`
	}
	if code, _ := send(t, srv, "PUT", "/placement/resource_providers/"+ext+"/inventories", "1.39", inv, &invOut); code != 200 || invOut.Generation != 1 ||
		invOut.Inventories["VCPU"].MaxUnit != 2147483647 || invOut.Inventories["VCPU"].AllocationRatio != 1 {
		t.Fatalf("put inventories: %d %+v", code, invOut)
	}
	if code, ec := send(t, srv, "PUT", "/placement/resource_providers/"+ext+"/inventories", "1.39", inv, nil); code != 409 || ec != "placement.concurrent_update" {
		t.Errorf("stale provider generation: %d %s", code, ec)
	}

	alloc := func(rp string, vcpu int, gen any) map[string]any {
		return map[string]any{"allocations": map[string]any{rp: map[string]any{"resources": map[string]int{"VCPU": vcpu}}},
			"project_id": "p2", "user_id": "u2", "consumer_generation": gen, "consumer_type": "INSTANCE"}
	}
	if code, ec := send(t, srv, "PUT", "/placement/allocations/cc000001-0000-4000-8000-000000000000", "1.39", alloc(ext, 3, nil), nil); code != 204 {
		t.Fatalf("new consumer: %d %s", code, ec)
	}
	var got struct {
		Allocations map[string]struct {
			Generation int64
			Resources  map[string]int64
		}
		ConsumerGeneration int64  `json:"consumer_generation"`
		ConsumerType       string `json:"consumer_type"`
		ProjectID          string `json:"project_id"`
	}
	send(t, srv, "GET", "/placement/allocations/cc000001-0000-4000-8000-000000000000", "1.39", nil, &got)
	if got.Allocations[ext].Resources["VCPU"] != 3 || got.ConsumerGeneration != 1 || got.ConsumerType != "INSTANCE" || got.ProjectID != "p2" {
		t.Fatalf("GET allocations: %+v", got)
	}
	if code, ec := send(t, srv, "PUT", "/placement/allocations/cc000001-0000-4000-8000-000000000000", "1.39", alloc(ext, 2, nil), nil); code != 409 || ec != "placement.concurrent_update" {
		t.Errorf("stale consumer generation: %d %s", code, ec)
	}
	if code, _ := send(t, srv, "PUT", "/placement/allocations/cc000001-0000-4000-8000-000000000000", "1.39", alloc(ext, 5, 1), nil); code != 409 {
		t.Errorf("5 VCPU of a total of 4: %d, want 409 (as Placement's capacity check)", code)
	}
	if code, ec := send(t, srv, "PUT", "/placement/allocations/cc000002-0000-4000-8000-000000000000", "1.39", alloc(ext, 2, nil), nil); code != 409 {
		t.Errorf("2 more VCPU where 1 is free: %d %s, want 409", code, ec)
	}
	if code, _ := send(t, srv, "PUT", "/placement/allocations/cc000001-0000-4000-8000-000000000000", "1.28", map[string]any{"allocations": map[string]any{}, "project_id": "p2", "user_id": "u2"}, nil); code != 400 {
		t.Errorf("no consumer_generation at 1.28: %d, want 400", code)
	}

	// POST /allocations is all or nothing: c3 fits on h2, c2's move to h1
	// (4 of 16 VCPU used, 13 more does not fit max_unit 8) does not.
	both := map[string]any{"cc000001-0000-4000-8000-000000000000": alloc(uuids["h1"], 13, 1), "cc000003-0000-4000-8000-000000000000": alloc(uuids["h2"], 1, nil)}
	if code, _ := send(t, srv, "POST", "/placement/allocations", "1.39", both, nil); code != 400 && code != 409 {
		t.Errorf("POST with one bad consumer: %d, want 400 or 409", code)
	}
	got.Allocations = nil
	if code, _ := send(t, srv, "GET", "/placement/allocations/cc000003-0000-4000-8000-000000000000", "1.39", nil, &got); code != 200 || len(got.Allocations) != 0 {
		t.Errorf("c3 written by a failed POST: %+v", got)
	}
	both = map[string]any{"cc000001-0000-4000-8000-000000000000": alloc(uuids["h1"], 2, 1), "cc000003-0000-4000-8000-000000000000": alloc(uuids["h2"], 1, nil)}
	if code, ec := send(t, srv, "POST", "/placement/allocations", "1.39", both, nil); code != 204 {
		t.Fatalf("POST allocations: %d %s", code, ec)
	}
	var use struct{ Usages map[string]int64 }
	send(t, srv, "GET", "/placement/resource_providers/"+uuids["h1"]+"/usages", "1.39", nil, &use)
	if use.Usages["VCPU"] != 6 {
		t.Errorf("h1 VCPU used after the move = %d, want 6", use.Usages["VCPU"])
	}
	use.Usages = nil
	send(t, srv, "GET", "/placement/resource_providers/"+ext+"/usages", "1.39", nil, &use)
	if use.Usages["VCPU"] != 0 {
		t.Errorf("ext1 VCPU used after the move = %d, want 0", use.Usages["VCPU"])
	}

	var pa struct {
		Allocations map[string]struct{ Resources map[string]int64 }
	}
	send(t, srv, "GET", "/placement/resource_providers/"+uuids["h1"]+"/allocations", "1.39", nil, &pa)
	if len(pa.Allocations) != 2 || pa.Allocations["cc000001-0000-4000-8000-000000000000"].Resources["VCPU"] != 2 {
		t.Errorf("h1's allocations: %+v", pa)
	}
	if code, ec := send(t, srv, "DELETE", "/placement/resource_providers/"+uuids["h2"], "1.39", nil, nil); code != 409 {
		t.Errorf("delete a provider in use: %d %s", code, ec)
	}
	if code, _ := send(t, srv, "DELETE", "/placement/allocations/cc000003-0000-4000-8000-000000000000", "1.39", nil, nil); code != 204 {
		t.Errorf("delete allocations: %d", code)
	}
	if code, _ := send(t, srv, "DELETE", "/placement/allocations/cc000003-0000-4000-8000-000000000000", "1.39", nil, nil); code != 404 {
		t.Errorf("delete them again: %d, want 404", code)
	}
	if code, _ := send(t, srv, "DELETE", "/placement/resource_providers/"+ext, "1.39", nil, nil); code != 204 {
		t.Errorf("delete an unused provider: %d", code)
	}
}
