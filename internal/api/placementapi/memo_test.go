package placementapi_test

import (
	"context"
	"testing"

	"keel/internal/placement"
)

// candidatesOut is what these tests read of GET /allocation_candidates.
type candidatesOut struct {
	Requests []struct {
		Allocations map[string]struct {
			Resources map[string]int64 `json:"resources"`
		} `json:"allocations"`
	} `json:"allocation_requests"`
	Summaries map[string]struct {
		Resources map[string]struct {
			Capacity int64 `json:"capacity"`
			Used     int64 `json:"used"`
		} `json:"resources"`
		Root *string `json:"root_provider_uuid"`
	} `json:"provider_summaries"`
}

// TestCandidatesMemoFollowsChanges checks what each provider's entry
// remembers between candidates requests (its fit, its allocation request
// and summary): a claim shows in the next answer's "used", requests that
// differ in resources or microversion never get another's parts, and a
// child's root follows a move of its parent.
func TestCandidatesMemoFollowsChanges(t *testing.T) {
	srv, uuids, st := newServerStore(t)
	ctx := context.Background()
	h1, h2 := uuids["h1"], uuids["h2"]
	const q = "/placement/allocation_candidates?resources=VCPU:2,MEMORY_MB:1024"
	var a candidatesOut
	get(t, srv, q, "admin", "1.36", &a)
	if len(a.Requests) != 3 || a.Summaries[h2].Resources["VCPU"].Used != 0 || a.Summaries[h1].Resources["VCPU"].Used != 4 {
		t.Fatalf("first answer: %+v", a)
	}
	// A claim around the API, as keel's scheduler makes them.
	for _, c := range []string{"s1", "s2"} {
		if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: c, ProjectID: "p", UserID: "u",
			Allocations: map[string]placement.Resources{h2: {placement.VCPU: 7, placement.MemoryMB: 512}}}); err != nil {
			t.Fatal(err)
		}
	}
	a = candidatesOut{}
	get(t, srv, q, "admin", "1.36", &a)
	if len(a.Requests) != 3 || a.Summaries[h2].Resources["VCPU"].Used != 14 || a.Summaries[h2].Resources["MEMORY_MB"].Used != 1024 {
		t.Fatalf("after claiming on h2: %+v", a.Summaries[h2])
	}
	// Another request on the same entries: h2 has 2 VCPU left, not 3.
	var b candidatesOut
	get(t, srv, "/placement/allocation_candidates?resources=VCPU:3", "admin", "1.36", &b)
	if len(b.Requests) != 2 || b.Requests[0].Allocations[h1].Resources["VCPU"] != 3 {
		t.Fatalf("VCPU:3 after the claim: %+v", b.Requests)
	}
	if _, ok := b.Summaries[h2]; ok {
		t.Errorf("h2 cannot take VCPU:3 but is summarised")
	}
	// Before 1.27 a summary lists only the requested classes.
	var c candidatesOut
	get(t, srv, "/placement/allocation_candidates?resources=VCPU:1", "admin", "1.26", &c)
	if s := c.Summaries[h1]; len(s.Resources) != 1 || s.Resources["VCPU"].Used != 4 {
		t.Errorf("1.26 summary of h1: %+v", s)
	}
	// The first request again, its parts rebuilt for every entry.
	a = candidatesOut{}
	get(t, srv, q, "admin", "1.36", &a)
	if len(a.Requests) != 3 || len(a.Summaries[h1].Resources) != 2 || a.Summaries[h2].Resources["VCPU"].Used != 14 {
		t.Fatalf("the first request again: %+v", a.Summaries)
	}

	// A child under h3, then h3 under h1: the child's root moves to h1
	// although the child itself never changed.
	h3 := uuids["h3"]
	var child providerOut
	expect(t, srv, "POST", "/placement/resource_providers", "1.20", map[string]any{"name": "h3-numa0", "parent_provider_uuid": h3}, 200, "", &child)
	expect(t, srv, "PUT", "/placement/resource_providers/"+child.UUID+"/inventories", "1.20",
		map[string]any{"resource_provider_generation": child.Generation, "inventories": map[string]any{"VCPU": map[string]any{"total": 4}}}, 200, "", nil)
	const qc = "/placement/allocation_candidates?resources=VCPU:4"
	var d candidatesOut
	get(t, srv, qc, "admin", "1.36", &d)
	if s, ok := d.Summaries[child.UUID]; !ok || s.Root == nil || *s.Root != h3 {
		t.Fatalf("child under h3: %+v", d.Summaries[child.UUID])
	}
	var h3p providerOut
	get(t, srv, "/placement/resource_providers/"+h3, "admin", "1.14", &h3p)
	expect(t, srv, "PUT", "/placement/resource_providers/"+h3, "1.14", map[string]any{"name": "h3", "parent_provider_uuid": h1}, 200, "", nil)
	d = candidatesOut{}
	get(t, srv, qc, "admin", "1.36", &d)
	if s, ok := d.Summaries[child.UUID]; !ok || s.Root == nil || *s.Root != h1 {
		t.Errorf("child after h3 moved under h1: root %v, want %s", d.Summaries[child.UUID].Root, h1)
	}
}
