package computeapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"keel/internal/apitest"
	"keel/internal/httpbody"
	"keel/internal/store/postgres/postgrestest"
)

// computeWrites are the compute API's request bodies, by method and path
// ({id} is a server that exists).
var computeWrites = []struct{ method, path string }{
	{"POST", "/compute/v2.1/servers"},
	{"POST", "/compute/v2.1/servers/{id}/action"},
	{"PUT", "/compute/v2.1/servers/{id}"},
	{"POST", "/compute/v2.1/flavors"},
	{"POST", "/compute/v2.1/flavors/1/os-extra_specs"},
	{"PUT", "/compute/v2.1/flavors/1/os-extra_specs/hw:cpu_policy"},
	{"PUT", "/compute/v2.1/os-services/disable"},
	{"PUT", "/compute/v2.1/os-services/{service}"},
	{"POST", "/compute/v2.1/os-aggregates"},
	{"POST", "/compute/v2.1/os-server-groups"},
	{"POST", "/compute/v2.1/os-keypairs"},
	{"PUT", "/compute/v2.1/servers/{id}/metadata"},
	{"POST", "/compute/v2.1/servers/{id}/metadata"},
	{"PUT", "/compute/v2.1/servers/{id}/metadata/a"},
	{"PUT", "/compute/v2.1/os-hosts/{host}"},
	{"POST", "/compute/v2.1/os-server-external-events"},
}

// computeShape is Nova's fault body: one key naming the fault, with the
// status code and a message.
func computeShape(body []byte) error {
	var f map[string]struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return err
	}
	if len(f) != 1 {
		return fmt.Errorf("%d keys, want one fault", len(f))
	}
	for k, v := range f {
		if v.Code == nil || v.Message == nil {
			return fmt.Errorf("fault %q lacks code or message", k)
		}
	}
	return nil
}

// snapshot renders what a compute request can change, as admin sees it.
func (e *env) snapshot() string {
	var b strings.Builder
	for _, p := range []string{"/servers/detail?all_tenants=1", "/flavors/detail?is_public=None", "/os-services", "/os-hypervisors/detail", "/os-migrations", "/os-keypairs"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/compute/v2.1"+p, nil)
		req.Header.Set("X-Auth-Token", "admin")
		req.Header.Set("OpenStack-API-Version", "compute 2.87")
		e.srv.Config.Handler.ServeHTTP(rec, req)
		fmt.Fprintf(&b, "%s %d %s\n", p, rec.Code, rec.Body.Bytes())
	}
	return b.String()
}

// computeSeeds are the fuzz targets' seed bodies: well-formed requests,
// wrong types, bad JSON, and what once reached a store unchecked (NUL
// bytes, numbers past the database's integers).
var computeSeeds = []string{
	`{"server": {"name": "vm", "flavorRef": "1", "networks": "none"}}`,
	`{"server": {"name": 1, "flavorRef": ["1"]}}`,
	`{"server": {"name": "v\u0000m", "flavorRef": "1", "networks": "none"}}`,
	`{"server": {"name": "vm", "flavorRef": "1", "networks": "none", "metadata": {"k\u0000": "v"}}}`,
	`{"server": {"name": "vm", "flavorRef": "1", "networks": "none", "metadata": {"k": "v\u0000"}}}`,
	`{"os-migrateLive": {"host": null, "block_migration": "auto"}}`,
	`{"os-migrateLive": {"host": "h2", "block_migration": true, "disk_over_commit": false}}`,
	`{"os-migrateLive": {"host": "h\u0000", "block_migration": "auto"}}`,
	`{"flavor": {"name": "f", "ram": 1, "vcpus": 1, "disk": 0}}`,
	`{"flavor": {"name": "f", "ram": -1, "vcpus": "x", "disk": 1e400}}`,
	`{"flavor": {"name": "f", "ram": 4611686018427387904, "vcpus": 9223372036854775807, "disk": 0, "id": "a\u0000"}}`,
	`{"flavor": {"name": "f", "ram": 1, "vcpus": 1, "disk": 0, "description": "d\u0000"}}`,
	`{"extra_specs": {"hw:cpu_policy": "dedicated"}}`,
	`{"hw:cpu_policy": "shared"}`,
	`{"host": "h1", "binary": "nova-compute"}`,
	`{"status": "disabled", "disabled_reason": "x"}`,
	`{"status": "disabled", "disabled_reason": "x\u0000"}`,
	`{"aggregate": {"name": "a", "availability_zone": "z"}}`,
	`{"server_group": {"name": "g", "policies": ["anti-affinity"]}}`,
	`{"keypair": {"name": "k", "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4aJVfMOZ/BFPLT3XcrMcW0AVv6M0nqHJDOQPkx0izo x"}}`,
	`{"keypair": {"name": "k/", "type": "x509", "user_id": 7}}`,
	`{"metadata": {"a": "b"}}`, `{"meta": {"a": "b", "c": "d"}}`, `{"status": "disable"}`,
	`{"metadata": {"a": "b\u0000"}}`,
	`{"events": [{"name": "network-changed", "server_uuid": "x"}]}`,
	`{"server": null}`, `[]`, `null`, `{`, ``, `{"a":1} {"b":2}`,
}

// FuzzComputeRequests sends arbitrary bodies and microversions to every
// compute write: never a 5xx, errors in Nova's shape, and a refused request
// leaves servers (with their metadata), flavors, services, hypervisors,
// migrations and key pairs as they were.
func FuzzComputeRequests(f *testing.F) {
	for i := range computeWrites {
		for _, seed := range computeSeeds {
			f.Add(uint8(i), []string{"2.1", "2.87"}[(i+len(seed))%2], []byte(seed))
		}
	}
	f.Add(uint8(0), "latest", bytes.Repeat([]byte(" "), int(httpbody.DefaultLimit)+1))
	f.Add(uint8(1), "2.999", []byte(`{"pause": null}`))
	f.Fuzz(func(t *testing.T, which uint8, version string, body []byte) {
		fuzzCompute(t, newEnv(t), which, version, body)
	})
}

// FuzzComputeRequestsPostgres is FuzzComputeRequests on the PostgreSQL
// store (a fresh database per input, copied from a migrated template),
// where a NUL byte or a number past its columns fails in the database if
// the API lets it through. Its seed corpus sends each seed to the writes
// whose body it is (one in turn for malformed ones), to keep the default
// run short; -pgfuzz.all crosses every seed with every write, as
// FuzzComputeRequests does, and go test -fuzz runs it for longer
// (tests/fuzz.sh --postgres).
func FuzzComputeRequestsPostgres(f *testing.F) {
	for i, seed := range computeSeeds {
		for _, j := range seedWrites(seed, i) {
			f.Add(uint8(j), []string{"2.1", "2.87"}[(i+j)%2], []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, version string, body []byte) {
		fuzzCompute(t, newEnvOn(t, postgrestest.Open(t)), which, version, body)
	})
}

// seedWrites are the writes (indexes in computeWrites) the PostgreSQL
// target's corpus sends seed i to: every write with -pgfuzz.all, else the
// writes whose body has the seed's first key, or one in turn for a seed
// that names none (malformed JSON).
func seedWrites(seed string, i int) []int {
	if *pgFuzzAll {
		all := make([]int, len(computeWrites))
		for j := range all {
			all[j] = j
		}
		return all
	}
	byKey := map[string][]int{
		"server": {0, 2}, "os-migrateLive": {1}, "flavor": {3}, "extra_specs": {4}, "hw:cpu_policy": {5},
		"host": {6}, "status": {7, 14}, "aggregate": {8}, "server_group": {9}, "keypair": {10},
		"metadata": {11, 12}, "meta": {13}, "events": {15},
	}
	if k, _, ok := strings.Cut(strings.TrimPrefix(seed, `{"`), `"`); ok && strings.HasPrefix(seed, `{"`) && byKey[k] != nil {
		return byKey[k]
	}
	return []int{i % len(computeWrites)}
}

// fuzzCompute sends one body to the write which names, on e.
func fuzzCompute(t *testing.T, e *env, which uint8, version string, body []byte) {
	var created struct{ Server struct{ ID string } }
	resp := e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "1", "networks": "none"}}, &created)
	if resp.StatusCode != 202 {
		t.Fatalf("creating the server to act on: %d", resp.StatusCode)
	}
	e.clk.Advance(2 * time.Second)
	w := computeWrites[int(which)%len(computeWrites)]
	path := strings.ReplaceAll(w.path, "{id}", created.Server.ID)
	path = strings.ReplaceAll(path, "{service}", "00000000-0000-0000-0000-000000000000")
	path = strings.ReplaceAll(path, "{host}", "h1")
	req := httptest.NewRequest(w.method, path, bytes.NewReader(body))
	req.Header.Set("X-Auth-Token", "admin")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("OpenStack-API-Version", "compute "+version)
	rec := apitest.Refused(t, e.srv.Config.Handler, req, e.snapshot, computeShape)
	if len(body) > int(httpbody.DefaultLimit) && rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a %d-byte body: %d, want 413", len(body), rec.Code)
	}
}
