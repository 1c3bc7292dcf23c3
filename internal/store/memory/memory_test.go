package memory_test

import (
	"context"
	"reflect"
	"testing"

	"keel/internal/placement"
	"keel/internal/store"
	"keel/internal/store/memory"
	"keel/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
}

// ConsumerHeadersOn lists what ConsumersOn lists, in its order, without
// the allocations; a consumer on two providers is listed on both.
func TestConsumerHeadersOnIsConsumersOnWithoutAllocations(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	for _, p := range []string{"rp-1", "rp-2"} {
		if _, err := s.CreateProvider(ctx, placement.Provider{UUID: p, Name: p, Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range []struct {
		uuid string
		typ  placement.ConsumerType
		on   []string
	}{{"c", placement.ConsumerInstance, []string{"rp-1"}}, {"a", placement.ConsumerMigration, []string{"rp-1", "rp-2"}}, {"b", placement.ConsumerInstance, []string{"rp-2"}}} {
		allocs := map[string]placement.Resources{}
		for _, p := range c.on {
			allocs[p] = placement.Resources{placement.VCPU: int64(i + 1)}
		}
		if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: c.uuid, Type: c.typ, ProjectID: "p", UserID: "u", Allocations: allocs}); err != nil {
			t.Fatal(err)
		}
	}
	// a second write bumps a's generation
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "a", Type: placement.ConsumerMigration, AnyConsumerGeneration: true,
		Allocations: map[string]placement.Resources{"rp-1": {placement.VCPU: 5}, "rp-2": {placement.VCPU: 5}}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"rp-1", "rp-2", "rp-none"} {
		full, err := s.ConsumersOn(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		heads, err := s.ConsumerHeadersOn(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]placement.Consumer, len(full))
		for i, c := range full {
			c.Allocations = nil
			want[i] = c
		}
		if !reflect.DeepEqual(heads, want) {
			t.Errorf("%s: headers %+v, want %+v", p, heads, want)
		}
		if p == "rp-1" && (len(heads) != 2 || heads[0].UUID != "a" || heads[0].Generation != full[0].Generation || heads[0].Type != placement.ConsumerMigration) {
			t.Errorf("rp-1: headers %+v, want a (migration, its generation) then c", heads)
		}
	}
}
