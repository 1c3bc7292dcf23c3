package audit

import (
	"slices"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// TestWhere: a host's tree is its own, a sharing provider belongs to the
// hosts it shares an aggregate with (through any provider of their tree)
// and to no other, and a provider nobody listed is on no host.
func TestWhere(t *testing.T) {
	prov := func(uuid, name, parent string, aggs []string, traits ...string) store.ProviderSummary {
		return store.ProviderSummary{Provider: placement.Provider{UUID: uuid, Name: name, ParentUUID: parent, Aggregates: aggs, Traits: traits}}
	}
	w := Locate([]store.ProviderSummary{
		prov("rp-h1", "h1", "", nil),
		prov("rp-h1-numa", "h1_numa", "rp-h1", []string{"agg-a"}), // the tree joins agg-a through a child
		prov("rp-h2", "h2", "", []string{"agg-b"}),
		prov("rp-pool-a", "pool-a", "", []string{"agg-a"}, placement.SharesViaAggregate),
		prov("rp-pool-b", "pool-b", "", []string{"agg-b"}, placement.SharesViaAggregate),
		prov("rp-pool-none", "pool-none", "", nil, placement.SharesViaAggregate),
	})
	one := placement.Resources{placement.DiskGB: 1}
	small := records.Flavor{VCPUs: 1, RAMMB: 512, DiskGB: 1}
	cases := []struct {
		name   string
		allocs map[string]placement.Resources
		host   string
		on     bool
		hosts  []string
	}{
		{"root and child", map[string]placement.Resources{"rp-h1": one, "rp-h1-numa": one}, "h1", true, []string{"h1"}},
		{"a pool sharing through a child's aggregate", map[string]placement.Resources{"rp-h1": one, "rp-pool-a": one}, "h1", true, []string{"h1"}},
		{"a pool of another aggregate", map[string]placement.Resources{"rp-h1": one, "rp-pool-b": one}, "h1", false, []string{"h1"}},
		{"a pool in no aggregate", map[string]placement.Resources{"rp-h2": one, "rp-pool-none": one}, "h2", false, []string{"h2"}},
		{"another host", map[string]placement.Resources{"rp-h1": one, "rp-h2": one}, "h1", false, []string{"h1", "h2"}},
		{"an unknown provider", map[string]placement.Resources{"rp-h1": one, "rp-gone": one}, "h1", false, []string{"h1", "rp-gone"}},
	}
	for _, c := range cases {
		if got := w.OnHost(c.allocs, c.host); got != c.on {
			t.Errorf("%s: OnHost(%s) = %v, want %v", c.name, c.host, got, c.on)
		}
		if got := w.Hosts(c.allocs); !slices.Equal(got, c.hosts) {
			t.Errorf("%s: Hosts = %v, want %v", c.name, got, c.hosts)
		}
	}
	exact := map[string]placement.Resources{"rp-h1": {placement.VCPU: 1, placement.MemoryMB: 512}, "rp-pool-a": one}
	if !w.HoldsFlavor(exact, "h1", small) {
		t.Errorf("HoldsFlavor: %v on h1 and its pool is small's request", exact)
	}
	if w.HoldsFlavor(exact, "h2", small) {
		t.Errorf("HoldsFlavor: %v is not on h2", exact)
	}
	short := map[string]placement.Resources{"rp-h1": {placement.VCPU: 1, placement.MemoryMB: 512}}
	if w.HoldsFlavor(short, "h1", small) || w.HoldsFlavor(nil, "h1", small) {
		t.Errorf("HoldsFlavor: less than the flavor, or nothing, is not the flavor")
	}
}
