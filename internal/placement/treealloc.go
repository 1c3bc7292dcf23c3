package placement

import (
	"slices"
	"strings"
)

// TreeProvider is a provider as TreeForest takes it: its parent named by
// UUID ("" for a root).
type TreeProvider struct {
	UUID        string
	ParentUUID  string
	Inventories Inventories
	Usage       Resources
	Traits      []string
	Aggregates  []string
}

// TreeForest makes the Forest of ps in the order keel's scheduler
// searches it — by UUID, sharing providers last — so that a tree's first
// candidate (FirstInTree) is the one the scheduler claims: the host's
// own providers before a pool. A provider whose parent is not in ps is
// a root.
func TreeForest(ps []TreeProvider) *Forest {
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	shares := func(p TreeProvider) bool { return slices.Contains(p.Traits, SharesViaAggregate) }
	slices.SortFunc(order, func(a, b int) int {
		if sa, sb := shares(ps[a]), shares(ps[b]); sa != sb {
			if sa {
				return 1
			}
			return -1
		}
		return strings.Compare(ps[a].UUID, ps[b].UUID)
	})
	pos := make(map[string]int, len(ps))
	for i, j := range order {
		pos[ps[j].UUID] = i
	}
	out := make([]CandidateProvider, len(ps))
	for i, j := range order {
		p := ps[j]
		parent, ok := pos[p.ParentUUID]
		if p.ParentUUID == "" || !ok {
			parent = -1
		}
		out[i] = CandidateProvider{UUID: p.UUID, Parent: parent, Inventories: p.Inventories, Usage: p.Usage,
			Traits: sortedCopy(p.Traits), Aggregates: sortedCopy(p.Aggregates)}
	}
	for i := range out {
		r := i
		for depth := 0; out[r].Parent >= 0 && depth < 1000; depth++ {
			r = out[r].Parent
		}
		out[i].Root = r
	}
	return NewForest(out)
}

func sortedCopy(s []string) []string {
	if slices.IsSorted(s) {
		return s
	}
	return slices.Sorted(slices.Values(s))
}

// treeOf returns the index of the root of provider u's tree.
func (f *Forest) treeOf(u string) (int, bool) {
	i, ok := f.byUUID[u]
	if !ok {
		return 0, false
	}
	return f.Providers[i].Root, true
}

// FirstInTree returns what a claim of q on the tree of provider host
// holds, provider by provider: the first of the candidates anchored in
// that tree (its own providers and the ones sharing with it), as keel's
// scheduler claims it. ok is false when q has no candidate there — it
// does not fit, or host is not in f.
func (f *Forest) FirstInTree(q CandidateQuery, host string) (alloc map[string]Resources, ok bool) {
	root, ok := f.treeOf(host)
	if !ok || len(q.Groups) == 0 {
		return nil, false
	}
	q.Roots = map[int]bool{root: true}
	q.FirstPerTree, q.Limit = true, 0
	reqs, _ := f.Candidates(q)
	for _, r := range reqs {
		mine := false
		for _, p := range r.Parts {
			if f.Providers[p.Provider].Root == root && !f.shares[p.Provider] {
				mine = true
			}
		}
		if !mine {
			continue // the pools alone: no host's claim
		}
		alloc = map[string]Resources{}
		for _, p := range r.Parts {
			u := f.Providers[p.Provider].UUID
			if alloc[u] == nil {
				alloc[u] = Resources{}
			}
			alloc[u][p.Class] += p.Amount
		}
		return alloc, true
	}
	return nil, false
}

// FitsTree reports whether q (a flavor's request: FlavorQuery) has a
// candidate on the tree of provider host, counting the providers that
// share with it: whether a server of that flavor fits on that host now.
func (f *Forest) FitsTree(q CandidateQuery, host string) bool {
	_, ok := f.FirstInTree(q, host)
	return ok
}

// HeldInTree reports whether every provider of alloc is in the tree of
// provider host or shares its inventory with that tree (through an
// aggregate): an allocation a claim on that host could have written.
func (f *Forest) HeldInTree(alloc map[string]Resources, host string) bool {
	root, ok := f.treeOf(host)
	if !ok || len(alloc) == 0 {
		return false
	}
	anchors := f.sharedRoots()
	for u := range alloc {
		i, ok := f.byUUID[u]
		switch {
		case !ok:
			return false
		case f.Providers[i].Root == root:
		case f.shares[i]:
			if _, found := slices.BinarySearch(anchors[i], root); !found {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// Reclaim returns what a consumer should hold for q on the tree of
// provider host, given providers ps (with their usage) and what it holds
// now (held): held itself when that is on host's tree and the providers
// sharing with it and sums to q's total, as a claim there leaves it;
// else the tree's first candidate (FirstInTree), searched with held and
// the released allocations (consumers dropped in the same write) given
// back. ok is false when q does not fit there. It is how keel repairs an
// instance's allocation: os-resetState, the compute host's audit.
func Reclaim(ps []TreeProvider, q CandidateQuery, host string, held map[string]Resources, released ...map[string]Resources) (map[string]Resources, bool) {
	freed := append([]map[string]Resources{held}, released...)
	given := make([]TreeProvider, len(ps))
	for i, p := range ps {
		for _, a := range freed {
			if r := a[p.UUID]; len(r) > 0 {
				p.Usage = p.Usage.Clone().Sub(r)
			}
		}
		given[i] = p
	}
	f := TreeForest(given)
	var total Resources
	for _, r := range held {
		total = total.Add(r)
	}
	if f.HeldInTree(held, host) && total.Equal(q.Total()) {
		return held, true
	}
	return f.FirstInTree(q, host)
}
