package placementapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
)

// expect sends a request and checks its status and, for errors,
// Placement's error code (when code is not empty).
func expect(t *testing.T, srv *httptest.Server, method, path, version string, body any, status int, code string, out any) {
	t.Helper()
	got, gotCode := send(t, srv, method, path, version, body, out)
	if got != status || (code != "" && gotCode != code) {
		t.Errorf("%s %s at %s: %d %s, want %d %s", method, path, version, got, gotCode, status, code)
	}
}

const (
	agg1 = "aaaaaaaa-0000-4000-8000-000000000001"
	agg2 = "aaaaaaaa-0000-4000-8000-000000000002"
)

type providerOut struct {
	UUID       string  `json:"uuid"`
	Name       string  `json:"name"`
	Generation int64   `json:"generation"`
	Parent     *string `json:"parent_provider_uuid"`
	Root       string  `json:"root_provider_uuid"`
	Links      []struct{ Rel string }
}

func TestProviderUpdateAndTrees(t *testing.T) {
	srv, uuids := newServer(t)
	h1, h2 := uuids["h1"], uuids["h2"]
	var p providerOut
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.14", map[string]any{"name": "h2-renamed"}, 200, "", &p)
	if p.Name != "h2-renamed" || p.Parent != nil || p.Root != h2 || p.Generation != 1 {
		t.Errorf("renamed: %+v", p)
	}
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.14", map[string]any{"name": "h1"}, 409, "", nil) // no code before 1.23
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.39", map[string]any{"name": "h1"}, 409, "placement.duplicate_name", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.13", map[string]any{"name": "x", "parent_provider_uuid": h1}, 400, "", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.14", map[string]any{"name": "x", "uuid": h2}, 400, "", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/00000000-0000-0000-0000-0000000000ff", "1.14", map[string]any{"name": "x"}, 404, "", nil)

	// A child of h1, created with its parent; then h2 put under it.
	var child providerOut
	expect(t, srv, "POST", "/placement/resource_providers", "1.20", map[string]any{"name": "h1-numa0", "parent_provider_uuid": h1}, 200, "", &child)
	if child.Parent == nil || *child.Parent != h1 || child.Root != h1 {
		t.Errorf("child: %+v", child)
	}
	expect(t, srv, "POST", "/placement/resource_providers", "1.20", map[string]any{"name": "orphan", "parent_provider_uuid": "00000000-0000-0000-0000-0000000000ff"}, 400, "", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.14", map[string]any{"name": "h2", "parent_provider_uuid": child.UUID}, 200, "", &p)
	if p.Root != h1 || *p.Parent != child.UUID {
		t.Errorf("h2 under the child: %+v", p)
	}
	// Loops, and re-parenting before 1.37.
	expect(t, srv, "PUT", "/placement/resource_providers/"+h1, "1.37", map[string]any{"name": "h1", "parent_provider_uuid": h2}, 400, "", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.36", map[string]any{"name": "h2", "parent_provider_uuid": h1}, 400, "", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.36", map[string]any{"name": "h2", "parent_provider_uuid": nil}, 400, "", nil)
	// Leaving the parent out keeps it.
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.36", map[string]any{"name": "h2"}, 200, "", &p)
	if p.Parent == nil || *p.Parent != child.UUID {
		t.Errorf("a rename without parent_provider_uuid changed the parent: %+v", p)
	}

	var list struct {
		ResourceProviders []providerOut `json:"resource_providers"`
	}
	get(t, srv, "/placement/resource_providers?in_tree="+h2, "admin", "1.14", &list)
	names := []string{}
	for _, rp := range list.ResourceProviders {
		names = append(names, rp.Name)
	}
	if !reflect.DeepEqual(names, []string{"h1", "h1-numa0", "h2"}) {
		t.Errorf("in_tree of h2: %v, want h1's whole tree", names)
	}
	expect(t, srv, "DELETE", "/placement/resource_providers/"+child.UUID, "1.39", nil, 409, "placement.resource_provider.cannot_delete_parent", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2, "1.37", map[string]any{"name": "h2", "parent_provider_uuid": nil}, 200, "", &p)
	if p.Parent != nil || p.Root != h2 {
		t.Errorf("un-parented at 1.37: %+v", p)
	}
	expect(t, srv, "DELETE", "/placement/resource_providers/"+child.UUID, "1.14", nil, 204, "", nil)
	expect(t, srv, "DELETE", "/placement/resource_providers/"+h1, "1.39", nil, 409, "placement.resource_provider.inuse", nil)

	// The fields and links each microversion shows.
	var raw map[string]any
	get(t, srv, "/placement/resource_providers/"+h2, "admin", "1.13", &raw)
	if _, ok := raw["parent_provider_uuid"]; ok || len(raw["links"].([]any)) != 6 {
		t.Errorf("provider at 1.13: %v", raw)
	}
	get(t, srv, "/placement/resource_providers/"+h2, "admin", "1.0", &raw)
	if len(raw["links"].([]any)) != 3 {
		t.Errorf("links at 1.0: %v", raw["links"])
	}
}

type inventoryOut struct {
	Generation      int64   `json:"resource_provider_generation"`
	Total           int64   `json:"total"`
	Reserved        int64   `json:"reserved"`
	MaxUnit         int64   `json:"max_unit"`
	AllocationRatio float64 `json:"allocation_ratio"`
}

func TestPerClassInventories(t *testing.T) {
	srv, uuids := newServer(t)
	h1, h2 := uuids["h1"], uuids["h2"]
	base := "/placement/resource_providers/" + h2 + "/inventories"
	var inv inventoryOut
	expect(t, srv, "GET", base+"/VCPU", "1.39", nil, 200, "", &inv)
	if inv.Total != 8 || inv.AllocationRatio != 2 || inv.Generation != 1 {
		t.Errorf("GET VCPU: %+v", inv)
	}
	expect(t, srv, "GET", base+"/DISK_GB", "1.39", nil, 404, "", nil)
	// PUT changes an inventory there is; POST adds one (the generation
	// it may name is not checked, as in Placement).
	expect(t, srv, "PUT", base+"/DISK_GB", "1.39", map[string]any{"resource_provider_generation": 1, "total": 500, "reserved": 10}, 400, "", nil)
	expect(t, srv, "POST", base, "1.39", map[string]any{"resource_class": "DISK_GB", "resource_provider_generation": 7, "total": 500, "reserved": 10}, 201, "", &inv)
	if inv.Generation != 2 || inv.Total != 500 || inv.Reserved != 10 || inv.MaxUnit != 2147483647 || inv.AllocationRatio != 1 {
		t.Errorf("PUT DISK_GB: %+v", inv)
	}
	expect(t, srv, "PUT", base+"/DISK_GB", "1.39", map[string]any{"resource_provider_generation": 1, "total": 400}, 409, "placement.concurrent_update", nil)
	expect(t, srv, "PUT", base+"/DISK_GB", "1.39", map[string]any{"resource_provider_generation": 2}, 400, "", nil)
	expect(t, srv, "PUT", base+"/DISK_GB", "1.39", map[string]any{"resource_provider_generation": 2, "total": 10, "reserved": 11}, 400, "", nil)
	expect(t, srv, "PUT", base+"/CUSTOM_NOPE", "1.39", map[string]any{"resource_provider_generation": 2, "total": 1}, 400, "", nil)
	var all struct {
		Inventories map[string]inventoryOut
		Generation  int64 `json:"resource_provider_generation"`
	}
	get(t, srv, base, "admin", "1.39", &all)
	if len(all.Inventories) != 3 || all.Generation != 2 || all.Inventories["VCPU"].Total != 8 {
		t.Errorf("all inventories after the class PUT: %+v", all)
	}
	expect(t, srv, "POST", base, "1.39", map[string]any{"resource_class": "DISK_GB", "resource_provider_generation": 2, "total": 1}, 409, "placement.concurrent_update", nil)
	expect(t, srv, "DELETE", base+"/DISK_GB", "1.39", nil, 204, "", nil)
	expect(t, srv, "DELETE", base+"/DISK_GB", "1.39", nil, 404, "", nil)
	expect(t, srv, "POST", base, "1.39", map[string]any{"resource_class": "DISK_GB", "resource_provider_generation": 3, "total": 7}, 201, "", &inv)
	if inv.Total != 7 || inv.Generation != 4 {
		t.Errorf("POST DISK_GB: %+v", inv)
	}

	// h1 has allocations: its classes in use cannot go.
	h1inv := "/placement/resource_providers/" + h1 + "/inventories"
	expect(t, srv, "DELETE", h1inv+"/VCPU", "1.39", nil, 409, "placement.inventory.inuse", nil)
	expect(t, srv, "DELETE", h1inv, "1.4", nil, 405, "", nil)
	expect(t, srv, "DELETE", h1inv, "1.5", nil, 409, "", nil)
	expect(t, srv, "DELETE", h1inv, "1.39", nil, 409, "placement.inventory.inuse", nil)
	expect(t, srv, "DELETE", base, "1.5", nil, 204, "", nil)
	all.Inventories = nil
	get(t, srv, base, "admin", "1.39", &all)
	if len(all.Inventories) != 0 || all.Generation != 5 {
		t.Errorf("after DELETE all: %+v", all)
	}
}

func TestTraits(t *testing.T) {
	srv, uuids := newServer(t)
	h1, h2 := uuids["h1"], uuids["h2"]
	var traits struct {
		Traits     []string
		Generation int64 `json:"resource_provider_generation"`
	}
	get(t, srv, "/placement/traits", "admin", "1.6", &traits)
	for _, want := range []string{"COMPUTE_STATUS_DISABLED", "HW_CPU_X86_AVX2", "COMPUTE_NET_ATTACH_INTERFACE", "STORAGE_DISK_SSD"} {
		if !slices.Contains(traits.Traits, want) {
			t.Errorf("GET /traits lacks the standard %s (%d traits)", want, len(traits.Traits))
		}
	}
	expect(t, srv, "GET", "/placement/traits", "1.5", nil, 404, "", nil)
	expect(t, srv, "PUT", "/placement/traits/CUSTOM_GOLD", "1.6", nil, 201, "", nil)
	expect(t, srv, "PUT", "/placement/traits/CUSTOM_GOLD", "1.6", nil, 204, "", nil)
	expect(t, srv, "PUT", "/placement/traits/CUSTOM_SILVER", "1.6", nil, 201, "", nil)
	expect(t, srv, "PUT", "/placement/traits/GOLD", "1.6", nil, 400, "", nil)
	expect(t, srv, "PUT", "/placement/traits/CUSTOM_gold", "1.6", nil, 400, "", nil)
	expect(t, srv, "GET", "/placement/traits/CUSTOM_GOLD", "1.6", nil, 204, "", nil)
	expect(t, srv, "GET", "/placement/traits/HW_CPU_X86_AVX2", "1.6", nil, 204, "", nil)
	expect(t, srv, "GET", "/placement/traits/CUSTOM_NONE", "1.6", nil, 404, "", nil)
	get(t, srv, "/placement/traits?name=startswith:CUSTOM_", "admin", "1.6", &traits)
	if !reflect.DeepEqual(traits.Traits, []string{"CUSTOM_GOLD", "CUSTOM_SILVER"}) {
		t.Errorf("startswith:CUSTOM_ = %v", traits.Traits)
	}
	get(t, srv, "/placement/traits?name=in:CUSTOM_GOLD,HW_CPU_X86_SSE42,CUSTOM_NONE", "admin", "1.6", &traits)
	if !reflect.DeepEqual(traits.Traits, []string{"CUSTOM_GOLD", "HW_CPU_X86_SSE42"}) {
		t.Errorf("in: = %v", traits.Traits)
	}
	expect(t, srv, "GET", "/placement/traits?name=CUSTOM_GOLD", "1.6", nil, 400, "", nil)

	pt := "/placement/resource_providers/" + h1 + "/traits"
	get(t, srv, pt, "admin", "1.6", &traits)
	if len(traits.Traits) != 0 || traits.Generation != 2 {
		t.Errorf("h1's traits: %+v", traits)
	}
	expect(t, srv, "PUT", pt, "1.6", map[string]any{"traits": []string{"CUSTOM_NONE"}, "resource_provider_generation": 2}, 400, "", nil)
	expect(t, srv, "PUT", pt, "1.39", map[string]any{"traits": []string{"CUSTOM_GOLD"}, "resource_provider_generation": 1}, 409, "placement.concurrent_update", nil)
	expect(t, srv, "PUT", pt, "1.6", map[string]any{"traits": []string{"HW_CPU_X86_AVX2", "CUSTOM_GOLD"}, "resource_provider_generation": 2}, 200, "", &traits)
	if !reflect.DeepEqual(traits.Traits, []string{"CUSTOM_GOLD", "HW_CPU_X86_AVX2"}) || traits.Generation != 3 {
		t.Errorf("PUT traits: %+v", traits)
	}
	get(t, srv, "/placement/traits?associated=true", "admin", "1.6", &traits)
	if !reflect.DeepEqual(traits.Traits, []string{"CUSTOM_GOLD", "HW_CPU_X86_AVX2"}) {
		t.Errorf("associated=true: %v", traits.Traits)
	}
	get(t, srv, "/placement/traits?associated=false&name=startswith:CUSTOM", "admin", "1.6", &traits)
	if !reflect.DeepEqual(traits.Traits, []string{"CUSTOM_SILVER"}) {
		t.Errorf("associated=false: %v", traits.Traits)
	}
	expect(t, srv, "DELETE", "/placement/traits/CUSTOM_GOLD", "1.6", nil, 409, "", nil)
	expect(t, srv, "DELETE", "/placement/traits/HW_CPU_X86_AVX2", "1.6", nil, 400, "", nil)
	expect(t, srv, "DELETE", "/placement/traits/CUSTOM_SILVER", "1.6", nil, 204, "", nil)
	expect(t, srv, "DELETE", "/placement/traits/CUSTOM_SILVER", "1.6", nil, 404, "", nil)

	// The candidates' summaries show the traits from 1.17.
	var ac struct {
		Summaries map[string]struct{ Traits []string } `json:"provider_summaries"`
	}
	get(t, srv, "/placement/allocation_candidates?resources=VCPU:1&required=CUSTOM_GOLD", "admin", "1.17", &ac)
	if len(ac.Summaries) != 1 || !reflect.DeepEqual(ac.Summaries[h1].Traits, []string{"CUSTOM_GOLD", "HW_CPU_X86_AVX2"}) {
		t.Errorf("candidates requiring CUSTOM_GOLD: %+v", ac)
	}
	expect(t, srv, "DELETE", pt, "1.6", nil, 204, "", nil)
	get(t, srv, pt, "admin", "1.6", &traits)
	if len(traits.Traits) != 0 || traits.Generation != 4 {
		t.Errorf("after DELETE: %+v", traits)
	}
	expect(t, srv, "DELETE", "/placement/traits/CUSTOM_GOLD", "1.6", nil, 204, "", nil)
	_ = h2
}

func TestResourceClasses(t *testing.T) {
	srv, uuids := newServer(t)
	var list struct {
		ResourceClasses []struct{ Name string } `json:"resource_classes"`
	}
	names := func() []string {
		get(t, srv, "/placement/resource_classes", "admin", "1.2", &list)
		var out []string
		for _, rc := range list.ResourceClasses {
			out = append(out, rc.Name)
		}
		return out
	}
	if got := names(); !slices.Contains(got, "VCPU") || !slices.Contains(got, "NET_PACKET_RATE_KILOPACKET_PER_SEC") || slices.Contains(got, "CUSTOM_FPGA") {
		t.Errorf("standard classes: %v", got)
	}
	expect(t, srv, "GET", "/placement/resource_classes", "1.1", nil, 404, "", nil)
	expect(t, srv, "POST", "/placement/resource_classes", "1.2", map[string]any{"name": "CUSTOM_FPGA"}, 201, "", nil)
	expect(t, srv, "POST", "/placement/resource_classes", "1.2", map[string]any{"name": "CUSTOM_FPGA"}, 409, "", nil)
	expect(t, srv, "POST", "/placement/resource_classes", "1.2", map[string]any{"name": "FPGA2"}, 400, "", nil)
	expect(t, srv, "PUT", "/placement/resource_classes/CUSTOM_GPU", "1.7", nil, 201, "", nil)
	expect(t, srv, "PUT", "/placement/resource_classes/CUSTOM_GPU", "1.7", nil, 204, "", nil)
	expect(t, srv, "PUT", "/placement/resource_classes/VCPU", "1.7", nil, 400, "", nil)
	var rc struct{ Name string }
	expect(t, srv, "GET", "/placement/resource_classes/CUSTOM_FPGA", "1.2", nil, 200, "", &rc)
	if rc.Name != "CUSTOM_FPGA" {
		t.Errorf("GET class: %+v", rc)
	}
	expect(t, srv, "GET", "/placement/resource_classes/CUSTOM_NONE", "1.2", nil, 404, "", nil)
	// Rename (1.2–1.6) while unused.
	expect(t, srv, "PUT", "/placement/resource_classes/CUSTOM_GPU", "1.6", map[string]any{"name": "CUSTOM_VGPU2"}, 200, "", &rc)
	if got := names(); !slices.Contains(got, "CUSTOM_VGPU2") || slices.Contains(got, "CUSTOM_GPU") {
		t.Errorf("after rename: %v", got)
	}
	// Inventory of a custom class needs the class; then the class is in use.
	inv := "/placement/resource_providers/" + uuids["h3"] + "/inventories/CUSTOM_FPGA"
	expect(t, srv, "PUT", inv, "1.39", map[string]any{"resource_provider_generation": 1, "total": 2}, 400, "", nil) // no such inventory yet
	expect(t, srv, "POST", "/placement/resource_providers/"+uuids["h3"]+"/inventories", "1.39", map[string]any{"resource_class": "CUSTOM_FPGA", "total": 2}, 201, "", nil)
	expect(t, srv, "DELETE", "/placement/resource_classes/CUSTOM_FPGA", "1.2", nil, 409, "", nil)
	expect(t, srv, "DELETE", "/placement/resource_classes/VCPU", "1.2", nil, 400, "", nil)
	expect(t, srv, "DELETE", inv, "1.39", nil, 204, "", nil)
	expect(t, srv, "DELETE", "/placement/resource_classes/CUSTOM_FPGA", "1.2", nil, 204, "", nil)
	expect(t, srv, "DELETE", "/placement/resource_classes/CUSTOM_FPGA", "1.2", nil, 404, "", nil)
	expect(t, srv, "GET", "/placement/allocation_candidates?resources=CUSTOM_FPGA:1", "1.39", nil, 400, "", nil)
}

func TestAggregatesAndFilters(t *testing.T) {
	srv, uuids := newServer(t)
	h1, h2, h3 := uuids["h1"], uuids["h2"], uuids["h3"]
	var aggs struct {
		Aggregates []string
		Generation *int64 `json:"resource_provider_generation"`
	}
	// 1.1: a bare list, no generation.
	expect(t, srv, "PUT", "/placement/resource_providers/"+h1+"/aggregates", "1.1", []string{agg1}, 200, "", &aggs)
	if !reflect.DeepEqual(aggs.Aggregates, []string{agg1}) || aggs.Generation != nil {
		t.Errorf("1.1 PUT: %+v", aggs)
	}
	expect(t, srv, "PUT", "/placement/resource_providers/"+h1+"/aggregates", "1.1", []string{"not-a-uuid"}, 400, "", nil)
	expect(t, srv, "GET", "/placement/resource_providers/"+h1+"/aggregates", "1.0", nil, 404, "", nil)
	// 1.19: with the generation, checked.
	get(t, srv, "/placement/resource_providers/"+h2+"/aggregates", "admin", "1.19", &aggs)
	if len(aggs.Aggregates) != 0 || aggs.Generation == nil || *aggs.Generation != 1 {
		t.Errorf("h2 at 1.19: %+v", aggs)
	}
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2+"/aggregates", "1.39", map[string]any{"aggregates": []string{agg2}, "resource_provider_generation": 0}, 409, "placement.concurrent_update", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2+"/aggregates", "1.19", []string{agg2}, 400, "", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2+"/aggregates", "1.19", map[string]any{"aggregates": []string{agg1, agg2}, "resource_provider_generation": 1}, 200, "", &aggs)
	if len(aggs.Aggregates) != 2 || *aggs.Generation != 2 {
		t.Errorf("1.19 PUT: %+v", aggs)
	}
	expect(t, srv, "PUT", "/placement/traits/CUSTOM_GOLD", "1.6", nil, 201, "", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h3+"/traits", "1.6", map[string]any{"traits": []string{"CUSTOM_GOLD", "HW_CPU_X86_AVX2"}, "resource_provider_generation": 1}, 200, "", nil)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h2+"/traits", "1.6", map[string]any{"traits": []string{"HW_CPU_X86_AVX2"}, "resource_provider_generation": 2}, 200, "", nil)

	names := func(query, version string) string {
		t.Helper()
		var list struct {
			ResourceProviders []providerOut `json:"resource_providers"`
		}
		if code, ec := send(t, srv, "GET", "/placement/resource_providers?"+query, version, nil, &list); code != 200 {
			return "error " + ec
		}
		var out []string
		for _, rp := range list.ResourceProviders {
			out = append(out, rp.Name)
		}
		return strings.Join(out, ",")
	}
	cands := func(query, version string) string {
		t.Helper()
		var ac struct {
			Summaries map[string]any `json:"provider_summaries"`
		}
		if code, ec := send(t, srv, "GET", "/placement/allocation_candidates?"+query, version, nil, &ac); code != 200 {
			return "error " + ec
		}
		var out []string
		for name, u := range uuids {
			if _, ok := ac.Summaries[u]; ok {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	cases := []struct{ what, got, want string }{
		{"member_of one", names("member_of="+agg1, "1.3"), "h1,h2"},
		{"member_of in:", names("member_of=in:"+agg2+","+"aaaaaaaa-0000-4000-8000-00000000000f", "1.3"), "h2"},
		{"member_of twice (AND)", names("member_of="+agg1+"&member_of="+agg2, "1.24"), "h2"},
		{"member_of twice before 1.24", names("member_of="+agg1+"&member_of="+agg2, "1.23"), "error placement.undefined_code"},
		{"member_of forbidden", names("member_of=!"+agg2, "1.32"), "h1,h3"},
		{"member_of !in:", names("member_of=!in:"+agg1+","+agg2, "1.32"), "h3"},
		{"member_of forbidden before 1.32", names("member_of=!"+agg2, "1.31"), "error placement.undefined_code"},
		{"member_of before 1.3", names("member_of="+agg1, "1.2"), "error "},
		{"member_of not a uuid", names("member_of=xyz", "1.3"), "error "},
		{"required", names("required=HW_CPU_X86_AVX2", "1.18"), "h2,h3"},
		{"required two", names("required=HW_CPU_X86_AVX2,CUSTOM_GOLD", "1.18"), "h3"},
		{"required forbidden", names("required=HW_CPU_X86_AVX2,!CUSTOM_GOLD", "1.22"), "h2"},
		{"required forbidden before 1.22", names("required=!CUSTOM_GOLD", "1.21"), "error "},
		{"required in:", names("required=in:CUSTOM_GOLD,COMPUTE_STATUS_DISABLED", "1.39"), "h3"},
		{"required in: before 1.39", names("required=in:CUSTOM_GOLD", "1.38"), "error placement.undefined_code"},
		{"required repeated (1.39 ANDs them)", names("required=HW_CPU_X86_AVX2&required=!CUSTOM_GOLD", "1.39"), "h2"},
		{"required repeated before 1.39 (last wins)", names("required=HW_CPU_X86_AVX2&required=!CUSTOM_GOLD", "1.38"), "h1,h2"},
		{"required unknown trait", names("required=CUSTOM_NONE", "1.18"), "error "},
		{"required before 1.18", names("required=CUSTOM_GOLD", "1.17"), "error "},
		{"resources and member_of", names("resources=MEMORY_MB:9000&member_of="+agg1, "1.4"), "h2"},
		{"candidates required", cands("resources=VCPU:1&required=HW_CPU_X86_AVX2", "1.17"), "h2,h3"},
		{"candidates required forbidden", cands("resources=VCPU:1&required=!HW_CPU_X86_AVX2", "1.22"), "h1"},
		{"candidates required in:", cands("resources=VCPU:1&required=in:CUSTOM_GOLD,CUSTOM_NONE", "1.39"), "error placement.undefined_code"},
		{"candidates member_of", cands("resources=VCPU:1&member_of="+agg1, "1.21"), "h1,h2"},
		{"candidates member_of forbidden", cands("resources=VCPU:1&member_of=!"+agg1, "1.32"), "h3"},
		{"candidates member_of before 1.21", cands("resources=VCPU:1&member_of="+agg1, "1.20"), "error "},
		{"candidates in_tree", cands("resources=VCPU:1&in_tree="+h2, "1.31"), "h2"},
		{"candidates root_required", cands("resources=VCPU:1&root_required=CUSTOM_GOLD", "1.35"), "h3"},
		{"candidates granular", cands("resources1=VCPU:1", "1.39"), "h1,h2,h3"},
		{"candidates unknown parameter", cands("resources=VCPU:1&bogus=1", "1.39"), "error placement.undefined_code"},
		{"candidates all filters", cands("resources=VCPU:1,MEMORY_MB:1024&member_of="+agg1+"&required=HW_CPU_X86_AVX2&limit=5", "1.39"), "h2"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.what, c.got, c.want)
		}
	}
}

func TestAllocationShapesAndConsumerTypes(t *testing.T) {
	srv, uuids := newServer(t)
	h2 := uuids["h2"]
	// Before 1.12: a list of {resource_provider: {uuid}, resources}.
	old := map[string]any{"allocations": []any{map[string]any{"resource_provider": map[string]any{"uuid": h2}, "resources": map[string]int{"VCPU": 2}}},
		"project_id": "p9", "user_id": "u9"}
	expect(t, srv, "PUT", "/placement/allocations/cc000004-0000-4000-8000-000000000000", "1.11", old, 204, "", nil)
	expect(t, srv, "PUT", "/placement/allocations/cc000005-0000-4000-8000-000000000000", "1.12", old, 400, "", nil)
	noProject := map[string]any{"allocations": old["allocations"]}
	expect(t, srv, "PUT", "/placement/allocations/cc000006-0000-4000-8000-000000000000", "1.7", noProject, 204, "", nil)
	expect(t, srv, "PUT", "/placement/allocations/cc000007-0000-4000-8000-000000000000", "1.8", noProject, 400, "", nil)
	var got struct {
		Allocations map[string]struct{ Resources map[string]int64 }
		ProjectID   string `json:"project_id"`
		Generation  int64  `json:"consumer_generation"`
		Type        string `json:"consumer_type"`
	}
	expect(t, srv, "GET", "/placement/allocations/cc000004-0000-4000-8000-000000000000", "1.38", nil, 200, "", &got)
	if got.Allocations[h2].Resources["VCPU"] != 2 || got.Type != "unknown" || got.ProjectID != "p9" || got.Generation != 1 {
		t.Errorf("an allocation written at 1.11, read at 1.38: %+v", got)
	}
	expect(t, srv, "GET", "/placement/allocations/cc000006-0000-4000-8000-000000000000", "1.12", nil, 200, "", &got)
	if got.ProjectID != "00000000-0000-0000-0000-000000000000" {
		t.Errorf("a consumer written at 1.7 has project %q", got.ProjectID)
	}

	// 1.28: consumer generations, with Placement's message.
	body := func(gen any, typ string) map[string]any {
		b := map[string]any{"allocations": map[string]any{h2: map[string]any{"resources": map[string]int{"VCPU": 1}}},
			"project_id": "p9", "user_id": "u9", "consumer_generation": gen}
		if typ != "" {
			b["consumer_type"] = typ
		}
		return b
	}
	code, msg := send(t, srv, "PUT", "/placement/allocations/cc000004-0000-4000-8000-000000000000", "1.28", body(nil, ""), nil)
	if code != 409 || msg != "placement.concurrent_update" {
		t.Errorf("null generation for an existing consumer: %d %s", code, msg)
	}
	expect(t, srv, "PUT", "/placement/allocations/cc000008-0000-4000-8000-000000000000", "1.28", body(3, ""), 409, "placement.concurrent_update", nil)
	expect(t, srv, "PUT", "/placement/allocations/cc000004-0000-4000-8000-000000000000", "1.28", body(1, ""), 204, "", nil)
	bad := body(nil, "")
	bad["allocations"] = map[string]any{"00000000-0000-0000-0000-0000000000ff": map[string]any{"resources": map[string]int{"VCPU": 1}}}
	expect(t, srv, "PUT", "/placement/allocations/cc000009-0000-4000-8000-000000000000", "1.28", bad, 400, "", nil)
	// 1.38: any [A-Z0-9_]+ type; an existing consumer's type is replaced.
	expect(t, srv, "PUT", "/placement/allocations/cc000004-0000-4000-8000-000000000000", "1.38", body(2, "lower"), 400, "", nil)
	expect(t, srv, "PUT", "/placement/allocations/cc000004-0000-4000-8000-000000000000", "1.38", body(2, "MIGRATION"), 204, "", nil)
	expect(t, srv, "PUT", "/placement/allocations/cc000008-0000-4000-8000-000000000000", "1.38", body(nil, "BAREMETAL_NODE"), 204, "", nil)
	// Written at 1.28 (no type) after that: the type stays.
	expect(t, srv, "PUT", "/placement/allocations/cc000004-0000-4000-8000-000000000000", "1.28", body(3, ""), 204, "", nil)
	expect(t, srv, "GET", "/placement/allocations/cc000004-0000-4000-8000-000000000000", "1.38", nil, 200, "", &got)
	if got.Type != "MIGRATION" || got.Generation != 4 {
		t.Errorf("type after an untyped write: %+v", got)
	}
	var use struct{ Usages map[string]map[string]int64 }
	get(t, srv, "/placement/usages?project_id=p9&consumer_type=all", "admin", "1.38", &use)
	if len(use.Usages) != 1 || use.Usages["all"]["consumer_count"] != 2 || use.Usages["all"]["VCPU"] != 2 {
		t.Errorf("usages of all types: %+v", use.Usages)
	}
	use.Usages = nil
	get(t, srv, "/placement/usages?project_id=p9&consumer_type=BAREMETAL_NODE", "admin", "1.38", &use)
	if len(use.Usages) != 1 || use.Usages["BAREMETAL_NODE"]["VCPU"] != 1 {
		t.Errorf("usages of one type: %+v", use.Usages)
	}
	expect(t, srv, "GET", "/placement/usages?project_id=p9&consumer_type=all", "1.37", nil, 400, "", nil)
}

// TestViewFollowsTheStore checks that what is written around the API (the
// scheduler's claims, an agent's inventories) shows in its very next
// answer, though lists and candidates are served from a cached view.
func TestViewFollowsTheStore(t *testing.T) {
	srv, uuids, st := newServerStore(t)
	ctx := context.Background()
	h3 := uuids["h3"]
	count := func() int {
		var ac struct {
			Requests []any `json:"allocation_requests"`
		}
		get(t, srv, "/placement/allocation_candidates?resources=MEMORY_MB:15872", "admin", "1.39", &ac)
		return len(ac.Requests)
	}
	if n := count(); n != 2 {
		t.Fatalf("hosts with all their memory free: %d, want 2", n)
	}
	if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "sched", ProjectID: "p", UserID: "u",
		Allocations: map[string]placement.Resources{h3: {placement.MemoryMB: 1}}}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Errorf("after the scheduler claimed 1 MB on h3: %d candidates, want 1", n)
	}
	p, err := st.CreateProvider(ctx, placement.Provider{UUID: "00000000-0000-0000-0000-0000000000a4", Name: "h4",
		Inventories: placement.Inventories{placement.MemoryMB: placement.NewInventory(32768)}})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Errorf("after an agent registered h4: %d candidates, want 2", n)
	}
	if _, err := st.SetProviderAggregates(ctx, p.UUID, nil, []string{agg1}); err != nil {
		t.Fatal(err)
	}
	var list struct {
		ResourceProviders []providerOut `json:"resource_providers"`
	}
	get(t, srv, "/placement/resource_providers?member_of="+agg1, "admin", "1.3", &list)
	if len(list.ResourceProviders) != 1 || list.ResourceProviders[0].Name != "h4" {
		t.Errorf("member_of after keel mirrored an aggregate: %+v", list.ResourceProviders)
	}
	if err := st.DeleteProvider(ctx, p.UUID); err != nil {
		t.Fatal(err)
	}
	expect(t, srv, "GET", "/placement/resource_providers/"+p.UUID, "1.39", nil, 404, "", nil)
}

// TestCandidateShapes checks the hand-written candidates body at every
// microversion: valid JSON, the allocation shape of its version, the
// summary fields of its version, and summaries that follow usage.
func TestCandidateShapes(t *testing.T) {
	srv, uuids, st := newServerStore(t)
	h1, h3 := uuids["h1"], uuids["h3"]
	for minor := 10; minor <= 39; minor++ {
		v := fmt.Sprintf("1.%d", minor)
		var ac struct {
			Requests  []map[string]json.RawMessage `json:"allocation_requests"`
			Summaries map[string]map[string]any    `json:"provider_summaries"`
		}
		if code, msg := send(t, srv, "GET", "/placement/allocation_candidates?resources=VCPU:1", v, nil, &ac); code != 200 {
			t.Fatalf("%s: %d %s", v, code, msg)
		}
		if len(ac.Requests) != 3 || len(ac.Summaries) != 3 {
			t.Fatalf("%s: %d requests, %d summaries", v, len(ac.Requests), len(ac.Summaries))
		}
		isList := strings.HasPrefix(string(ac.Requests[0]["allocations"]), "[")
		_, mappings := ac.Requests[0]["mappings"]
		res := ac.Summaries[h1]["resources"].(map[string]any)
		_, traits := ac.Summaries[h1]["traits"]
		root, hasRoot := ac.Summaries[h1]["root_provider_uuid"]
		if isList != (minor < 12) || mappings != (minor >= 34) || (len(res) == 2) != (minor >= 27) ||
			traits != (minor >= 17) || hasRoot != (minor >= 29) || (hasRoot && root != h1) {
			t.Errorf("%s: list=%v mappings=%v classes=%d traits=%v root=%v", v, isList, mappings, len(res), traits, root)
		}
	}
	used := func() float64 {
		var ac struct {
			Summaries map[string]struct {
				Resources map[string]struct{ Used float64 }
			} `json:"provider_summaries"`
		}
		send(t, srv, "GET", "/placement/allocation_candidates?resources=VCPU:1", "1.39", nil, &ac)
		return ac.Summaries[h3].Resources["VCPU"].Used
	}
	if u := used(); u != 0 {
		t.Fatalf("h3 VCPU used = %v", u)
	}
	if _, err := st.WriteAllocations(context.Background(), placement.AllocationWrite{ConsumerUUID: "c9", ProjectID: "p", UserID: "u",
		Allocations: map[string]placement.Resources{h3: {placement.VCPU: 3}}}); err != nil {
		t.Fatal(err)
	}
	if u := used(); u != 3 {
		t.Errorf("h3 VCPU used after a claim = %v, want 3", u)
	}
	// A child's summary names its root, which follows its parent's moves.
	var child providerOut
	expect(t, srv, "POST", "/placement/resource_providers", "1.20", map[string]any{"name": "c", "parent_provider_uuid": h3}, 200, "", &child)
	expect(t, srv, "PUT", "/placement/resource_providers/"+child.UUID+"/inventories", "1.39",
		map[string]any{"resource_provider_generation": 0, "inventories": map[string]any{"VCPU": map[string]any{"total": 4}}}, 200, "", nil)
	rootOf := func() any {
		var ac struct {
			Summaries map[string]map[string]any `json:"provider_summaries"`
		}
		send(t, srv, "GET", "/placement/allocation_candidates?resources=VCPU:1", "1.39", nil, &ac)
		return ac.Summaries[child.UUID]["root_provider_uuid"]
	}
	if r := rootOf(); r != h3 {
		t.Errorf("child's root = %v, want %s", r, h3)
	}
	expect(t, srv, "PUT", "/placement/resource_providers/"+h3, "1.37", map[string]any{"name": "h3", "parent_provider_uuid": h1}, 200, "", nil)
	if r := rootOf(); r != h1 {
		t.Errorf("child's root after its parent moved under h1 = %v, want %s", r, h1)
	}
}

// TestOddBodiesNeverFail5xx sends malformed and mistyped bodies to every
// write of the API at several microversions: each is refused (or, where
// Placement would take it, accepted), never a server error.
func TestOddBodiesNeverFail5xx(t *testing.T) {
	srv, uuids := newServer(t)
	h2 := uuids["h2"]
	paths := []string{
		"/placement/resource_providers",
		"/placement/resource_providers/" + h2,
		"/placement/resource_providers/" + h2 + "/inventories",
		"/placement/resource_providers/" + h2 + "/inventories/DISK_GB",
		"/placement/resource_providers/" + h2 + "/traits",
		"/placement/resource_providers/" + h2 + "/aggregates",
		"/placement/resource_classes",
		"/placement/resource_classes/CUSTOM_X",
		"/placement/traits/CUSTOM_X",
		"/placement/allocations",
		"/placement/allocations/cc000010-0000-4000-8000-000000000000",
	}
	bodies := []any{nil, "x", 7, []any{}, []any{1, "x"}, map[string]any{},
		map[string]any{"name": 5, "traits": []any{1}, "aggregates": "x", "resource_provider_generation": "1"},
		map[string]any{"allocations": []any{map[string]any{"resource_provider": nil}}, "inventories": map[string]any{"VCPU": "x"}},
		map[string]any{"allocations": map[string]any{h2: map[string]any{"resources": map[string]any{"VCPU": -1}}}, "consumer_generation": nil, "project_id": "p", "user_id": "u", "consumer_type": ""},
		map[string]any{"c6": map[string]any{"allocations": 3}},
	}
	for _, path := range paths {
		for _, method := range []string{"POST", "PUT", "DELETE"} {
			for _, v := range []string{"1.0", "1.11", "1.19", "1.39"} {
				for _, b := range bodies {
					if code, msg := send(t, srv, method, path, v, b, nil); code >= 500 {
						t.Errorf("%s %s at %s with %v: %d %s", method, path, v, b, code, msg)
					}
				}
			}
		}
	}
}

// TestViewKeepsOrderAcrossOtherChanges: a change that names no provider (a
// host record, a service heartbeat) between provider changes must leave
// the view whole — every provider once, in name order.
func TestViewKeepsOrderAcrossOtherChanges(t *testing.T) {
	srv, uuids, st := newServerStore(t)
	ctx := context.Background()
	names := func(query string) string {
		var list struct {
			ResourceProviders []providerOut `json:"resource_providers"`
		}
		get(t, srv, "/placement/resource_providers?"+query, "admin", "1.39", &list)
		var out []string
		for _, rp := range list.ResourceProviders {
			out = append(out, rp.Name)
		}
		return strings.Join(out, ",")
	}
	for i, h := range []string{"h3", "h2", "h1"} {
		if got := names(""); got != "h1,h2,h3" {
			t.Fatalf("step %d: providers %q", i, got)
		}
		if err := st.PutHostRecord(ctx, records.HostRecord{Host: h}); err != nil {
			t.Fatal(err)
		}
		if got := names(""); got != "h1,h2,h3" {
			t.Fatalf("step %d, after a host record: providers %q", i, got)
		}
		p, err := st.GetProvider(ctx, uuids[h])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.SetProviderTraits(ctx, p.UUID, p.Generation, []string{"HW_CPU_X86_AVX2"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := names("required=HW_CPU_X86_AVX2"); got != "h1,h2,h3" {
		t.Errorf("providers with the trait: %q", got)
	}
}
