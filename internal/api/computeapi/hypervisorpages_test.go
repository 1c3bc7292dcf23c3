package computeapi_test

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"keel/internal/records"
	"keel/internal/testenv"
)

// TestHypervisorViewKeys checks the keys of a hypervisor's view at the
// microversions that change it: the listing's four, the detail's (its
// cpu_info a string before 2.28 and an object from it; from 2.88 without
// the resource fields, with uptime), and the service's, with a null
// disabled_reason. At 2.88 a host whose service is down has a null uptime.
func TestHypervisorViewKeys(t *testing.T) {
	e := newEnv(t)
	list := []string{"hypervisor_hostname", "id", "state", "status"}
	usage := append(slices.Clone(list), "host_ip", "hypervisor_type", "hypervisor_version", "service", "cpu_info", "current_workload", "disk_available_least", "free_disk_gb", "free_ram_mb",
		"local_gb", "local_gb_used", "memory_mb", "memory_mb_used", "running_vms", "vcpus", "vcpus_used")
	for _, c := range []struct {
		path, version string
		want          []string
		cpuInfo       any
	}{
		{"os-hypervisors", "", list, nil},
		{"os-hypervisors/detail", "", usage, "{}"},
		{"os-hypervisors/detail", "2.28", usage, map[string]any{}},
		{"os-hypervisors/detail", "2.53", usage, map[string]any{}},
		{"os-hypervisors/detail", "2.87", usage, map[string]any{}},
		{"os-hypervisors/detail", "2.88", append(slices.Clone(list), "host_ip", "hypervisor_type", "hypervisor_version", "service", "uptime"), nil},
	} {
		var out struct{ Hypervisors []map[string]any }
		if resp := e.call("GET", "/compute/v2.1/"+c.path, "admin", c.version, nil, &out); resp.StatusCode != 200 || len(out.Hypervisors) != 3 {
			t.Fatalf("%s at %q: %d, %d hypervisors; want 200 and 3", c.path, c.version, resp.StatusCode, len(out.Hypervisors))
		}
		h := out.Hypervisors[0]
		if got := slices.Sorted(maps.Keys(h)); !slices.Equal(got, slices.Sorted(slices.Values(c.want))) {
			t.Errorf("%s at %q: keys %v, want %v", c.path, c.version, got, slices.Sorted(slices.Values(c.want)))
		}
		if c.cpuInfo != nil && fmt.Sprint(h["cpu_info"]) != fmt.Sprint(c.cpuInfo) {
			t.Errorf("%s at %q: cpu_info %#v, want %#v", c.path, c.version, h["cpu_info"], c.cpuInfo)
		}
		if svc, ok := h["service"].(map[string]any); ok {
			if r, has := svc["disabled_reason"]; !has || r != nil || svc["host"] != h["hypervisor_hostname"] {
				t.Errorf("%s at %q: service %v, want the host and a null disabled_reason", c.path, c.version, svc)
			}
		}
	}
	var show struct{ Hypervisor map[string]any }
	e.call("GET", "/compute/v2.1/os-hypervisors/h1", "admin", "2.88", nil, &show)
	if up, _ := show.Hypervisor["uptime"].(string); up == "" || show.Hypervisor["vcpus"] != nil {
		t.Errorf("h1 at 2.88: uptime %#v vcpus %v, want its uptime text and no vcpus", show.Hypervisor["uptime"], show.Hypervisor["vcpus"])
	}
	if _, err := e.st.UpdateService(context.Background(), "h2", func(s *records.Service) error { s.ForcedDown = true; return nil }); err != nil {
		t.Fatal(err)
	}
	show.Hypervisor = nil
	e.call("GET", "/compute/v2.1/os-hypervisors/h2", "admin", "2.88", nil, &show)
	if up, has := show.Hypervisor["uptime"]; !has || up != nil {
		t.Errorf("h2, down, at 2.88: uptime %#v (present %t), want null", up, has)
	}
}

// TestHypervisorPages checks the hypervisor listings' paging (2.33) with
// more hosts than a page holds: without limit a page holds maxLimit
// (1,000, Nova's [api] max_limit) and links to the next, a larger limit is
// cut to it, following the links lists every host once, in order; before
// 2.33 every host is listed at once; a hostname pattern is not paged and
// refuses limit and marker (400), as Nova does.
func TestHypervisorPages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const extra = 1002
	for i := range extra {
		h := fmt.Sprintf("pg%04d", i)
		if err := e.st.PutHostRecord(ctx, records.HostRecord{Host: h, ProviderUUID: uuid.NewString(), VCPUs: 8}); err != nil {
			t.Fatal(err)
		}
		if err := e.st.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", Zone: "nova", LastSeenUp: e.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	const all = extra + 3
	type page struct {
		Hypervisors []struct {
			ID       any    `json:"id"`
			Hostname string `json:"hypervisor_hostname"`
		}
		Links []struct{ Rel, Href string } `json:"hypervisors_links"`
	}
	get := func(path, version string) (page, int) {
		t.Helper()
		var p page
		resp := e.call("GET", path, "admin", version, nil, &p)
		return p, resp.StatusCode
	}
	if p, code := get("/compute/v2.1/os-hypervisors/detail", "2.1"); code != 200 || len(p.Hypervisors) != all || len(p.Links) != 0 {
		t.Errorf("2.1: %d, %d hypervisors, links %v; want every one of %d, no links", code, len(p.Hypervisors), p.Links, all)
	}
	for _, limit := range []string{"", "?limit=5000"} {
		var names []string
		path := "/compute/v2.1/os-hypervisors/detail" + limit
		for pages := 0; path != ""; pages++ {
			if pages > 3 {
				t.Fatalf("limit %q: more than 3 pages", limit)
			}
			p, code := get(path, "2.53")
			if code != 200 {
				t.Fatalf("GET %s: %d", path, code)
			}
			if pages == 0 && (len(p.Hypervisors) != 1000 || len(p.Links) != 1 || p.Links[0].Rel != "next") {
				t.Fatalf("limit %q: first page %d hypervisors, links %v; want 1000 and a next link", limit, len(p.Hypervisors), p.Links)
			}
			for _, h := range p.Hypervisors {
				names = append(names, h.Hostname)
			}
			path = ""
			if len(p.Links) > 0 {
				u, err := url.Parse(p.Links[0].Href)
				if err != nil || !strings.HasSuffix(u.Query().Get("marker"), fmt.Sprint(p.Hypervisors[len(p.Hypervisors)-1].ID)) {
					t.Fatalf("next link %q: want the last hypervisor's id as marker", p.Links[0].Href)
				}
				path = "/compute/v2.1/os-hypervisors/detail?" + u.RawQuery
			}
		}
		if len(names) != all || !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != all {
			t.Errorf("limit %q: the pages listed %d hypervisors (sorted %v); want each of %d once, in order", limit, len(names), slices.IsSorted(names), all)
		}
	}
	if p, code := get("/compute/v2.1/os-hypervisors/detail?hypervisor_hostname_pattern=pg", "2.53"); code != 200 || len(p.Hypervisors) != extra {
		t.Errorf("pattern pg: %d, %d hypervisors; want every one of %d (a pattern is not paged)", code, len(p.Hypervisors), extra)
	}
	for _, q := range []string{"limit=2", "marker=x"} {
		if _, code := get("/compute/v2.1/os-hypervisors/detail?hypervisor_hostname_pattern=pg&"+q, "2.53"); code != 400 {
			t.Errorf("pattern with %s: %d, want 400", q, code)
		}
	}
}

// TestLargeHypervisorListingKept checks that an unpaged listing of more
// than 1,000 hosts is kept and served again: a host added after it shows
// only once the kept listing is past its fresh age (rebuilt in the
// background, the old one served meanwhile) or past its stale bound
// (rebuilt before it is served); a listing of at most 1,000 (a page) is
// always read afresh.
func TestLargeHypervisorListingKept(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	add := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			h := fmt.Sprintf("pg%04d", i)
			if err := e.st.PutHostRecord(ctx, records.HostRecord{Host: h, ProviderUUID: uuid.NewString(), VCPUs: 8}); err != nil {
				t.Fatal(err)
			}
			if err := e.st.PutService(ctx, records.Service{Host: h, Binary: "nova-compute", Zone: "nova", LastSeenUp: e.clk.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(path, version string) int {
		t.Helper()
		var p struct {
			Hypervisors []struct {
				Hostname string `json:"hypervisor_hostname"`
			}
		}
		if resp := e.call("GET", path, "admin", version, nil, &p); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return len(p.Hypervisors)
	}
	const detail = "/compute/v2.1/os-hypervisors/detail"
	add(0, 1002)
	all := 1002 + 3
	if got := count(detail, "2.1"); got != all {
		t.Fatalf("first listing: %d hypervisors, want %d", got, all)
	}
	// A page (2.53) of a large cloud is read afresh: the page past the
	// first shows a host added just now.
	add(5000, 1)
	if got := count(detail+"?marker="+url.QueryEscape(pageMarker(t, e)), "2.53"); got != all+1-1000 {
		t.Errorf("second page after a host was added: %d hypervisors, want %d", got, all+1-1000)
	}
	if got := count(detail, "2.1"); got != all {
		t.Errorf("listing again at once: %d hypervisors, want the kept %d", got, all)
	}
	// Past the fresh age: the kept listing is served, and rebuilt.
	e.clk.Advance(2 * time.Second)
	if got := count(detail, "2.1"); got != all {
		t.Errorf("listing past the fresh age: %d hypervisors, want the kept %d while it is rebuilt", got, all)
	}
	for count(detail, "2.1") != all+1 {
		if ctx.Err() != nil {
			t.Fatal("the kept listing was never rebuilt")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Past the stale bound: rebuilt before it is served.
	add(5001, 1)
	e.clk.Advance(10 * time.Second)
	if got := count(detail, "2.1"); got != all+2 {
		t.Errorf("listing past the stale bound: %d hypervisors, want %d (rebuilt first)", got, all+2)
	}
	// Another query is another listing.
	if got := count(detail+"?with_metrics=true", "2.1"); got != all+2 {
		t.Errorf("with_metrics listing: %d hypervisors, want %d", got, all+2)
	}
}

// pageMarker is the id of the 1,000th hypervisor (2.53), the marker of
// the second page.
func pageMarker(t *testing.T, e *env) string {
	t.Helper()
	var p struct {
		Hypervisors []struct {
			ID string `json:"id"`
		}
	}
	if resp := e.call("GET", "/compute/v2.1/os-hypervisors?limit=1000", "admin", "2.53", nil, &p); resp.StatusCode != 200 || len(p.Hypervisors) != 1000 {
		t.Fatalf("first page: %d, %d hypervisors", resp.StatusCode, len(p.Hypervisors))
	}
	return p.Hypervisors[999].ID
}
