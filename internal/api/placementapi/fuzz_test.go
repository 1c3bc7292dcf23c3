package placementapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"keel/internal/apitest"
	"keel/internal/httpbody"
)

// placementWrites are Placement's request bodies by method and path ({rp}
// is a provider that exists).
var placementWrites = []struct{ method, path string }{
	{"POST", "/placement/resource_providers"},
	{"PUT", "/placement/resource_providers/{rp}"},
	{"PUT", "/placement/resource_providers/{rp}/inventories"},
	{"PUT", "/placement/resource_providers/{rp}/inventories/VCPU"},
	{"POST", "/placement/resource_providers/{rp}/inventories"},
	{"PUT", "/placement/resource_providers/{rp}/traits"},
	{"PUT", "/placement/resource_providers/{rp}/aggregates"},
	{"PUT", "/placement/allocations/c1"},
	{"PUT", "/placement/allocations/c2"},
	{"POST", "/placement/allocations"},
	{"POST", "/placement/resource_classes"},
	{"PUT", "/placement/traits/CUSTOM_FUZZ"},
}

// placementShape is Placement's error body: {"errors": [{status, title,
// detail, code (from 1.23), request_id}]}.
func placementShape(body []byte) error {
	var f struct {
		Errors []struct {
			Status *int    `json:"status"`
			Title  *string `json:"title"`
			Code   *string `json:"code"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return err
	}
	// (The code is there from 1.23.)
	if len(f.Errors) == 0 || f.Errors[0].Status == nil || f.Errors[0].Title == nil {
		return fmt.Errorf("no errors[0] with status and title")
	}
	return nil
}

// FuzzPlacementRequests sends arbitrary bodies and microversions to every
// Placement write: never a 5xx, errors in Placement's shape, and a refused
// request leaves providers, inventories, usages and allocations as they
// were.
func FuzzPlacementRequests(f *testing.F) {
	for i := range placementWrites {
		for _, seed := range []string{
			`{"name": "new", "uuid": "10000000-0000-0000-0000-000000000001"}`,
			`{"name": "h1"}`,
			`{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}`,
			`{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": -4, "allocation_ratio": 0}}}`,
			`{"resource_provider_generation": 0, "total": 8}`,
			`{"resource_provider_generation": 0, "traits": ["CUSTOM_X"]}`,
			`{"resource_provider_generation": 0, "aggregates": ["20000000-0000-0000-0000-000000000001"]}`,
			`{"allocations": {"00000000-0000-0000-0000-000000000001": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u", "consumer_generation": null}`,
			`{"allocations": {"00000000-0000-0000-0000-000000000001": {"resources": {"VCPU": 1000}}}, "project_id": "p", "user_id": "u", "consumer_generation": 1}`,
			`{"allocations": [{"resource_provider": {"uuid": "00000000-0000-0000-0000-000000000002"}, "resources": {"MEMORY_MB": 64}}]}`,
			`{"c9": {"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": null}}`,
			`{"name": "CUSTOM_GPU"}`,
			`null`, `[]`, `{`, ``, `{"allocations": {"x": {"resources": {"VCPU": 1.5}}}}`,
		} {
			f.Add(uint8(i), []string{"1.0", "1.28", "1.39"}[(i+len(seed))%3], []byte(seed))
		}
	}
	f.Add(uint8(7), "latest", bytes.Repeat([]byte("["), int(httpbody.DefaultLimit)+1))
	f.Add(uint8(7), "1.999", []byte(`{}`))
	f.Fuzz(func(t *testing.T, which uint8, version string, body []byte) {
		srv, uuids := newServer(t)
		h := srv.Config.Handler
		snapshot := func() string {
			var b strings.Builder
			paths := []string{"/placement/resource_providers", "/placement/allocations/c1", "/placement/allocations/c2", "/placement/resource_classes", "/placement/traits?name=startswith:CUSTOM_"}
			for _, name := range []string{"h1", "h2", "h3"} {
				for _, sub := range []string{"", "/inventories", "/usages", "/traits", "/aggregates", "/allocations"} {
					paths = append(paths, "/placement/resource_providers/"+uuids[name]+sub)
				}
			}
			for _, p := range paths {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest("GET", p, nil)
				req.Header.Set("X-Auth-Token", "admin")
				req.Header.Set("OpenStack-API-Version", "placement latest")
				h.ServeHTTP(rec, req)
				fmt.Fprintf(&b, "%s %d %s\n", p, rec.Code, rec.Body.Bytes())
			}
			return b.String()
		}
		w := placementWrites[int(which)%len(placementWrites)]
		req := httptest.NewRequest(w.method, strings.ReplaceAll(w.path, "{rp}", uuids["h1"]), bytes.NewReader(body))
		req.Header.Set("X-Auth-Token", "admin")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("OpenStack-API-Version", "placement "+version)
		rec := apitest.Refused(t, h, req, snapshot, placementShape)
		if len(body) > int(httpbody.DefaultLimit) && rec.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("a %d-byte body: %d, want 413", len(body), rec.Code)
		}
	})
}
