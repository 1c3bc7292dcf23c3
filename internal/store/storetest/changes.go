package storetest

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

var changeTests = []subtest{
	{"Empty", testChangesEmpty},
	{"Kinds", testChangeKinds},
	{"Limit", testChangesLimit},
}

const noLimit = 1 << 20

func testChangesEmpty(t *testing.T, s store.Store) {
	ctx := context.Background()
	last, err := s.LastChange(ctx)
	if err != nil || last != 0 {
		t.Errorf("LastChange on an empty store = %d, %v; want 0", last, err)
	}
	got, err := s.Changes(ctx, 0, noLimit)
	if err != nil || len(got) != 0 {
		t.Errorf("Changes on an empty store = %v, %v; want none", got, err)
	}
}

// changesSince reads every change after since and checks the sequence
// numbers increase strictly from above since and end at LastChange.
func changesSince(t *testing.T, s store.Store, since int64) []store.Change {
	t.Helper()
	ctx := context.Background()
	got, err := s.Changes(ctx, since, noLimit)
	if err != nil {
		t.Fatalf("Changes(%d): %v", since, err)
	}
	prev := since
	for _, c := range got {
		if c.Seq <= prev {
			t.Errorf("change %+v: Seq not above %d", c, prev)
		}
		prev = c.Seq
	}
	last, err := s.LastChange(ctx)
	if err != nil {
		t.Fatalf("LastChange: %v", err)
	}
	if last != prev {
		t.Errorf("LastChange = %d, but the last change read has Seq %d", last, prev)
	}
	return got
}

// keysOf renders changes as sorted "kind:key" strings.
func keysOf(cs []store.Change) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s:%s", c.Kind, c.Key))
	}
	sort.Strings(out)
	return out
}

// expectChanges runs op and checks that it appended exactly want (as
// "kind:key", in any order).
func expectChanges(t *testing.T, s store.Store, what string, op func() []string) {
	t.Helper()
	before, err := s.LastChange(context.Background())
	if err != nil {
		t.Fatalf("LastChange: %v", err)
	}
	want := sortedStrings(op())
	if got := keysOf(changesSince(t, s, before)); !equalStrings(got, want) {
		t.Errorf("%s appended changes %v, want %v", what, got, want)
	}
}

func provKey(u string) string { return string(store.ChangeProvider) + ":" + u }

func testChangeKinds(t *testing.T, s store.Store) {
	ctx := context.Background()
	var a, b placement.Provider
	expectChanges(t, s, "CreateProvider", func() []string {
		a = mustCreateProvider(t, s, 1, stdInventories())
		b = mustCreateProvider(t, s, 2, nil)
		return []string{provKey(a.UUID), provKey(b.UUID)}
	})
	expectChanges(t, s, "SetInventories", func() []string {
		if _, err := s.SetInventories(ctx, b.UUID, 0, stdInventories()); err != nil {
			t.Fatalf("SetInventories: %v", err)
		}
		return []string{provKey(b.UUID)}
	})
	expectChanges(t, s, "refused SetInventories", func() []string {
		if _, err := s.SetInventories(ctx, b.UUID, 0, stdInventories()); err == nil {
			t.Fatal("stale SetInventories accepted")
		}
		return nil
	})
	expectChanges(t, s, "claim on two providers", func() []string {
		plan := mustClaim(t, s, consumerUUID(1), map[string]placement.Resources{
			a.UUID: {placement.VCPU: 1}, b.UUID: {placement.DiskGB: 1},
		})
		if len(plan.Providers) != 2 {
			t.Errorf("plan.Providers = %v, want two", plan.Providers)
		}
		return []string{provKey(a.UUID), provKey(b.UUID)}
	})
	expectChanges(t, s, "move off one provider", func() []string {
		plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{
			ConsumerUUID: consumerUUID(1), ConsumerGeneration: gen(1),
			Allocations: map[string]placement.Resources{b.UUID: {placement.DiskGB: 1, placement.VCPU: 1}},
		})
		if err != nil {
			t.Fatalf("move: %v", err)
		}
		var want []string
		for p := range plan.Providers {
			want = append(want, provKey(p))
		}
		if len(want) != 2 {
			t.Errorf("plan.Providers = %v, want both providers", plan.Providers)
		}
		return want
	})
	expectChanges(t, s, "refused claim", func() []string {
		if _, err := claim(s, consumerUUID(2), map[string]placement.Resources{a.UUID: {placement.VCPU: 1000}}); err == nil {
			t.Fatal("oversized claim accepted")
		}
		return nil
	})
	expectChanges(t, s, "PutHostRecord", func() []string {
		if err := s.PutHostRecord(ctx, hostRecord("cmp-1", 1)); err != nil {
			t.Fatalf("PutHostRecord: %v", err)
		}
		return []string{string(store.ChangeHost) + ":cmp-1"}
	})
	expectChanges(t, s, "PutService", func() []string {
		if err := s.PutService(ctx, records.Service{Host: "cmp-2", Binary: "keel-compute"}); err != nil {
			t.Fatalf("PutService: %v", err)
		}
		return []string{string(store.ChangeService) + ":cmp-2"}
	})
	expectChanges(t, s, "deleting the consumer and provider a", func() []string {
		plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumerUUID(1), ConsumerGeneration: gen(2)})
		if err != nil {
			t.Fatalf("deleting consumer: %v", err)
		}
		if len(plan.Providers) != 1 {
			t.Errorf("plan.Providers = %v, want only b", plan.Providers)
		}
		if err := s.DeleteProvider(ctx, a.UUID); err != nil {
			t.Fatalf("DeleteProvider: %v", err)
		}
		return []string{provKey(b.UUID), provKey(a.UUID)}
	})

	// The whole stream from the start reads back in order.
	all := changesSince(t, s, 0)
	if len(all) != 11 {
		t.Errorf("stream holds %d changes, want 11: %v", len(all), all)
	}
	if last, _ := s.LastChange(ctx); len(all) > 0 && all[len(all)-1].Seq != last {
		t.Errorf("LastChange %d is not the newest Seq %d", last, all[len(all)-1].Seq)
	}
	if got, err := s.Changes(ctx, all[len(all)-1].Seq, noLimit); err != nil || len(got) != 0 {
		t.Errorf("Changes(LastChange) = %v, %v; want none", got, err)
	}
	if got, err := s.Changes(ctx, all[len(all)-1].Seq+100, noLimit); err != nil || len(got) != 0 {
		t.Errorf("Changes(beyond LastChange) = %v, %v; want none", got, err)
	}
}

func testChangesLimit(t *testing.T, s store.Store) {
	ctx := context.Background()
	for i := 0; i < 7; i++ {
		if err := s.PutHostRecord(ctx, hostRecord(fmt.Sprintf("cmp-%d", i), int64(i))); err != nil {
			t.Fatalf("PutHostRecord: %v", err)
		}
	}
	all := changesSince(t, s, 0)
	if len(all) != 7 {
		t.Fatalf("stream holds %d changes, want 7", len(all))
	}
	for i, c := range all {
		if c.Kind != store.ChangeHost || c.Key != fmt.Sprintf("cmp-%d", i) {
			t.Errorf("change %d = %+v, want host cmp-%d (in write order)", i, c, i)
		}
	}

	first, err := s.Changes(ctx, 0, 3)
	if err != nil {
		t.Fatalf("Changes(0, 3): %v", err)
	}
	if len(first) != 3 || first[0] != all[0] || first[2] != all[2] {
		t.Errorf("Changes(0, 3) = %v, want %v", first, all[:3])
	}
	mid, err := s.Changes(ctx, all[2].Seq, 2)
	if err != nil {
		t.Fatalf("Changes(%d, 2): %v", all[2].Seq, err)
	}
	if len(mid) != 2 || mid[0] != all[3] || mid[1] != all[4] {
		t.Errorf("Changes(%d, 2) = %v, want %v", all[2].Seq, mid, all[3:5])
	}
	// Paging one at a time visits every change exactly once.
	var paged []store.Change
	for since := int64(0); ; {
		page, err := s.Changes(ctx, since, 1)
		if err != nil {
			t.Fatalf("Changes(%d, 1): %v", since, err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 1 {
			t.Fatalf("Changes(%d, 1) returned %d entries", since, len(page))
		}
		paged = append(paged, page[0])
		since = page[0].Seq
		if len(paged) > len(all) {
			t.Fatal("paging does not end")
		}
	}
	if fmt.Sprint(paged) != fmt.Sprint(all) {
		t.Errorf("paged changes %v, want %v", paged, all)
	}
}
