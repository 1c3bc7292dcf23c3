package store

import (
	"slices"
	"sort"

	"keel/internal/placement"
)

// HostTree is one host as its provider tree adds up: the root provider
// and, per resource class, the sums over the root and every descendant
// (NUMA cells, PFs, GPUs). Sharing pools are not part of any host's
// tree. Capacity is (total − reserved) × allocation_ratio, as Placement
// computes it.
type HostTree struct {
	Root           ProviderSummary
	Capacity, Used map[placement.ResourceClass]int64
	// Nested lists the classes some descendant contributes to.
	Nested map[placement.ResourceClass]bool
}

// IsHost reports whether a provider is a host's root: not a child, not a
// sharing pool.
func IsHost(p placement.Provider) bool {
	_, pool := slices.BinarySearch(p.Traits, placement.SharesViaAggregate)
	return p.ParentUUID == "" && !pool
}

// HostTrees folds every host's tree out of sums (every provider, in any
// order), sorted by the root's name. Every spread figure keel reports —
// the web view's, keel sim's — is over these, one per host.
func HostTrees(sums []ProviderSummary) []HostTree {
	children := map[string][]int{}
	for i, p := range sums {
		if p.ParentUUID != "" {
			children[p.ParentUUID] = append(children[p.ParentUUID], i)
		}
	}
	var out []HostTree
	for _, p := range sums {
		if !IsHost(p.Provider) {
			continue
		}
		h := HostTree{Root: p, Capacity: map[placement.ResourceClass]int64{},
			Used: map[placement.ResourceClass]int64{}, Nested: map[placement.ResourceClass]bool{}}
		h.fold(sums, children, p, true)
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Root.Name < out[j].Root.Name })
	return out
}

func (h *HostTree) fold(sums []ProviderSummary, children map[string][]int, p ProviderSummary, root bool) {
	for rc, inv := range p.Inventories {
		h.Capacity[rc] += inv.Capacity()
		h.Used[rc] += p.Usage[rc]
		if !root {
			h.Nested[rc] = true
		}
	}
	for _, c := range children[p.UUID] {
		h.fold(sums, children, sums[c], false)
	}
}
