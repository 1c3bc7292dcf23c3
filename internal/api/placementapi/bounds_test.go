package placementapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHugeValuesRefusedAndNoWraparound: Placement's schema bounds
// inventory integers and allocation amounts by its database's 2^31-1 and
// allocation ratios by the largest 32-bit float; keel answers 400 past
// those bounds, and within them (a ratio of 3e38 makes a capacity past
// int64) allocations are admitted and summed without wrapping.
func TestHugeValuesRefusedAndNoWraparound(t *testing.T) {
	srv, uuids := newServer(t)
	h2, h3 := uuids["h2"], uuids["h3"]
	var cur struct {
		Generation int64 `json:"resource_provider_generation"`
	}
	if st, _ := send(t, srv, "GET", "/placement/resource_providers/"+h2+"/inventories", "1.39", nil, &cur); st != 200 {
		t.Fatalf("reading h2's inventories: %d", st)
	}
	inv := func(total any, ratio any) map[string]any {
		return map[string]any{"resource_provider_generation": cur.Generation, "inventories": map[string]any{
			"VCPU": map[string]any{"total": total, "allocation_ratio": ratio}}}
	}
	alloc := func(rp string, n any) map[string]any {
		return map[string]any{"allocations": map[string]any{rp: map[string]any{"resources": map[string]any{"VCPU": n}}},
			"project_id": "p1", "user_id": "u1", "consumer_generation": nil, "consumer_type": "INSTANCE"}
	}
	for _, c := range []struct {
		what, method, path string
		body               any
		says               string // in the error's detail
	}{
		{"a total of 2^31", "PUT", "/placement/resource_providers/" + h2 + "/inventories", inv(int64(1)<<31, 1.0), "maximum of 2147483647"},
		{"a total of 2^62", "PUT", "/placement/resource_providers/" + h2 + "/inventories", inv(int64(1)<<62, 1.0), "maximum of 2147483647"},
		{"a ratio past the largest float", "PUT", "/placement/resource_providers/" + h2 + "/inventories", inv(8, 1e39), "maximum of 3.40282e+38"},
		{"an allocation of 2^31", "PUT", "/placement/allocations/00000000-0000-0000-0000-0000000000c2", alloc(h2, int64(1)<<31), "maximum of 2147483647"},
		{"an allocation of 2^62", "PUT", "/placement/allocations/00000000-0000-0000-0000-0000000000c2", alloc(h2, int64(1)<<62), "maximum of 2147483647"},
		{"an allocation past int64", "PUT", "/placement/allocations/00000000-0000-0000-0000-0000000000c2", alloc(h2, 1e19), "is not of type 'integer'"},
		{"an allocation of 2^62 in POST /allocations", "POST", "/placement/allocations", map[string]any{
			"00000000-0000-0000-0000-0000000000c3": alloc(h3, int64(1)<<62)}, "maximum of 2147483647"},
	} {
		if st, body := sendRaw(t, srv, c.method, c.path, c.body); st != http.StatusBadRequest || !strings.Contains(body, c.says) || strings.Contains(body, "Go ") {
			t.Errorf("%s: %d %s, want 400 saying %q", c.what, st, body, c.says)
		}
	}
	if st, _ := send(t, srv, "GET", "/placement/resource_providers?uuid=nope", "1.39", nil, nil); st != http.StatusBadRequest {
		t.Errorf("?uuid=nope: %d, want 400", st)
	}

	// Within the bounds: 2^31-1 VCPU at ratio 3e38 is a capacity past
	// int64, taken as unbounded, not as a wrapped negative number.
	if st, code := send(t, srv, "PUT", "/placement/resource_providers/"+h2+"/inventories", "1.39", inv(1<<31-1, 3e38), nil); st != 200 {
		t.Fatalf("the largest total at ratio 3e38: %d %s", st, code)
	}
	for i, c := range []string{"00000000-0000-0000-0000-0000000000d1", "00000000-0000-0000-0000-0000000000d2", "00000000-0000-0000-0000-0000000000d3"} {
		if st, code := sendRaw(t, srv, "PUT", "/placement/allocations/"+c, alloc(h2, 1<<31-1)); st != 204 {
			t.Fatalf("allocation %d of 2^31-1 on the huge provider: %d %s", i+1, st, code)
		}
	}
	var usages struct {
		Usages map[string]int64 `json:"usages"`
	}
	if st, _ := send(t, srv, "GET", "/placement/resource_providers/"+h2+"/usages", "1.39", nil, &usages); st != 200 || usages.Usages["VCPU"] != 3*(1<<31-1) {
		t.Fatalf("usage after three allocations of 2^31-1: %d %v, want %d", st, usages.Usages, 3*(1<<31-1))
	}
	var inventories struct {
		Inventories map[string]struct {
			AllocationRatio float64 `json:"allocation_ratio"`
		} `json:"inventories"`
	}
	if st, _ := send(t, srv, "GET", "/placement/resource_providers/"+h2+"/inventories", "1.39", nil, &inventories); st != 200 || inventories.Inventories["VCPU"].AllocationRatio != 3e38 {
		t.Fatalf("the inventory read back: %d %+v", st, inventories)
	}
}

func sendRaw(t *testing.T, srv *httptest.Server, method, path string, body any) (int, string) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(b))
	req.Header.Set("X-Auth-Token", "admin")
	req.Header.Set("OpenStack-API-Version", "placement 1.39")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}
