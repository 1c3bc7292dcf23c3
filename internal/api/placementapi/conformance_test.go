package placementapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"keel/internal/api/placementapi"
	"keel/internal/placementpeer"
	"keel/internal/store/memory"
	"keel/internal/testenv"
)

// side is one of the two placements a conformance test talks to.
type side struct {
	name string
	base string // what paths are appended to
}

// answer is one response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// rawBody is a body sent as it is, with its own Content-Type ("" for
// none).
type rawBody struct {
	contentType string
	data        string
}

// accepting is no body, sent with this Accept header.
type accepting string

func (s side) do(t *testing.T, method, path, version string, body any) answer {
	t.Helper()
	var rd io.Reader
	ctype := "application/json"
	accept, _ := body.(accepting)
	if accept != "" {
		body = nil
	}
	if raw, ok := body.(rawBody); ok {
		rd, ctype = strings.NewReader(raw.data), raw.contentType
	} else if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Auth-Token", "admin")
	if accept != "" {
		req.Header.Set("Accept", string(accept))
	}
	if version != "" {
		req.Header.Set("OpenStack-API-Version", "placement "+version)
	}
	if body != nil && ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", s.name, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", s.name, method, path, err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

// conformance sends the same requests to OpenStack Placement 8.0 and to
// keel and compares what comes back.
type conformance struct {
	t     *testing.T
	sides [2]side // Placement, keel
	// texts: an error's message must be Placement's too (see
	// errorText); off, a different one is only logged (for the one
	// answer whose text keel keeps its own, see TestConformanceHTTP).
	texts bool
	// n counts the requests sent to both and compared.
	n int
}

func startConformance(t *testing.T) *conformance {
	t.Helper()
	testenv.External(t, "OpenStack Placement 8.0 under gunicorn (Debian's python3-placement, gunicorn)")
	if err := placementpeer.Available(); err != nil {
		t.Fatalf("the conformance tests run OpenStack Placement 8.0: %v", err)
	}
	// Bounded by the test binary's deadline, not a fixed time: Placement
	// takes minutes to start at a load of 40.
	peer, err := placementpeer.Start(testenv.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peer.Stop)
	srv := httptest.NewServer(placementapi.New(memory.New(), func(*http.Request) bool { return true }))
	t.Cleanup(srv.Close)
	c := &conformance{t: t, sides: [2]side{{"placement", peer.URL}, {"keel", srv.URL + "/placement"}}, texts: true}
	t.Cleanup(func() { t.Logf("%d requests sent to both and their answers compared", c.n) })
	return c
}

// both sends a request to both and fails the test unless the statuses
// (and, for errors from 1.23, the error codes) agree. body may be a
// func(side) any, for bodies that name what each side answered before.
func (c *conformance) both(method, path, version string, body any) [2]answer {
	c.t.Helper()
	c.n++
	var out [2]answer
	for i, s := range c.sides {
		b := body
		if f, ok := body.(func(int) any); ok {
			b = f(i)
		}
		out[i] = s.do(c.t, method, path, version, b)
	}
	if out[0].status != out[1].status {
		c.t.Errorf("%s %s at %s: Placement %d %s, keel %d %s", method, path, version,
			out[0].status, trim(out[0].body), out[1].status, trim(out[1].body))
		return out
	}
	// (Vary: Placement leaves it off some of its errors.)
	for _, h := range []string{"Cache-Control", "Allow", "Content-Type", "Vary"} {
		if a, b := out[0].header.Get(h), out[1].header.Get(h); !strings.EqualFold(a, b) && !(h == "Content-Type" && out[0].status == 204) &&
			!(h == "Vary" && out[0].status >= 400) {
			c.t.Errorf("%s %s at %s: %s %q from Placement, %q from keel", method, path, version, h, a, b)
		}
	}
	if a, b := out[0].header.Get("Last-Modified") != "", out[1].header.Get("Last-Modified") != ""; a != b {
		c.t.Errorf("%s %s at %s: Last-Modified from Placement %v, from keel %v", method, path, version, a, b)
	}
	if a, b := strings.TrimPrefix(out[0].header.Get("Location"), c.sides[0].base), strings.TrimPrefix(out[1].header.Get("Location"), c.sides[1].base); a != b {
		c.t.Errorf("%s %s at %s: Location %q from Placement, %q from keel", method, path, version, out[0].header.Get("Location"), out[1].header.Get("Location"))
	}
	if out[0].status >= 400 {
		if a, b := errorText(out[0].body), errorText(out[1].body); a != b {
			if c.texts {
				c.t.Errorf("%s %s at %s: %d saying %q from Placement, %q from keel", method, path, version, out[0].status, a, b)
			} else {
				c.t.Logf("message differs: %s %s at %s: %d saying %q from Placement, %q from keel", method, path, version, out[0].status, a, b)
			}
		}
	}
	if out[0].status >= 400 && !strings.HasPrefix(version, "1.") || out[0].status >= 400 && minorOf(version) >= 23 {
		if a, b := errorCode(out[0].body), errorCode(out[1].body); a != b {
			c.t.Errorf("%s %s at %s: %d with code %q from Placement, %q from keel (%s)", method, path, version, out[0].status, a, b, trim(out[1].body))
		}
	}
	return out
}

// same is both, and the JSON bodies must be equal once normalised
// (lists whose order Placement leaves to chance sorted, links dropped).
func (c *conformance) same(method, path, version string, body any) {
	c.t.Helper()
	out := c.both(method, path, version, body)
	if out[0].status != out[1].status || out[0].status >= 300 || len(out[0].body) == 0 {
		return
	}
	var a, b any
	if err := json.Unmarshal(out[0].body, &a); err != nil {
		c.t.Fatalf("Placement's answer to %s %s: %v", method, path, err)
	}
	if err := json.Unmarshal(out[1].body, &b); err != nil {
		c.t.Fatalf("keel's answer to %s %s: %v: %s", method, path, err, out[1].body)
	}
	a, b = normalise(a), normalise(b)
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		c.t.Errorf("%s %s at %s:\nPlacement %s\nkeel      %s", method, path, version, ja, jb)
	}
}

// generation reads a provider's generation on side i.
func (c *conformance) generation(i int, uuid string) int64 {
	c.t.Helper()
	a := c.sides[i].do(c.t, "GET", "/resource_providers/"+uuid, "1.39", nil)
	var p struct {
		Generation int64 `json:"generation"`
	}
	if err := json.Unmarshal(a.body, &p); err != nil || a.status != 200 {
		c.t.Fatalf("%s: provider %s: %d %s", c.sides[i].name, uuid, a.status, a.body)
	}
	return p.Generation
}

// minorOf reads the N of "1.N".
func minorOf(version string) int {
	var n int
	fmt.Sscanf(strings.TrimPrefix(version, "1."), "%d", &n)
	return n
}

func trim(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// errorText is what an error answer says, as a client shows it, less
// what keel leaves out on purpose: Placement's detail is its web
// framework's explanation of the status, a blank line, the message, and
// for a body its JSON schema refuses, the schema itself ("Failed
// validating …", which keel does not repeat); keel's detail is the
// message. A body that is not Placement's error JSON is compared whole.
func errorText(body []byte) string {
	var e struct {
		Errors []struct {
			Detail string `json:"detail"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Errors) == 0 {
		return strings.TrimSpace(string(body))
	}
	d := e.Errors[0].Detail
	if _, msg, ok := strings.Cut(d, "\n\n"); ok {
		d = msg
	}
	d, _, _ = strings.Cut(d, "  Failed validating")
	return strings.TrimSpace(d)
}

func errorCode(body []byte) string {
	var e struct {
		Errors []struct {
			Code string `json:"code"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Errors) == 0 {
		return "(no error body)"
	}
	return e.Errors[0].Code
}

// normalise sorts what Placement builds from sets (lists of allocation
// requests, mappings' and traits' lists) and takes keel's mount point
// (/placement) off the links' hrefs: this Placement is mounted at the
// root, so its links name no prefix.
func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if h, ok := e.(string); ok && k == "href" {
				// keel is mounted at /placement; this Placement at /.
				e = strings.TrimPrefix(h, "/placement")
			}
			out[k] = normalise(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalise(e)
		}
		slices.SortFunc(out, func(a, b any) int {
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			return strings.Compare(string(ja), string(jb))
		})
		return out
	}
	return v
}

// Fixed names, so that both sides hold the same providers.
const (
	cfCN1   = "c0000001-0000-4000-8000-000000000000"
	cfNUMA0 = "c0000001-0000-4000-8000-000000000010"
	cfNUMA1 = "c0000001-0000-4000-8000-000000000011"
	cfPF0   = "c0000001-0000-4000-8000-000000000100"
	cfPF1   = "c0000001-0000-4000-8000-000000000101"
	cfCN2   = "c0000002-0000-4000-8000-000000000000"
	cfCN3   = "c0000003-0000-4000-8000-000000000000"
	cfSS1   = "c00000ff-0000-4000-8000-000000000000"
	cfAgg1  = "a0000000-0000-4000-8000-000000000001"
	cfAgg2  = "a0000000-0000-4000-8000-000000000002"
)

// conformanceForest builds, on both sides: cn1, a root without
// inventory (HW_CPU_X86_AVX2, in agg1) with two NUMA children holding
// VCPU and MEMORY_MB (numa1 CUSTOM_GOLD), each with a PF child holding
// SRIOV_NET_VF (pf0 CUSTOM_PHYSNET_A); cn2, a flat host in agg2 with its
// own disk; cn3, a small flat host in agg1 without disk; and ss1, sharing
// DISK_GB and CUSTOM_MAGIC with agg1. A consumer holds some of numa0.
func conformanceForest(c *conformance) {
	c.both("PUT", "/resource_classes/CUSTOM_MAGIC", "1.39", nil)
	c.both("PUT", "/traits/CUSTOM_GOLD", "1.39", nil)
	c.both("PUT", "/traits/CUSTOM_PHYSNET_A", "1.39", nil)
	for _, p := range []struct{ uuid, name, parent string }{
		{cfCN1, "cn1", ""}, {cfNUMA0, "cn1-numa0", cfCN1}, {cfNUMA1, "cn1-numa1", cfCN1},
		{cfPF0, "cn1-numa0-pf0", cfNUMA0}, {cfPF1, "cn1-numa1-pf1", cfNUMA1},
		{cfCN2, "cn2", ""}, {cfCN3, "cn3", ""}, {cfSS1, "ss1", ""},
	} {
		body := map[string]any{"uuid": p.uuid, "name": p.name}
		if p.parent != "" {
			body["parent_provider_uuid"] = p.parent
		}
		c.same("POST", "/resource_providers", "1.39", body)
	}
	inv := func(uuid string, invs map[string]any) {
		c.same("PUT", "/resource_providers/"+uuid+"/inventories", "1.39", func(i int) any {
			return map[string]any{"resource_provider_generation": c.generation(i, uuid), "inventories": invs}
		})
	}
	total := func(n int) map[string]any { return map[string]any{"total": n} }
	inv(cfNUMA0, map[string]any{"VCPU": total(4), "MEMORY_MB": total(2048)})
	inv(cfNUMA1, map[string]any{"VCPU": total(4), "MEMORY_MB": total(2048)})
	inv(cfPF0, map[string]any{"SRIOV_NET_VF": total(4)})
	inv(cfPF1, map[string]any{"SRIOV_NET_VF": total(2)})
	inv(cfCN2, map[string]any{"VCPU": total(8), "MEMORY_MB": total(4096), "DISK_GB": total(100)})
	inv(cfCN3, map[string]any{"VCPU": total(2), "MEMORY_MB": total(1024)})
	inv(cfSS1, map[string]any{"DISK_GB": total(1000), "CUSTOM_MAGIC": map[string]any{"total": 10, "max_unit": 4}})
	traits := func(uuid string, ts ...string) {
		c.same("PUT", "/resource_providers/"+uuid+"/traits", "1.39", func(i int) any {
			return map[string]any{"resource_provider_generation": c.generation(i, uuid), "traits": ts}
		})
	}
	traits(cfCN1, "HW_CPU_X86_AVX2")
	traits(cfNUMA1, "CUSTOM_GOLD")
	traits(cfPF0, "CUSTOM_PHYSNET_A")
	traits(cfSS1, "MISC_SHARES_VIA_AGGREGATE")
	aggs := func(uuid string, as ...string) {
		c.same("PUT", "/resource_providers/"+uuid+"/aggregates", "1.39", func(i int) any {
			return map[string]any{"resource_provider_generation": c.generation(i, uuid), "aggregates": as}
		})
	}
	aggs(cfCN1, cfAgg1)
	aggs(cfCN2, cfAgg2)
	aggs(cfCN3, cfAgg1)
	aggs(cfSS1, cfAgg1)
	c.both("PUT", "/allocations/d0000000-0000-4000-8000-000000000001", "1.39", map[string]any{
		"allocations": map[string]any{cfNUMA0: map[string]any{"resources": map[string]any{"VCPU": 3, "MEMORY_MB": 1024}}},
		"project_id":  "p", "user_id": "u", "consumer_generation": nil, "consumer_type": "INSTANCE",
	})
}

// TestConformanceCandidates compares GET /allocation_candidates on trees,
// sharing providers and granular groups with OpenStack Placement 8.0's.
func TestConformanceCandidates(t *testing.T) {
	c := startConformance(t)
	conformanceForest(c)
	ac := func(q string) string { return "/allocation_candidates?" + q }
	for _, v := range []string{"1.10", "1.11", "1.12", "1.17", "1.26", "1.27", "1.28", "1.29", "1.33", "1.34", "1.39"} {
		c.same("GET", ac("resources=VCPU:1"), v, nil)
		c.same("GET", ac("resources=VCPU:1,MEMORY_MB:512"), v, nil)
		c.same("GET", ac("resources=VCPU:1,DISK_GB:10"), v, nil)
		c.same("GET", ac("resources=DISK_GB:10"), v, nil)
	}
	for _, q := range []string{
		"resources=VCPU:1,SRIOV_NET_VF:2",
		"resources=VCPU:1,SRIOV_NET_VF:3",
		"resources=VCPU:1,CUSTOM_MAGIC:1",
		"resources=VCPU:1,CUSTOM_MAGIC:5",
		"resources=VCPU:2,MEMORY_MB:1024,DISK_GB:10",
		"resources=VCPU:1&member_of=" + cfAgg1,
		"resources=VCPU:1&member_of=!" + cfAgg1,
		"resources=VCPU:1,DISK_GB:5&member_of=" + cfAgg1,
		"resources=VCPU:1,DISK_GB:5&member_of=" + cfAgg2,
		"resources=VCPU:1&required=CUSTOM_GOLD",
		"resources=VCPU:1&required=!CUSTOM_GOLD",
		"resources=VCPU:1&required=HW_CPU_X86_AVX2",
		"resources=VCPU:1,SRIOV_NET_VF:1&required=CUSTOM_PHYSNET_A",
		"resources=VCPU:1,SRIOV_NET_VF:1&required=CUSTOM_PHYSNET_A,CUSTOM_GOLD",
		"resources=VCPU:1&required=in:CUSTOM_GOLD,HW_CPU_X86_AVX2",
		"resources=VCPU:1&root_required=HW_CPU_X86_AVX2",
		"resources=VCPU:1&root_required=!HW_CPU_X86_AVX2",
		"resources=VCPU:1&in_tree=" + cfNUMA1,
		"resources=VCPU:1,DISK_GB:1&in_tree=" + cfCN3,
		"resources=VCPU:1&in_tree=" + cfSS1,
		"resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate",
		"resources1=VCPU:1&resources2=VCPU:1&group_policy=none",
		"resources1=VCPU:1&resources2=SRIOV_NET_VF:1&group_policy=none",
		"resources1=VCPU:1&resources2=SRIOV_NET_VF:1&group_policy=isolate&same_subtree=1,2",
		"resources=MEMORY_MB:256&resources1=VCPU:1&resources2=DISK_GB:10&group_policy=none",
		"resources_CPU=VCPU:1,MEMORY_MB:512&resources_NET=SRIOV_NET_VF:1&required_NET=CUSTOM_PHYSNET_A&group_policy=isolate",
		"resources_CPU=VCPU:1&required_CPU=CUSTOM_GOLD&resources_NET=SRIOV_NET_VF:1&group_policy=none&same_subtree=_CPU,_NET",
		"resources_CPU=VCPU:1&resources_NET=SRIOV_NET_VF:1&group_policy=none&same_subtree=_CPU,_NET",
		"resources_A=VCPU:1&required_B=CUSTOM_PHYSNET_A&group_policy=none&same_subtree=_A,_B",
		"resources1=VCPU:1&in_tree1=" + cfCN1 + "&resources2=DISK_GB:10&group_policy=none",
		"resources1=VCPU:1&member_of1=" + cfAgg1 + "&group_policy=none",
		// (Not group_policy=isolate here: Placement 8.0 then adds a
		// granular group's amount into the unnamed group's record it
		// shares, so its later candidates carry sums of earlier ones.)
		"resources=VCPU:1&resources1=VCPU:1&group_policy=none&root_required=HW_CPU_X86_AVX2",
		"resources=VCPU:1&resources1=VCPU:1&required1=!CUSTOM_GOLD&group_policy=isolate",
	} {
		for _, v := range []string{"1.29", "1.36", "1.39"} {
			c.same("GET", ac(q), v, nil)
		}
	}
	// limit keeps the first N, in an order Placement leaves to its
	// database: the count must agree.
	for _, q := range []string{"resources=VCPU:1&limit=2", "resources=VCPU:1,DISK_GB:1&limit=1", "resources1=VCPU:1&resources2=VCPU:1&group_policy=none&limit=3"} {
		out := c.both("GET", ac(q), "1.39", nil)
		var n [2]struct {
			AllocationRequests []any `json:"allocation_requests"`
		}
		for i := range out {
			if err := json.Unmarshal(out[i].body, &n[i]); err != nil {
				t.Fatalf("%s: %s: %v", c.sides[i].name, q, err)
			}
		}
		if len(n[0].AllocationRequests) != len(n[1].AllocationRequests) {
			t.Errorf("%s: Placement %d candidates, keel %d", q, len(n[0].AllocationRequests), len(n[1].AllocationRequests))
		}
	}
	// Refusals: the status and the error code.
	for _, r := range []struct{ q, v string }{
		{"resources1=VCPU:1", "1.24"},
		{"resources_A=VCPU:1", "1.32"},
		{"resources1=VCPU:1&resources2=VCPU:1", "1.39"},
		{"resources=VCPU:1&group_policy=bogus", "1.39"},
		{"resources=", "1.39"},
		{"resources=VCPU", "1.39"},
		{"resources=VCPU:0", "1.39"},
		{"resources=VCPU:x", "1.39"},
		{"resources=CUSTOM_NOPE:1", "1.39"},
		{"required=CUSTOM_GOLD", "1.39"},
		{"required1=CUSTOM_GOLD&resources=VCPU:1", "1.35"},
		{"resources=VCPU:1&required=CUSTOM_NOPE", "1.39"},
		{"resources=VCPU:1&required=CUSTOM_GOLD,!CUSTOM_GOLD", "1.39"},
		{"resources=VCPU:1&root_required=CUSTOM_GOLD&root_required=CUSTOM_GOLD", "1.39"},
		{"resources=VCPU:1&root_required=CUSTOM_GOLD,!CUSTOM_GOLD", "1.39"},
		{"resources=VCPU:1&root_required=CUSTOM_GOLD", "1.34"},
		{"resources1=VCPU:1&same_subtree=,1&group_policy=none", "1.39"},
		{"resources1=VCPU:1&same_subtree=1,2&group_policy=none", "1.39"},
		{"resources1=VCPU:1&required2=CUSTOM_GOLD&group_policy=none", "1.39"},
		{"required1=CUSTOM_GOLD&same_subtree=1", "1.39"},
		{"resources=VCPU:1&same_subtree=1", "1.35"},
		{"resources=VCPU:1&in_tree=xyz", "1.39"},
		{"resources=VCPU:1&in_tree=" + cfCN1, "1.30"},
		{"resources=VCPU:1&limit=0", "1.39"},
		{"resources=VCPU:1&limit=1", "1.15"},
		{"resources=VCPU:1&bogus=1", "1.39"},
		{"", "1.39"},
		{"", "1.20"},
		{"resources=VCPU:1", "1.9"},
	} {
		c.both("GET", ac(r.q), r.v, nil)
	}

	// One case by hand, so that the comparison cannot pass with both
	// sides wrong the same way.
	out := c.sides[1].do(t, "GET", "/allocation_candidates?resources=VCPU:1,SRIOV_NET_VF:3", "1.39", nil)
	var hand struct {
		AllocationRequests []struct {
			Allocations map[string]struct {
				Resources map[string]int64 `json:"resources"`
			} `json:"allocations"`
			Mappings map[string][]string `json:"mappings"`
		} `json:"allocation_requests"`
		ProviderSummaries map[string]any `json:"provider_summaries"`
	}
	if err := json.Unmarshal(out.body, &hand); err != nil {
		t.Fatal(err)
	}
	// Only pf0 has 3 VFs; numa0 has 1 VCPU left, numa1 4: two candidates,
	// both in cn1's tree, whose five providers the summaries show.
	if len(hand.AllocationRequests) != 2 || len(hand.ProviderSummaries) != 5 {
		t.Fatalf("got %s", out.body)
	}
	for _, r := range hand.AllocationRequests {
		if r.Allocations[cfPF0].Resources["SRIOV_NET_VF"] != 3 || len(r.Mappings[""]) != 2 {
			t.Errorf("candidate %+v", r)
		}
	}
}

// TestConformanceReshaper moves a compute node's VCPU, and a consumer's
// allocation of it, into a NUMA child with POST /reshaper on both, and
// compares what each then shows; and the reshaper's refusals.
func TestConformanceReshaper(t *testing.T) {
	c := startConformance(t)
	const (
		cn   = "c1000001-0000-4000-8000-000000000000"
		numa = "c1000001-0000-4000-8000-000000000001"
		vm   = "d1000000-0000-4000-8000-000000000001"
	)
	c.same("POST", "/resource_providers", "1.39", map[string]any{"uuid": cn, "name": "cn"})
	c.same("POST", "/resource_providers", "1.39", map[string]any{"uuid": numa, "name": "cn-numa0", "parent_provider_uuid": cn})
	c.same("PUT", "/resource_providers/"+cn+"/inventories", "1.39", map[string]any{"resource_provider_generation": 0,
		"inventories": map[string]any{"VCPU": map[string]any{"total": 8}, "MEMORY_MB": map[string]any{"total": 4096}}})
	c.both("PUT", "/allocations/"+vm, "1.39", map[string]any{
		"allocations": map[string]any{cn: map[string]any{"resources": map[string]any{"VCPU": 2, "MEMORY_MB": 512}}},
		"project_id":  "p", "user_id": "u", "consumer_generation": nil, "consumer_type": "INSTANCE"})
	reshape := func(cnGen, numaGen int64, cnInv, numaInv map[string]any, allocs map[string]any) map[string]any {
		return map[string]any{
			"inventories": map[string]any{
				cn:   map[string]any{"resource_provider_generation": cnGen, "inventories": cnInv},
				numa: map[string]any{"resource_provider_generation": numaGen, "inventories": numaInv},
			},
			"allocations": allocs,
		}
	}
	mem := map[string]any{"MEMORY_MB": map[string]any{"total": 4096}}
	vcpu := map[string]any{"VCPU": map[string]any{"total": 8}}
	moved := func(consumerGen int) map[string]any {
		return map[string]any{vm: map[string]any{
			"allocations": map[string]any{cn: map[string]any{"resources": map[string]any{"MEMORY_MB": 512}},
				numa: map[string]any{"resources": map[string]any{"VCPU": 2}}},
			"project_id": "p", "user_id": "u", "consumer_generation": consumerGen, "consumer_type": "INSTANCE"}}
	}
	// Refusals first; none may change anything.
	c.both("POST", "/reshaper", "1.29", reshape(1, 0, mem, vcpu, moved(1)))
	c.both("POST", "/reshaper", "1.39", rawBody{"", "{}"})
	c.both("POST", "/reshaper", "1.39", rawBody{"text/plain", "{}"})
	c.both("POST", "/reshaper", "1.39", map[string]any{"inventories": map[string]any{}, "allocations": map[string]any{}})
	c.both("POST", "/reshaper", "1.39", map[string]any{"inventories": map[string]any{cn: map[string]any{"resource_provider_generation": 1, "inventories": mem}}})
	c.both("POST", "/reshaper", "1.39", reshape(0, 0, mem, vcpu, moved(1)))                                               // stale generation
	c.both("POST", "/reshaper", "1.39", reshape(1, 0, mem, vcpu, moved(7)))                                               // stale consumer generation
	c.both("POST", "/reshaper", "1.39", reshape(1, 0, mem, vcpu, map[string]any{}))                                       // VCPU goes while allocated
	c.both("POST", "/reshaper", "1.39", reshape(1, 0, mem, map[string]any{"VCPU": map[string]any{"total": 1}}, moved(1))) // over capacity
	c.both("POST", "/reshaper", "1.39", map[string]any{"allocations": map[string]any{}, "inventories": map[string]any{
		"c1000001-0000-4000-8000-0000000000ff": map[string]any{"resource_provider_generation": 0, "inventories": mem}}})
	for _, p := range []string{cn, numa} {
		c.same("GET", "/resource_providers/"+p+"/inventories", "1.39", nil)
	}
	// The reshape.
	c.both("POST", "/reshaper", "1.39", reshape(1, 0, mem, vcpu, moved(1)))
	for _, p := range []string{cn, numa} {
		c.same("GET", "/resource_providers/"+p, "1.39", nil)
		c.same("GET", "/resource_providers/"+p+"/inventories", "1.39", nil)
		c.same("GET", "/resource_providers/"+p+"/usages", "1.39", nil)
	}
	c.same("GET", "/allocations/"+vm, "1.39", nil)
	c.same("GET", "/allocation_candidates?resources=VCPU:1,MEMORY_MB:1", "1.39", nil)
}

// TestConformanceHTTP compares Placement's HTTP behaviour outside
// candidates: negotiation, validation, status codes and error codes, the
// headers it sends, at the microversions that change them.
func TestConformanceHTTP(t *testing.T) {
	c := startConformance(t)
	conformanceForest(c)
	const (
		rp  = "/resource_providers/" + cfCN2
		vm  = "d2000000-0000-4000-8000-000000000001"
		vm2 = "d2000000-0000-4000-8000-000000000002"
	)
	alloc := func(rp string, res map[string]any, gen any) map[string]any {
		return map[string]any{"allocations": map[string]any{rp: map[string]any{"resources": res}},
			"project_id": "p", "user_id": "u", "consumer_generation": gen}
	}
	// Reads, with their headers, across microversions.
	for _, v := range []string{"1.0", "1.14", "1.15", "1.39"} {
		for _, p := range []string{"/resource_providers", rp, rp + "/inventories", rp + "/inventories/VCPU", rp + "/usages",
			"/allocations/d0000000-0000-4000-8000-000000000001", rp + "/allocations"} {
			c.same("GET", p, v, nil)
		}
	}
	for _, v := range []string{"1.6", "1.15", "1.39"} {
		for _, p := range []string{rp + "/traits", rp + "/aggregates", "/resource_classes", "/resource_classes/VCPU", "/traits?name=startswith:CUSTOM_", "/usages?project_id=p"} {
			c.same("GET", p, v, nil)
		}
	}
	// Negotiation.
	for _, v := range []string{"1.40", "2.0", "1.x", "latest", "nonsense"} {
		c.both("GET", "/resource_providers", v, nil)
	}
	for _, v := range []string{"", "1.0", "1.15", "1.39", "1.40", "nonsense"} {
		c.same("GET", "/", v, nil)
	}
	c.both("DELETE", "/", "1.39", nil)
	for _, accept := range []string{"text/html", "application/json", "*/*", "application/json;q=0", "text/html, application/*;q=0.5"} {
		var out [2]answer
		for i, sd := range c.sides {
			req, _ := http.NewRequest("GET", sd.base+"/resource_providers", nil)
			req.Header.Set("X-Auth-Token", "admin")
			req.Header.Set("Accept", accept)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			out[i].status = resp.StatusCode
		}
		if out[0].status != out[1].status {
			t.Errorf("Accept %q: Placement %d, keel %d", accept, out[0].status, out[1].status)
		}
	}
	c.both("DELETE", "/resource_providers", "1.39", nil)
	c.both("PATCH", rp, "1.39", nil)
	c.both("POST", rp+"/usages", "1.39", map[string]any{})
	c.both("PUT", "/allocation_candidates", "1.39", map[string]any{})
	c.both("POST", "/resource_providers", "1.39", rawBody{"text/plain", `{"name": "x"}`})
	c.both("GET", "/no/such/thing", "1.39", nil)
	// Validation.
	for _, q := range []string{"uuid=not-a-uuid", "resources=", "resources=VCPU:0", "name=cn1&bogus=1", "member_of=not-a-uuid", "in_tree=nope"} {
		c.both("GET", "/resource_providers?"+q, "1.39", nil)
	}
	c.both("POST", "/resource_providers", "1.39", map[string]any{"name": "x", "extra": 1})
	c.both("PUT", rp, "1.39", map[string]any{"name": "cn2", "root_provider_uuid": cfCN2})
	c.both("PUT", rp, "1.39", map[string]any{"name": strings.Repeat("x", 201)})
	c.both("PUT", "/allocations/not-a-uuid", "1.39", alloc(cfCN2, map[string]any{"VCPU": 1}, nil))
	long := alloc(cfCN2, map[string]any{"VCPU": 1}, nil)
	long["project_id"] = strings.Repeat("p", 256)
	c.both("PUT", "/allocations/"+vm, "1.28", long)
	extra := alloc(cfCN2, map[string]any{"VCPU": 1}, nil)
	extra["bogus"] = 1
	c.both("PUT", "/allocations/"+vm, "1.28", extra)
	c.both("PUT", "/allocations/"+vm, "1.28", map[string]any{"allocations": map[string]any{cfCN2: map[string]any{"resources": map[string]any{"VCPU": 1}, "bogus": 1}},
		"project_id": "p", "user_id": "u", "consumer_generation": nil})
	c.both("PUT", "/allocations/"+vm, "1.28", map[string]any{"allocations": map[string]any{cfCN2: map[string]any{"resources": map[string]any{"VCPU": 1}, "generation": 99}},
		"project_id": "p", "user_id": "u", "consumer_generation": nil})
	c.both("DELETE", "/allocations/"+vm, "1.28", nil)
	// Inventories.
	c.both("POST", rp+"/inventories", "1.39", map[string]any{"resource_class": "CUSTOM_MAGIC", "total": 5})
	// Placement's text for a class added twice is its database's error
	// (the SQL statement and its parameters); keel's names the class.
	c.texts = false
	c.both("POST", rp+"/inventories", "1.39", map[string]any{"resource_class": "CUSTOM_MAGIC", "total": 5})
	c.texts = true
	c.both("PUT", rp+"/inventories/PCI_DEVICE", "1.39", func(i int) any {
		return map[string]any{"resource_provider_generation": c.generation(i, cfCN2), "total": 2}
	})
	c.both("PUT", rp+"/inventories/CUSTOM_MAGIC", "1.39", func(i int) any {
		return map[string]any{"resource_provider_generation": c.generation(i, cfCN2), "total": 2147483648}
	})
	for _, v := range []string{"1.25", "1.26"} {
		c.both("PUT", rp+"/inventories/CUSTOM_MAGIC", v, func(i int) any {
			return map[string]any{"resource_provider_generation": c.generation(i, cfCN2), "total": 5, "reserved": 5}
		})
	}
	c.same("GET", rp+"/inventories", "1.39", nil)
	// Allocations: status codes.
	c.both("PUT", "/allocations/"+vm, "1.39", map[string]any{"allocations": map[string]any{cfSS1: map[string]any{"resources": map[string]any{"CUSTOM_MAGIC": 5}}},
		"project_id": "p", "user_id": "u", "consumer_generation": nil, "consumer_type": "INSTANCE"}) // over max_unit
	c.both("PUT", "/allocations/"+vm, "1.28", alloc(cfCN2, map[string]any{"VCPU": 100}, nil))
	c.both("PUT", "/allocations/"+vm, "1.28", alloc(cfCN2, map[string]any{"CUSTOM_NOPE": 1}, nil))
	c.both("PUT", "/allocations/"+vm, "1.28", alloc(cfCN2, map[string]any{"bad-class": 1}, nil))
	c.both("POST", "/allocations", "1.12", map[string]any{})
	c.both("PUT", "/allocations/"+vm, "1.28", alloc(cfCN2, map[string]any{"VCPU": 1}, nil))
	c.same("GET", rp, "1.39", nil)
	c.both("PUT", "/allocations/"+vm, "1.28", map[string]any{"allocations": map[string]any{}, "project_id": "p", "user_id": "u", "consumer_generation": 1})
	c.same("GET", "/allocations/"+vm, "1.28", nil)
	c.same("GET", rp, "1.39", nil)
	c.both("PUT", "/allocations/"+vm2, "1.28", alloc(cfCN2, map[string]any{"VCPU": 1}, nil))
	c.both("DELETE", "/allocations/"+vm2, "1.28", nil)
	c.same("GET", rp, "1.39", nil)
	c.both("DELETE", "/allocations/"+vm2, "1.28", nil)
	// Dashless UUIDs are the dashed ones.
	dashless := strings.ReplaceAll(cfCN3, "-", "")
	c.same("GET", "/resource_providers/"+dashless, "1.39", nil)
	c.both("POST", "/resource_providers", "1.39", map[string]any{"uuid": dashless, "name": "cn3-again"})
	c.both("DELETE", "/resource_providers/"+cfCN1, "1.39", nil)
	c.both("DELETE", "/traits/CUSTOM_GOLD", "1.39", nil)
	c.both("DELETE", "/resource_classes/CUSTOM_MAGIC", "1.39", nil)
}

// TestConformanceReshaperMove is Placement's own reshaper scenario: a
// compute node with DISK_GB and VCPU and three consumers on it moves its
// VCPU, and the allocations of it, to a new child; before that, requests
// refused for each of the reasons Placement refuses one (none may change
// a generation), and after, a move back and the same at the microversions
// that take mappings or refuse them. Statuses, codes, texts and the
// generations must all be Placement's.
func TestConformanceReshaperMove(t *testing.T) {
	c := startConformance(t)
	const (
		rp      = "c2000001-0000-4000-8000-000000000000"
		child   = "c2000001-0000-4000-8000-000000000001"
		nowhere = "c2000001-0000-4000-8000-0000000000ff"
		c0      = "d3000000-0000-4000-8000-000000000000"
		c1      = "d3000000-0000-4000-8000-000000000001"
		calt    = "d3000000-0000-4000-8000-000000000002"
		inst    = "d3000000-0000-4000-8000-000000000003"
		n1      = "d3000000-0000-4000-8000-000000000004"
		n2      = "d3000000-0000-4000-8000-000000000005"
	)
	c.same("POST", "/resource_providers", "1.30", map[string]any{"uuid": rp, "name": "rp"})
	c.both("POST", "/resource_providers/"+rp+"/inventories", "1.30", map[string]any{"resource_class": "DISK_GB", "total": 2048, "step_size": 10, "min_unit": 10, "max_unit": 1000, "resource_provider_generation": 0})
	c.both("POST", "/resource_providers/"+rp+"/inventories", "1.30", map[string]any{"resource_class": "VCPU", "total": 10, "max_unit": 10, "resource_provider_generation": 1})
	consumer := func(allocs map[string]any, user string, gen any) map[string]any {
		return map[string]any{"allocations": allocs, "project_id": "p", "user_id": user, "consumer_generation": gen}
	}
	on := func(p string, res map[string]any) map[string]any {
		return map[string]any{p: map[string]any{"resources": res}}
	}
	c.both("PUT", "/allocations/"+c0, "1.30", consumer(on(rp, map[string]any{"DISK_GB": 1000}), "u", nil))
	c.both("PUT", "/allocations/"+c1, "1.30", consumer(on(rp, map[string]any{"VCPU": 6}), "u", nil))
	c.both("PUT", "/allocations/"+calt, "1.30", consumer(on(rp, map[string]any{"DISK_GB": 20, "VCPU": 1}), "alt", nil))
	gens := func(want ...int64) {
		t.Helper()
		for i, p := range []string{rp, child}[:len(want)] {
			if a, b := c.generation(0, p), c.generation(1, p); a != want[i] || b != want[i] {
				t.Errorf("generation of %s: Placement %d, keel %d, want %d", p, a, b, want[i])
			}
		}
	}
	gens(5)
	vcpu1 := map[string]any{"VCPU": map[string]any{"total": 1}}
	invOf := func(p string, gen int64, invs map[string]any) map[string]any {
		return map[string]any{p: map[string]any{"resource_provider_generation": gen, "inventories": invs}}
	}
	c.both("GET", "/reshaper", "1.30", nil)
	c.both("POST", "/reshaper", "1.29", map[string]any{})
	c.both("POST", "/reshaper", "1.30", map[string]any{"cows": "moo"})
	c.both("POST", "/reshaper", "1.30", map[string]any{"inventories": invOf(rp, 0, vcpu1)})
	c.both("POST", "/reshaper", "1.30", map[string]any{"inventories": invOf(rp, 5, vcpu1), "allocations": map[string]any{}})
	c.both("POST", "/reshaper", "1.30", map[string]any{"inventories": invOf(rp, 5, vcpu1), "allocations": map[string]any{inst: consumer(on(rp, map[string]any{"VCPU": 1}), "u", nil)}})
	c.both("POST", "/reshaper", "1.30", map[string]any{"inventories": invOf(rp, 4, vcpu1), "allocations": map[string]any{}})
	c.both("POST", "/reshaper", "1.30", map[string]any{"inventories": invOf(rp, 5, vcpu1), "allocations": map[string]any{inst: consumer(on(rp, map[string]any{"VCPU": 1}), "u", 99)}})
	c.same("POST", "/resource_providers", "1.30", map[string]any{"uuid": child, "name": "child", "parent_provider_uuid": rp})
	disk := func(extra ...any) map[string]any {
		d := map[string]any{"total": 2048, "step_size": 10, "min_unit": 10, "max_unit": 1200}
		for i := 0; i+1 < len(extra); i += 2 {
			d[extra[i].(string)] = extra[i+1]
		}
		return d
	}
	move := func(rpInv map[string]any, childUUID string, c0Extra ...any) map[string]any {
		c0b := consumer(on(rp, map[string]any{"DISK_GB": 1000}), "u", 1)
		for i := 0; i+1 < len(c0Extra); i += 2 {
			c0b[c0Extra[i].(string)] = c0Extra[i+1]
		}
		invs := invOf(rp, 5, rpInv)
		invs[childUUID] = map[string]any{"resource_provider_generation": 0, "inventories": map[string]any{"VCPU": map[string]any{"total": 10, "max_unit": 8}}}
		both := on(rp, map[string]any{"DISK_GB": 20})
		both[child] = map[string]any{"resources": map[string]any{"VCPU": 1}}
		return map[string]any{"inventories": invs, "allocations": map[string]any{
			c0: c0b, c1: consumer(on(child, map[string]any{"VCPU": 8}), "u", 1), calt: consumer(both, "alt", 1)}}
	}
	c.both("POST", "/reshaper", "1.30", move(map[string]any{"DISK_GB": disk()}, nowhere))
	c.both("POST", "/reshaper", "1.30", move(map[string]any{"DISK_GB": disk("bad_field", "moo")}, child))
	c.both("POST", "/reshaper", "1.30", move(map[string]any{"DISK_GB": disk()}, child, "bad_field", "moo"))
	c.both("POST", "/reshaper", "1.30", move(map[string]any{"DISK_OF_STEEL": disk()}, child))
	c.both("POST", "/reshaper", "1.30", move(map[string]any{"DISK_GB": disk("max_unit", 600)}, child))
	c.both("POST", "/reshaper", "1.30", move(map[string]any{"DISK_GB": disk("total", 2147483648)}, child))
	gens(5, 0)
	// The move.
	c.both("POST", "/reshaper", "1.30", move(map[string]any{"DISK_GB": disk()}, child))
	gens(8, 3)
	for _, p := range []string{rp, child} {
		c.same("GET", "/resource_providers/"+p+"/usages", "1.30", nil)
		c.same("GET", "/resource_providers/"+p+"/inventories", "1.30", nil)
	}
	// And back, to two new consumers.
	back := func(rpGen, childGen int64, gen0, genNew, gen1 any) map[string]any {
		both := on(rp, map[string]any{"DISK_GB": 20, "VCPU": 1})
		return map[string]any{
			"inventories": map[string]any{
				rp:    map[string]any{"resource_provider_generation": rpGen, "inventories": map[string]any{"DISK_GB": disk(), "VCPU": map[string]any{"total": 10, "max_unit": 8}}},
				child: map[string]any{"resource_provider_generation": childGen, "inventories": map[string]any{}},
			},
			"allocations": map[string]any{
				c0: consumer(on(rp, map[string]any{"DISK_GB": 1000}), "u", gen0), n1: consumer(on(rp, map[string]any{"VCPU": 8}), "u", genNew),
				n2: consumer(both, "alt", genNew), c1: consumer(map[string]any{}, "u", gen1), calt: consumer(on(rp, map[string]any{"DISK_GB": 20}), "alt", gen0),
			}}
	}
	c.both("POST", "/reshaper", "1.30", back(8, 3, 2, nil, 2))
	gens(11, 5)
	withMappings := back(11, 5, 3, 1, nil)
	withMappings["allocations"].(map[string]any)[c0].(map[string]any)["mappings"] = map[string]any{"": []string{rp}}
	c.both("POST", "/reshaper", "1.33", withMappings)
	c.both("POST", "/reshaper", "1.34", withMappings)
	gens(14, 6)
	for _, u := range []string{c0, c1, calt, n1, n2} {
		c.same("GET", "/allocations/"+u, "1.39", nil)
	}
}

// TestConformanceValidation compares how Placement refuses bodies and
// paths of the wrong form (its JSON schemas, consumer UUIDs, query
// strings), the status codes of inventories past its limits and of
// mappings, a route that does not exist asked for in HTML, and UUIDs
// written without dashes: statuses, codes and texts.
func TestConformanceValidation(t *testing.T) {
	c := startConformance(t)
	const (
		rp = "c3000001-0000-4000-8000-000000000000"
		vm = "d4000000-0000-4000-8000-000000000001"
	)
	c.same("POST", "/resource_providers", "1.39", map[string]any{"uuid": rp, "name": "v1"})
	c.same("PUT", "/resource_providers/"+rp+"/inventories", "1.39", map[string]any{"resource_provider_generation": 0,
		"inventories": map[string]any{"VCPU": map[string]any{"total": 8}, "DISK_GB": map[string]any{"total": 100}}})
	gen := func(extra map[string]any) func(int) any {
		return func(i int) any {
			b := map[string]any{"resource_provider_generation": c.generation(i, rp)}
			maps.Copy(b, extra)
			return b
		}
	}
	// PUT /resource_providers/{uuid}/traits.
	c.both("PUT", "/resource_providers/"+rp+"/traits", "1.39", gen(map[string]any{"traits": []string{}, "bogus": 1}))
	c.both("PUT", "/resource_providers/"+rp+"/traits", "1.39", gen(nil))
	c.both("PUT", "/resource_providers/"+rp+"/traits", "1.39", map[string]any{"traits": []string{}})
	c.both("PUT", "/resource_providers/"+rp+"/traits", "1.39", gen(map[string]any{"traits": []any{1}}))
	c.both("PUT", "/resource_providers/"+rp+"/traits", "1.39", gen(map[string]any{"traits": []string{"NOPE_NOT"}}))
	// Resource classes.
	c.both("POST", "/resource_classes", "1.39", map[string]any{"name": "CUSTOM_A1", "bogus": 1})
	c.both("POST", "/resource_classes", "1.39", map[string]any{"name": "BAD"})
	c.both("POST", "/resource_classes", "1.39", map[string]any{})
	c.both("POST", "/resource_classes", "1.39", map[string]any{"name": "CUSTOM_" + strings.Repeat("X", 250)})
	c.both("PUT", "/resource_classes/CUSTOM_A2", "1.2", map[string]any{"name": "CUSTOM_A3", "bogus": 1})
	c.both("PUT", "/resource_classes/CUSTOM_A2", "1.2", map[string]any{"name": "CUSTOM_A3"})
	// Allocations: consumer UUIDs, project and user, mappings.
	alloc := func(extra ...any) map[string]any {
		b := map[string]any{"allocations": map[string]any{rp: map[string]any{"resources": map[string]any{"VCPU": 1}}},
			"project_id": "p", "user_id": "u", "consumer_generation": nil}
		for i := 0; i+1 < len(extra); i += 2 {
			b[extra[i].(string)] = extra[i+1]
		}
		return b
	}
	c.both("PUT", "/allocations/not-a-uuid", "1.39", alloc("consumer_type", "INSTANCE"))
	c.both("PUT", "/allocations/not-a-uuid", "1.28", alloc())
	for _, kv := range [][2]any{{"project_id", strings.Repeat("p", 256)}, {"user_id", strings.Repeat("u", 256)}, {"project_id", ""}, {"user_id", ""}} {
		c.both("PUT", "/allocations/"+vm, "1.28", alloc(kv[0], kv[1]))
		c.both("POST", "/allocations", "1.28", map[string]any{vm: alloc(kv[0], kv[1])})
	}
	c.both("POST", "/allocations", "1.28", map[string]any{"not-a-uuid": alloc()})
	for _, q := range []string{"project_id=" + strings.Repeat("p", 256), "project_id=", "project_id=p&user_id=", "project_id=p&user_id=" + strings.Repeat("u", 256), "user_id=u", "project_id=p&bogus=1"} {
		c.both("GET", "/usages?"+q, "1.9", nil)
	}
	for i, m := range []any{[]any{}, map[string]any{"": []string{rp}, "x": 1}, map[string]any{}, map[string]any{"a": "x"}, map[string]any{"a": []any{}},
		map[string]any{"a": []string{"nope"}}, map[string]any{"a": []any{1}}, nil} {
		consumer := fmt.Sprintf("d4000000-0000-4000-8000-0000000001%02d", i)
		c.both("PUT", "/allocations/"+consumer, "1.34", alloc("mappings", m))
		c.both("POST", "/allocations", "1.34", map[string]any{consumer: alloc("mappings", m)})
	}
	c.both("PUT", "/allocations/"+vm, "1.33", alloc("mappings", map[string]any{"": []string{rp}}))
	c.both("PUT", "/allocations/"+vm, "1.28", map[string]any{"allocations": map[string]any{rp: map[string]any{"resources": map[string]any{}}}, "project_id": "p", "user_id": "u", "consumer_generation": nil})
	// Inventories past Placement's limits, and of the wrong form.
	for _, f := range []string{"total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio"} {
		var v any = 2147483648
		if f == "allocation_ratio" {
			v = 3.5e38
		}
		inv := map[string]any{"total": 10, f: v}
		c.both("PUT", "/resource_providers/"+rp+"/inventories", "1.39", gen(map[string]any{"inventories": map[string]any{"VCPU": inv}}))
		c.both("PUT", "/resource_providers/"+rp+"/inventories/VCPU", "1.39", gen(inv))
		c.both("POST", "/resource_providers/"+rp+"/inventories", "1.39", gen(map[string]any{"resource_class": "CUSTOM_NOPE", "total": 10, f: v}))
	}
	for _, v := range []string{"1.25", "1.26"} {
		c.both("PUT", "/resource_providers/"+rp+"/inventories/DISK_GB", v, gen(map[string]any{"total": 10, "reserved": 11}))
		c.both("PUT", "/resource_providers/"+rp+"/inventories/DISK_GB", v, gen(map[string]any{"total": 10, "reserved": 10}))
	}
	c.both("PUT", "/resource_providers/"+rp+"/inventories/DISK_GB", "1.39", gen(map[string]any{"total": 10, "min_unit": 0}))
	c.both("PUT", "/resource_providers/"+rp+"/inventories/DISK_GB", "1.39", gen(map[string]any{"total": 10, "bogus": 4}))
	// Allocations that do not fit, in Placement's words.
	c.both("PUT", "/allocations/"+vm, "1.28", alloc("allocations", map[string]any{rp: map[string]any{"resources": map[string]any{"VCPU": 100}}}))
	c.both("PUT", "/allocations/"+vm, "1.28", alloc("allocations", map[string]any{rp: map[string]any{"resources": map[string]any{"MEMORY_MB": 1}}}))
	c.both("PUT", "/allocations/"+vm, "1.28", alloc())
	c.both("PUT", "/allocations/"+vm, "1.28", alloc())
	// A route that does not exist, asked for in another language.
	for _, accept := range []string{"text/html", "text/plain", "application/xml"} {
		c.both("GET", "/no/such/thing", "1.39", accepting(accept))
		c.both("GET", "/resource_providers/"+rp+"/nope", "1.39", accepting(accept))
	}
	// Providers' bodies and queries, microversions.
	for _, b := range []map[string]any{{"name": "v9", "uuid": "nope"}, {"name": "v9", "parent_provider_uuid": "nope"}, {"name": 5},
		{"name": strings.Repeat("x", 201)}, {"uuid": rp}, {"name": "v9", "parent_provider_uuid": 5}} {
		c.both("POST", "/resource_providers", "1.39", b)
		delete(b, "uuid")
		c.both("PUT", "/resource_providers/"+rp, "1.39", b)
	}
	c.both("GET", "/resource_providers?in_tree=nope", "1.39", nil)
	c.same("GET", "/resource_providers?in_tree="+strings.ReplaceAll(rp, "-", ""), "1.39", nil)
	c.both("GET", "/resource_providers", "1.2.3", nil)
	c.both("PUT", "/resource_providers/"+rp+"/inventories/PCI_DEVICE", "1.39", gen(map[string]any{"total": 2}))
	c.both("PUT", "/resource_providers/"+rp+"/inventories/DISK_GB", "1.39", gen(map[string]any{"total": 10, "allocation_ratio": -1}))
	c.both("PUT", "/allocations/"+vm, "1.28", alloc("allocations", map[string]any{rp: map[string]any{"resources": map[string]any{"CUSTOM_NOPE": 1}}}))
	c.both("PUT", "/allocations/"+vm, "1.28", alloc("allocations", map[string]any{rp: map[string]any{"resources": map[string]any{"CUSTOM_NOPE": 1}}}, "consumer_generation", 1))
	c.both("PUT", "/allocations/"+vm, "1.28", alloc("allocations", map[string]any{cfCN1: map[string]any{"resources": map[string]any{"CUSTOM_NOPE": 1}}}, "consumer_generation", 1))
	c.both("POST", "/allocations", "1.28", map[string]any{"d4000000-0000-4000-8000-000000000002": alloc("allocations", map[string]any{cfCN1: map[string]any{"resources": map[string]any{"VCPU": 1}}})})
	// Dashless UUIDs are the dashed ones: providers and consumers.
	dl := "c3000002-0000-4000-8000-000000000000"
	c.same("POST", "/resource_providers", "1.39", map[string]any{"uuid": strings.ReplaceAll(dl, "-", ""), "name": "v2"})
	c.both("POST", "/resource_providers", "1.39", map[string]any{"uuid": dl, "name": "v3"})
	c.both("POST", "/resource_providers", "1.39", map[string]any{"uuid": "c3000003-0000-4000-8000-000000000000", "name": "v2"})
	c.same("GET", "/resource_providers/"+dl, "1.39", nil)
	consumer := "d4000000-0000-4000-8000-000000000fff"
	c.both("PUT", "/allocations/"+strings.ReplaceAll(consumer, "-", ""), "1.28", alloc())
	c.same("GET", "/allocations/"+consumer, "1.28", nil)
	c.both("PUT", "/allocations/"+consumer, "1.28", alloc())
	c.both("PUT", "/allocations/"+consumer, "1.28", alloc("consumer_generation", 1))
	c.same("GET", "/resource_providers/"+rp+"/allocations", "1.28", nil)
}

// TestConformanceMovesAndSpellings compares what TestConformanceHTTP and
// TestConformanceValidation leave out: POST /allocations moving a
// consumer's allocation to another on a full provider (as Nova moves an
// instance's allocation to its migration), UUIDs without dashes wherever
// a request names a provider, a consumer or an aggregate, and the
// refusals of deletes and generation conflicts, with their texts.
func TestConformanceMovesAndSpellings(t *testing.T) {
	c := startConformance(t)
	const (
		rp    = "c4000001-0000-4000-8000-000000000000"
		kid   = "c4000001-0000-4000-8000-000000000001"
		inst  = "d5000000-0000-4000-8000-000000000001"
		mig   = "d5000000-0000-4000-8000-000000000002"
		other = "d5000000-0000-4000-8000-000000000003"
		agg   = "a4000000-0000-4000-8000-000000000001"
	)
	dl := func(u string) string { return strings.ReplaceAll(u, "-", "") }
	c.same("POST", "/resource_providers", "1.39", map[string]any{"uuid": rp, "name": "m1"})
	c.both("POST", "/resource_providers", "1.39", map[string]any{"uuid": kid, "name": "m1-kid", "parent_provider_uuid": dl(rp)})
	c.same("POST", "/resource_providers", "1.39", map[string]any{"uuid": dl(kid), "name": "m1-kid", "parent_provider_uuid": rp})
	c.both("PUT", "/resource_providers/"+kid, "1.39", map[string]any{"name": "m1-kid", "parent_provider_uuid": dl(rp)})
	c.same("GET", "/resource_providers/"+dl(kid), "1.39", nil)
	c.same("PUT", "/resource_providers/"+dl(rp)+"/inventories", "1.39", map[string]any{"resource_provider_generation": 0,
		"inventories": map[string]any{"VCPU": map[string]any{"total": 2}, "MEMORY_MB": map[string]any{"total": 1024}}})
	c.both("PUT", "/allocations/"+other, "1.39", map[string]any{"allocations": map[string]any{rp: map[string]any{"resources": map[string]any{"DISK_GB": 1, "MEMORY_MB": 1, "VCPU": 1}}},
		"project_id": "p", "user_id": "u", "consumer_generation": nil, "consumer_type": "INSTANCE"}) // no inventory yet
	c.same("PUT", "/resource_providers/"+rp+"/inventories", "1.39", map[string]any{"resource_provider_generation": 0,
		"inventories": map[string]any{"VCPU": map[string]any{"total": 2}, "MEMORY_MB": map[string]any{"total": 1024}}})
	c.same("GET", "/resource_providers/"+dl(rp)+"/inventories", "1.39", nil)
	c.same("GET", "/resource_providers/"+dl(rp)+"/inventories/VCPU", "1.39", nil)
	c.both("PUT", "/resource_providers/"+dl(rp)+"/aggregates", "1.39", map[string]any{"resource_provider_generation": 1, "aggregates": []string{dl(agg)}})
	c.same("PUT", "/resource_providers/"+rp+"/aggregates", "1.39", map[string]any{"resource_provider_generation": 1, "aggregates": []string{dl(agg)}})
	c.same("GET", "/resource_providers/"+rp+"/aggregates", "1.39", nil)
	c.same("GET", "/resource_providers?member_of="+dl(agg), "1.39", nil)
	c.same("GET", "/resource_providers?uuid="+dl(rp), "1.39", nil)
	c.same("PUT", "/resource_providers/"+dl(rp)+"/traits", "1.39", func(i int) any {
		return map[string]any{"resource_provider_generation": c.generation(i, rp), "traits": []string{"HW_CPU_X86_AVX2"}}
	})
	full := map[string]any{"allocations": map[string]any{dl(rp): map[string]any{"resources": map[string]any{"VCPU": 2, "MEMORY_MB": 512}}},
		"project_id": "p", "user_id": "u", "consumer_generation": nil, "consumer_type": "INSTANCE"}
	c.both("PUT", "/allocations/"+inst, "1.39", full) // a dashless provider key: refused
	full["allocations"] = map[string]any{rp: map[string]any{"resources": map[string]any{"VCPU": 2, "MEMORY_MB": 512}}}
	c.both("PUT", "/allocations/"+inst, "1.39", full)
	c.same("GET", "/allocations/"+inst, "1.39", nil)
	c.same("GET", "/allocations/"+dl(inst), "1.39", nil)
	c.same("GET", "/resource_providers/"+dl(rp)+"/allocations", "1.39", nil)
	c.same("GET", "/resource_providers/"+dl(rp)+"/usages", "1.39", nil)
	c.same("GET", "/allocation_candidates?resources=MEMORY_MB:1&member_of="+dl(agg), "1.39", nil)
	c.same("GET", "/allocation_candidates?resources=MEMORY_MB:1&in_tree="+dl(kid), "1.39", nil)
	// The move: the instance's allocation becomes the migration's, on a
	// provider that could not hold both.
	move := func(instGen, migGen any, vcpu int) map[string]any {
		return map[string]any{
			inst: map[string]any{"allocations": map[string]any{}, "project_id": "p", "user_id": "u", "consumer_generation": instGen, "consumer_type": "INSTANCE"},
			dl(mig): map[string]any{"allocations": map[string]any{rp: map[string]any{"resources": map[string]any{"VCPU": vcpu, "MEMORY_MB": 512}}},
				"project_id": "p", "user_id": "u", "consumer_generation": migGen, "consumer_type": "MIGRATION"},
		}
	}
	c.both("POST", "/allocations", "1.38", move(1, nil, 3))
	c.both("POST", "/allocations", "1.38", move(7, nil, 2))
	c.both("POST", "/allocations", "1.38", move(1, nil, 2))
	for _, u := range []string{inst, mig} {
		c.same("GET", "/allocations/"+u, "1.38", nil)
	}
	c.same("GET", "/resource_providers/"+rp+"/usages", "1.39", nil)
	c.same("GET", "/usages?project_id=p", "1.38", nil)
	// And back, naming the migration without dashes.
	back := map[string]any{
		dl(mig): map[string]any{"allocations": map[string]any{}, "project_id": "p", "user_id": "u", "consumer_generation": 1, "consumer_type": "MIGRATION"},
		inst: map[string]any{"allocations": map[string]any{rp: map[string]any{"resources": map[string]any{"VCPU": 2}}},
			"project_id": "p", "user_id": "u", "consumer_generation": nil, "consumer_type": "INSTANCE"},
	}
	c.both("POST", "/allocations", "1.38", back)
	for _, u := range []string{inst, mig} {
		c.same("GET", "/allocations/"+u, "1.38", nil)
	}
	// Deletes and conflicts, with their texts.
	c.both("DELETE", "/resource_providers/"+rp, "1.39", nil)                         // has a child
	c.both("DELETE", "/resource_providers/"+dl(rp)+"/inventories/VCPU", "1.39", nil) // in use
	c.both("DELETE", "/resource_providers/"+rp+"/inventories/DISK_GB", "1.39", nil)
	c.both("PUT", "/resource_providers/"+rp+"/aggregates", "1.39", map[string]any{"resource_provider_generation": 0, "aggregates": []string{}})
	c.both("PUT", "/resource_providers/"+rp+"/traits", "1.39", map[string]any{"resource_provider_generation": 0, "traits": []string{}})
	c.both("PUT", "/resource_providers/"+rp+"/inventories", "1.39", map[string]any{"resource_provider_generation": 0, "inventories": map[string]any{}})
	c.both("PUT", "/resource_providers/"+rp+"/inventories", "1.39", func(i int) any {
		return map[string]any{"resource_provider_generation": c.generation(i, rp), "inventories": map[string]any{"MEMORY_MB": map[string]any{"total": 1024}}}
	})
	c.both("DELETE", "/resource_providers/"+kid, "1.39", nil)
	c.both("DELETE", "/resource_providers/"+rp, "1.39", nil) // has allocations
	c.both("DELETE", "/allocations/"+other, "1.39", nil)
	c.same("GET", "/allocations/"+other, "1.39", nil)
	c.both("DELETE", "/allocations/"+dl(inst), "1.39", nil)
	c.same("GET", "/resource_providers/"+rp+"/usages", "1.39", nil)
	c.both("DELETE", "/resource_providers/"+dl(rp), "1.39", nil)
	c.both("GET", "/resource_providers/"+rp, "1.39", nil)
	c.both("PUT", "/traits/CUSTOM_M1", "1.39", nil)
	c.both("PUT", "/traits/CUSTOM_M1", "1.39", nil)
	c.both("PUT", "/traits/NOT_CUSTOM", "1.39", nil)
	c.both("DELETE", "/traits/HW_CPU_X86_AVX2", "1.39", nil)
	c.both("DELETE", "/traits/CUSTOM_NOPE", "1.39", nil)
	c.both("DELETE", "/resource_classes/VCPU", "1.39", nil)
	c.both("DELETE", "/resource_classes/CUSTOM_NOPE", "1.39", nil)
	c.both("GET", "/resource_classes/CUSTOM_NOPE", "1.39", nil)
	c.both("PUT", "/resource_classes/CUSTOM_M1", "1.7", nil)
	c.both("PUT", "/resource_classes/CUSTOM_M1", "1.7", nil)
	c.both("PUT", "/resource_classes/VCPU", "1.7", nil)
}
