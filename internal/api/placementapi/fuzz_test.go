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
	"keel/internal/store/postgres/postgrestest"
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
	{"PUT", "/placement/allocations/cc000011-0000-4000-8000-000000000000"},
	{"PUT", "/placement/allocations/cc000001-0000-4000-8000-000000000000"},
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

// placementSeeds are the fuzz targets' seed bodies: well-formed writes,
// wrong values, bad JSON, and what once reached a store unchecked (NUL
// bytes, numbers past the database's integers, a ratio whose capacity is
// past int64).
var placementSeeds = []string{
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
	`{"cc0000c9-0000-4000-8000-000000000000": {"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": null}}`,
	`{"name": "CUSTOM_GPU"}`,
	`null`, `[]`, `{`, ``, `{"allocations": {"x": {"resources": {"VCPU": 1.5}}}}`,
	`{"name": "n\u0000"}`,
	`{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 2147483647, "allocation_ratio": 3e38}}}`,
	`{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4611686018427387904}}}`,
	`{"allocations": {"00000000-0000-0000-0000-000000000001": {"resources": {"VCPU": 4611686018427387904}}}, "project_id": "p", "user_id": "u", "consumer_generation": null}`,
	`{"allocations": {"00000000-0000-0000-0000-000000000001": {"resources": {"VCPU": 1}}}, "project_id": "p\u0000", "user_id": "u", "consumer_generation": null}`,
}

// FuzzPlacementRequests sends arbitrary bodies and microversions to every
// Placement write: never a 5xx, errors in Placement's shape, and a refused
// request leaves providers, inventories, usages and allocations as they
// were.
func FuzzPlacementRequests(f *testing.F) {
	for i := range placementWrites {
		for _, seed := range placementSeeds {
			f.Add(uint8(i), []string{"1.0", "1.28", "1.39"}[(i+len(seed))%3], []byte(seed))
		}
	}
	f.Add(uint8(7), "latest", bytes.Repeat([]byte("["), int(httpbody.DefaultLimit)+1))
	f.Add(uint8(7), "1.999", []byte(`{}`))
	f.Fuzz(func(t *testing.T, which uint8, version string, body []byte) {
		srv, uuids := newServer(t)
		fuzzPlacement(t, srv, uuids, which, version, body)
	})
}

// FuzzPlacementRequestsPostgres is FuzzPlacementRequests on the PostgreSQL
// store (a fresh database per input, copied from a migrated template). Its
// seed corpus sends each seed to the writes whose body it is (one in turn
// for malformed ones), at a microversion chosen in turn, to keep the
// default run short; -pgfuzz.all crosses every seed with every write, and
// go test -fuzz runs it for longer (tests/fuzz.sh --postgres).
func FuzzPlacementRequestsPostgres(f *testing.F) {
	byKey := map[string][]int{
		"name": {0, 1, 10}, "resource_provider_generation": {2, 3, 4, 5, 6}, "allocations": {7, 8}, "cc0000c9-0000-4000-8000-000000000000": {9},
	}
	for i, seed := range placementSeeds {
		writes := []int{i % len(placementWrites)}
		if k, _, ok := strings.Cut(strings.TrimPrefix(seed, `{"`), `"`); ok && strings.HasPrefix(seed, `{"`) && byKey[k] != nil {
			writes = byKey[k]
		}
		if *pgFuzzAll {
			writes = writes[:0]
			for j := range placementWrites {
				writes = append(writes, j)
			}
		}
		for _, j := range writes {
			f.Add(uint8(j), []string{"1.0", "1.28", "1.39"}[(i+j)%3], []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, version string, body []byte) {
		srv, uuids := newServerOn(t, postgrestest.Open(t))
		fuzzPlacement(t, srv, uuids, which, version, body)
	})
}

// fuzzPlacement sends one body to the write which names.
func fuzzPlacement(t *testing.T, srv *httptest.Server, uuids map[string]string, which uint8, version string, body []byte) {
	h := srv.Config.Handler
	snapshot := func() string {
		var b strings.Builder
		paths := []string{"/placement/resource_providers", "/placement/allocations/cc000011-0000-4000-8000-000000000000", "/placement/allocations/cc000001-0000-4000-8000-000000000000", "/placement/resource_classes", "/placement/traits?name=startswith:CUSTOM_"}
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

}
