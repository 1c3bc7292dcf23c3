package storetest

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"

	"keel/internal/store"
)

var quotaTests = []subtest{
	{"QuotaLimits", testQuotaLimits},
	{"QuotaLimitsConcurrentSets", testQuotaLimitsConcurrentSets},
}

// testQuotaLimits: none set reads as empty; a set merges into what was
// there; projects and the default class ("") are separate; a delete
// drops the project's own and is not an error twice.
func testQuotaLimits(t *testing.T, s store.Store) {
	ctx := context.Background()
	got, err := s.GetQuotaLimits(ctx, "p1")
	if err != nil || len(got) != 0 {
		t.Fatalf("limits of a project with none: %v, %v", got, err)
	}
	if _, err := s.SetQuotaLimits(ctx, "p1", map[string]int64{"cores": 4, "instances": 2}); err != nil {
		t.Fatal(err)
	}
	all, err := s.SetQuotaLimits(ctx, "p1", map[string]int64{"cores": 8, "ram": -1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"cores": 8, "instances": 2, "ram": -1}
	if !maps.Equal(all, want) {
		t.Fatalf("set returned %v, want %v", all, want)
	}
	if got, _ := s.GetQuotaLimits(ctx, "p1"); !maps.Equal(got, want) {
		t.Fatalf("get %v, want %v", got, want)
	}
	if _, err := s.SetQuotaLimits(ctx, "", map[string]int64{"instances": 50}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetQuotaLimits(ctx, ""); !maps.Equal(got, map[string]int64{"instances": 50}) {
		t.Fatalf("default class %v", got)
	}
	if got, _ := s.GetQuotaLimits(ctx, "p2"); len(got) != 0 {
		t.Fatalf("p2 has %v", got)
	}
	for range 2 {
		if err := s.DeleteQuotaLimits(ctx, "p1"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.GetQuotaLimits(ctx, "p1"); len(got) != 0 {
		t.Fatalf("after delete: %v", got)
	}
	if got, _ := s.GetQuotaLimits(ctx, ""); got["instances"] != 50 {
		t.Fatalf("deleting p1 changed the default class: %v", got)
	}
}

// testQuotaLimitsConcurrentSets: sets of different names at once all stay.
func testQuotaLimitsConcurrentSets(t *testing.T, s store.Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	const n = 8
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.SetQuotaLimits(ctx, "p", map[string]int64{fmt.Sprintf("r%d", i): int64(i)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := s.GetQuotaLimits(ctx, "p")
	if err != nil || len(got) != n {
		t.Fatalf("after %d concurrent sets: %v, %v", n, got, err)
	}
}
