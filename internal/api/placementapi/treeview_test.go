package placementapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"keel/internal/api/placementapi"
	"keel/internal/placement"
	"keel/internal/store/memory"
)

// TestTreeCandidatesFollowClaims: over provider trees and sharing pools,
// the answer a long-lived server gives after each claim, inventory
// change, trait change and release (its view and forest updated from the
// change stream) is byte for byte the one a server started afresh on the
// same store gives.
func TestTreeCandidatesFollowClaims(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	vcpu := placement.NewInventory(4)
	for s := range 2 {
		agg := fmt.Sprintf("a66a66a6-0000-4000-8000-%012d", s)
		if _, err := st.CreateProvider(ctx, placement.Provider{UUID: fmt.Sprintf("5ba5ed00-0000-4000-8000-%012d", s), Name: fmt.Sprintf("shared%d", s),
			Inventories: placement.Inventories{placement.DiskGB: placement.NewInventory(30)},
			Traits:      []string{placement.SharesViaAggregate}, Aggregates: []string{agg}}); err != nil {
			t.Fatal(err)
		}
		for i := s * 3; i < s*3+3; i++ {
			root := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
			if _, err := st.CreateProvider(ctx, placement.Provider{UUID: root, Name: fmt.Sprintf("cn%d", i), Inventories: placement.Inventories{}, Aggregates: []string{agg}}); err != nil {
				t.Fatal(err)
			}
			for n := range 2 {
				if _, err := st.CreateProvider(ctx, placement.Provider{UUID: fmt.Sprintf("%08x-0000-4000-8000-00000000000%d", i, n+1), Name: fmt.Sprintf("cn%d-numa%d", i, n),
					ParentUUID: root, Inventories: placement.Inventories{placement.VCPU: vcpu, placement.MemoryMB: placement.NewInventory(4096)}}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	long := httptest.NewServer(placementapi.New(st, func(*http.Request) bool { return true }))
	defer long.Close()
	queries := []string{
		"resources1=VCPU:2,MEMORY_MB:1024&resources2=DISK_GB:10&group_policy=none",
		"resources=VCPU:3,DISK_GB:5",
		"resources=VCPU:1&required=HW_CPU_X86_AVX2",
	}
	answer := func(srv *httptest.Server, q string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/placement/allocation_candidates?"+q, nil)
		req.Header.Set("OpenStack-API-Version", "placement 1.39")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", q, resp.StatusCode, b)
		}
		return string(b)
	}
	check := func(step string) {
		t.Helper()
		fresh := httptest.NewServer(placementapi.New(st, func(*http.Request) bool { return true }))
		defer fresh.Close()
		for _, q := range queries {
			if got, want := answer(long, q), answer(fresh, q); got != want {
				t.Fatalf("after %s, %s:\n long-lived %s\n fresh      %s", step, q, got, want)
			}
		}
	}
	check("loading")
	cell := func(i, n int) string { return fmt.Sprintf("%08x-0000-4000-8000-00000000000%d", i, n) }
	pool := "5ba5ed00-0000-4000-8000-000000000000"
	for k := range 8 {
		if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: fmt.Sprintf("c%d", k), ProjectID: "p", UserID: "u",
			Allocations: map[string]placement.Resources{cell(k%6, k%2+1): {placement.VCPU: 2, placement.MemoryMB: 1024}, pool: {placement.DiskGB: 10}}}); err != nil {
			if placement.IsCapacity(err) {
				continue // the pool is full: the answers say so
			}
			t.Fatal(err)
		}
		check(fmt.Sprintf("claim %d", k))
	}
	p, err := st.GetProvider(ctx, cell(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetInventories(ctx, p.UUID, p.Generation, placement.Inventories{placement.VCPU: placement.NewInventory(16), placement.MemoryMB: placement.NewInventory(4096)}); err != nil {
		t.Fatal(err)
	}
	check("an inventory change")
	p, err = st.GetProvider(ctx, cell(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetProviderTraits(ctx, p.UUID, p.Generation, []string{"HW_CPU_X86_AVX2"}); err != nil {
		t.Fatal(err)
	}
	check("a trait change")
	if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c0", AnyConsumerGeneration: true}); err != nil {
		t.Fatal(err)
	}
	check("a release")
}
