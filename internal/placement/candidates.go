package placement

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// SharesViaAggregate is the trait that makes a provider's inventory
// usable by the trees it shares an aggregate with.
const SharesViaAggregate = "MISC_SHARES_VIA_AGGREGATE"

// CandidateProvider is one provider as an allocation candidate search sees
// it. Parent and Root are indexes into the Forest's providers (Parent -1
// for a root; a root is its own Root).
type CandidateProvider struct {
	UUID        string
	Parent      int
	Root        int
	Inventories Inventories
	Usage       Resources
	Traits      []string // sorted
	Aggregates  []string // sorted
}

// Forest is every provider, indexed for allocation candidate searches. The
// order of Providers is the order answers come in.
type Forest struct {
	Providers []CandidateProvider
	trees     map[int][]int    // root → its tree's providers, in order
	byAgg     map[string][]int // aggregate → its providers
	sharing   []int
	shares    []bool // per provider: it carries MISC_SHARES_VIA_AGGREGATE
	hasTrees  bool
	byUUID    map[string]int
	// sharedRoots gives, per sharing provider, the roots it anchors
	// (search.sharedAnchors), computed once per forest on first use.
	sharedRoots func() map[int][]int
}

// NewForest indexes ps (whose Parent and Root must be filled in).
func NewForest(ps []CandidateProvider) *Forest {
	f := &Forest{Providers: ps, trees: map[int][]int{}, byAgg: map[string][]int{}, byUUID: make(map[string]int, len(ps)), shares: make([]bool, len(ps))}
	f.sharedRoots = sync.OnceValue(func() map[int][]int {
		s := &search{f: f, anchorsOf: map[int][]int{}}
		for _, p := range f.sharing {
			s.sharedAnchors(p)
		}
		return s.anchorsOf
	})
	for i, p := range ps {
		f.byUUID[p.UUID] = i
		f.trees[p.Root] = append(f.trees[p.Root], i)
		if p.Parent >= 0 {
			f.hasTrees = true
		}
		for _, a := range p.Aggregates {
			f.byAgg[a] = append(f.byAgg[a], i)
		}
		if _, ok := slices.BinarySearch(p.Traits, SharesViaAggregate); ok {
			f.sharing = append(f.sharing, i)
			f.shares[i] = true
		}
	}
	return f
}

// Simple reports whether no provider has a parent and none shares its
// inventory: every candidate is then one provider on its own.
func (f *Forest) Simple() bool { return !f.hasTrees && len(f.sharing) == 0 }

// RequestGroup is one group of GET /allocation_candidates: the unnamed one
// (Suffix "", whose resources may come from several providers of a tree
// and from sharing providers) or a granular one (resourcesN…, all from one
// provider).
type RequestGroup struct {
	Suffix    string
	Resources Resources
	Traits    TraitQuery
	MemberOf  AggregateQuery
	InTree    string // a provider UUID: the group is satisfied in its tree
}

// CandidateQuery is a whole allocation candidates request.
type CandidateQuery struct {
	// Groups holds the unnamed group (if any) and the granular ones.
	Groups []RequestGroup
	// Isolate (group_policy=isolate) puts granular groups on distinct
	// providers.
	Isolate bool
	// RootTraits (root_required) constrains the root of each candidate's
	// tree.
	RootTraits TraitQuery
	// SameSubtree lists sets of group suffixes whose providers must all
	// sit under one of them.
	SameSubtree [][]string
	// Limit cuts the answer at that many candidates (0: all).
	Limit int
	// NestedAware (1.29+) allows a candidate to use several providers of
	// one tree; before, such candidates are left out.
	NestedAware bool
	// FirstPerTree keeps, of each anchoring tree's candidates, only the
	// first that uses a provider of the tree itself (what a scheduler
	// claiming the first candidate of each host reads); the search stops
	// looking in a tree once it has found it. Not a Placement parameter.
	FirstPerTree bool
	// Roots, when not nil, limits the search to the candidates anchored
	// in these trees (indexes of their roots): a scheduler's view asks
	// again only for the hosts that changed. Not a Placement parameter.
	Roots map[int]bool
}

// AllocationPart is an amount of one class from one provider.
type AllocationPart struct {
	Provider int
	Class    ResourceClass
	Amount   int64
}

// AllocationRequest is one allocation candidate: the parts (sorted by
// provider, then class) and which providers satisfied each group.
type AllocationRequest struct {
	Parts    []AllocationPart
	Mappings map[string][]int // suffix → providers, sorted
}

// groupCandidate is one way to satisfy one group in one anchor's tree.
type groupCandidate struct {
	parts  []AllocationPart // sorted by class
	provs  []int            // sorted, distinct
	single bool             // a granular group's (one provider)
}

// Candidates answers q over f as Placement does: each group's ways of
// being satisfied per anchoring tree (a tree, and the sharing providers
// in an aggregate with one of its providers), combined over the groups of
// every tree that satisfies all of them, filtered by group_policy,
// same_subtree, capacity of the sums, and (before 1.29) one provider per
// tree. summaries lists the providers the answer's provider_summaries
// shows, in order.
func (f *Forest) Candidates(q CandidateQuery) (reqs []AllocationRequest, summaries []int) {
	s := &search{f: f, q: q, anchorsOf: map[int][]int{}}
	perGroup := make([]map[int][]groupCandidate, len(q.Groups))
	granular := 0
	for i, g := range q.Groups {
		if g.Suffix != "" {
			granular++
		}
		var m map[int][]groupCandidate
		if g.Suffix == "" && !f.Simple() {
			m = s.spread(g)
		} else {
			m = s.single(g)
		}
		if len(m) == 0 {
			return nil, nil
		}
		perGroup[i] = m
	}
	if len(perGroup) == 0 {
		return nil, nil
	}
	// Anchors every group can be satisfied in, in provider order.
	var anchors []int
	for a := range perGroup[0] {
		ok := true
		for _, m := range perGroup[1:] {
			if _, in := m[a]; !in {
				ok = false
				break
			}
		}
		if ok {
			anchors = append(anchors, a)
		}
	}
	slices.Sort(anchors)
	seen := map[string]bool{}
	pick := make([]*groupCandidate, len(perGroup))
	usedRoots := map[int]bool{}
	done, treeDone := false, false
	var combine func(anchor, gi int)
	combine = func(anchor, gi int) {
		if done || treeDone {
			return
		}
		if gi == len(perGroup) {
			r, ok := s.consolidate(pick, granular)
			if !ok {
				return
			}
			// A provider that does not share is a candidate only for its
			// own tree, so a request using one comes from one anchor
			// only; one made of sharing providers alone can come from
			// every tree they share with, and counts once.
			if !slices.ContainsFunc(r.Parts, func(p AllocationPart) bool { return !f.shares[p.Provider] }) {
				key := r.key(q.Groups)
				if seen[key] {
					return
				}
				seen[key] = true
			}
			reqs = append(reqs, r)
			for _, p := range r.Parts {
				usedRoots[f.Providers[p.Provider].Root] = true
				if q.FirstPerTree && f.Providers[p.Provider].Root == anchor && !f.shares[p.Provider] {
					treeDone = true
				}
			}
			if q.Limit > 0 && len(reqs) == q.Limit {
				done = true
			}
			return
		}
		cands := perGroup[gi][anchor]
		for i := range cands {
			pick[gi] = &cands[i]
			combine(anchor, gi+1)
			if done || treeDone {
				return
			}
		}
	}
	for _, a := range anchors {
		treeDone = false
		combine(a, 0)
		if done {
			break
		}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	if !q.NestedAware && f.hasTrees {
		used := map[int]bool{}
		for _, r := range reqs {
			for _, p := range r.Parts {
				used[p.Provider] = true
			}
		}
		for i := range f.Providers {
			if used[i] {
				summaries = append(summaries, i)
			}
		}
		return reqs, summaries
	}
	for i, p := range f.Providers {
		if usedRoots[p.Root] {
			summaries = append(summaries, i)
		}
	}
	return reqs, summaries
}

// search is one Candidates call's working state.
type search struct {
	f         *Forest
	q         CandidateQuery
	anchorsOf map[int][]int // sharing provider → roots it anchors, cached
}

// anchorOK reports whether root passes root_required.
func (s *search) anchorOK(root int) bool {
	return (s.q.Roots == nil || s.q.Roots[root]) && (s.q.RootTraits.Empty() || s.q.RootTraits.Match(s.f.Providers[root].Traits))
}

// outside reports whether provider i can take part in no candidate the
// search looks for: Roots leaves its tree out and it does not share.
func (s *search) outside(i int) bool {
	return s.q.Roots != nil && !s.q.Roots[s.f.Providers[i].Root] && !s.f.shares[i]
}

// sharedAnchors returns the roots of the trees with a provider in an
// aggregate of sharing provider p (its own among them when it is in an
// aggregate), sorted.
func (s *search) sharedAnchors(p int) []int {
	if a, ok := s.anchorsOf[p]; ok {
		return a
	}
	if s.q.Roots != nil {
		// A search over a few trees (a scheduler's view, asking again
		// for the trees that changed) reuses the forest's answers, which
		// depend on aggregates alone.
		a := s.f.sharedRoots()[p]
		s.anchorsOf[p] = a
		return a
	}
	set := map[int]bool{}
	for _, agg := range s.f.Providers[p].Aggregates {
		for _, q := range s.f.byAgg[agg] {
			set[s.f.Providers[q].Root] = true
		}
	}
	out := make([]int, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	slices.Sort(out)
	s.anchorsOf[p] = out
	return out
}

// fitsOne reports whether p can take n of rc: it has the class, n meets
// min_unit, max_unit and step_size, and usage + n ≤ capacity.
func (f *Forest) fitsOne(p int, rc ResourceClass, n int64) bool {
	pr := &f.Providers[p]
	inv, ok := pr.Inventories[rc]
	return ok && inv.CheckAmount(rc, n) == nil && FitsIn(pr.Usage[rc], n, inv.Capacity())
}

// scope returns the providers a group's resources may come from: the
// in_tree provider's tree, or every provider. ok is false when the
// in_tree provider does not exist.
func (s *search) scope(g RequestGroup) (provs []int, restricted, ok bool) {
	if g.InTree == "" {
		return nil, false, true
	}
	i, found := s.f.byUUID[g.InTree]
	if !found {
		return nil, true, false
	}
	return s.f.trees[s.f.Providers[i].Root], true, true
}

// inAggs reports whether p is itself in every AnyOf group of q.
func inAggs(q AggregateQuery, p *CandidateProvider) bool {
	return AggregateQuery{AnyOf: q.AnyOf}.Match(p.Aggregates)
}

// badAggs reports whether p is in one of q's forbidden aggregates.
func badAggs(q AggregateQuery, p *CandidateProvider) bool {
	return len(q.Forbidden) > 0 && !AggregateQuery{Forbidden: q.Forbidden}.Match(p.Aggregates)
}

// single finds the providers that satisfy g on their own (a granular
// group, or any group where no provider has a parent or shares): each is
// a candidate for its own tree and, if it shares, for the trees it
// shares with.
func (s *search) single(g RequestGroup) map[int][]groupCandidate {
	f := s.f
	scope, restricted, ok := s.scope(g)
	if !ok {
		return nil
	}
	classes := sortedClasses(g.Resources)
	if len(classes) == 0 {
		// A resourceless group (same_subtree, 1.36) names its providers
		// by traits or aggregates; in_tree does not narrow it.
		restricted = false
		if len(g.Traits.Required) == 0 && len(g.MemberOf.AnyOf) == 0 {
			return nil
		}
	}
	out := map[int][]groupCandidate{}
	try := func(i int) {
		if s.outside(i) {
			return
		}
		p := &f.Providers[i]
		if !g.Traits.Match(p.Traits) || !inAggs(g.MemberOf, p) || badAggs(g.MemberOf, p) {
			return
		}
		for _, rc := range classes {
			if !f.fitsOne(i, rc, g.Resources[rc]) {
				return
			}
		}
		c := groupCandidate{provs: []int{i}, single: g.Suffix != ""}
		for _, rc := range classes {
			c.parts = append(c.parts, AllocationPart{Provider: i, Class: rc, Amount: g.Resources[rc]})
		}
		if s.anchorOK(p.Root) {
			out[p.Root] = append(out[p.Root], c)
		}
		if _, shares := slices.BinarySearch(p.Traits, SharesViaAggregate); shares {
			for _, a := range s.sharedAnchors(i) {
				if a != p.Root && s.anchorOK(a) {
					out[a] = append(out[a], c)
				}
			}
		}
	}
	if restricted {
		for _, i := range scope {
			try(i)
		}
	} else {
		for i := range f.Providers {
			try(i)
		}
	}
	return out
}

// pair is a provider that can hold one class for a tree it anchors.
type pair struct{ prov, anchor int }

// spread finds the unnamed group's candidates when trees or sharing
// providers exist: each class from one provider of the anchor's tree or
// from a provider sharing with it, the providers used together holding
// the required traits and none a forbidden one.
func (s *search) spread(g RequestGroup) map[int][]groupCandidate {
	f := s.f
	scope, restricted, ok := s.scope(g)
	if !ok {
		return nil
	}
	if len(g.Traits.Required) > 0 {
		any := false
		for i := range f.Providers {
			for _, grp := range g.Traits.Required {
				if slices.ContainsFunc(grp, func(t string) bool { _, ok := slices.BinarySearch(f.Providers[i].Traits, t); return ok }) {
					any = true
					break
				}
			}
			if any {
				break
			}
		}
		if !any {
			return nil
		}
	}
	classes := sortedClasses(g.Resources)
	if len(classes) == 0 {
		return nil
	}
	hasAnyOf := len(g.MemberOf.AnyOf) > 0
	// perClass[c][anchor] = providers able to hold class c for anchor.
	perClass := make([]map[int][]int, len(classes))
	for ci, rc := range classes {
		n := g.Resources[rc]
		var pairs []pair
		consider := func(i int) {
			if !s.outside(i) && f.fitsOne(i, rc, n) {
				pairs = append(pairs, pair{i, f.Providers[i].Root})
			}
		}
		if restricted {
			for _, i := range scope {
				consider(i)
			}
		} else {
			for i := range f.Providers {
				consider(i)
			}
		}
		if len(pairs) == 0 {
			return nil
		}
		if !restricted {
			for _, sp := range f.sharing {
				if hasAnyOf && !inAggs(g.MemberOf, &f.Providers[sp]) {
					continue
				}
				if !f.fitsOne(sp, rc, n) {
					continue
				}
				for _, a := range s.sharedAnchors(sp) {
					if a != f.Providers[sp].Root {
						pairs = append(pairs, pair{sp, a})
					}
				}
			}
		}
		m := map[int][]int{}
		for _, pr := range pairs {
			if !s.anchorOK(pr.anchor) {
				continue
			}
			p, a := &f.Providers[pr.prov], &f.Providers[pr.anchor]
			if hasAnyOf && !inAggs(g.MemberOf, p) && !inAggs(g.MemberOf, a) {
				continue
			}
			if badAggs(g.MemberOf, p) || badAggs(g.MemberOf, a) {
				continue
			}
			if ci > 0 {
				if _, ok := perClass[0][pr.anchor]; !ok {
					continue
				}
			}
			m[pr.anchor] = append(m[pr.anchor], pr.prov)
		}
		if len(m) == 0 {
			return nil
		}
		perClass[ci] = m
	}
	out := map[int][]groupCandidate{}
	idx := make([]int, len(classes))
	for anchor := range perClass[0] {
		lists := make([][]int, len(classes))
		ok := true
		for ci := range classes {
			if lists[ci], ok = perClass[ci][anchor]; !ok {
				break
			}
			slices.Sort(lists[ci])
			lists[ci] = slices.Compact(lists[ci])
		}
		if !ok {
			continue
		}
		for i := range idx {
			idx[i] = 0
		}
		for {
			if c, ok := s.combination(g, classes, lists, idx); ok {
				out[anchor] = append(out[anchor], c)
			}
			// Next index tuple (the last class varies fastest).
			k := len(idx) - 1
			for k >= 0 {
				idx[k]++
				if idx[k] < len(lists[k]) {
					break
				}
				idx[k] = 0
				k--
			}
			if k < 0 {
				break
			}
		}
	}
	return out
}

// combination builds the unnamed group's candidate taking class ci from
// lists[ci][idx[ci]], if the providers together pass the group's traits.
func (s *search) combination(g RequestGroup, classes []ResourceClass, lists [][]int, idx []int) (groupCandidate, bool) {
	c := groupCandidate{parts: make([]AllocationPart, len(classes))}
	for ci, rc := range classes {
		p := lists[ci][idx[ci]]
		c.parts[ci] = AllocationPart{Provider: p, Class: rc, Amount: g.Resources[rc]}
		if !slices.Contains(c.provs, p) {
			c.provs = append(c.provs, p)
		}
	}
	slices.Sort(c.provs)
	if !g.Traits.Empty() {
		var union []string
		for _, p := range c.provs {
			tr := s.f.Providers[p].Traits
			for _, t := range g.Traits.Forbidden {
				if _, bad := slices.BinarySearch(tr, t); bad {
					return c, false
				}
			}
			union = append(union, tr...)
		}
		slices.Sort(union)
		if !(TraitQuery{Required: g.Traits.Required}).Match(slices.Compact(union)) {
			return c, false
		}
	}
	return c, true
}

// consolidate merges one candidate per group into one allocation request,
// or reports false when group_policy, same_subtree, the summed amounts'
// capacity and max_unit, or (before 1.29) one provider per tree refuse it.
func (s *search) consolidate(pick []*groupCandidate, granular int) (AllocationRequest, bool) {
	f := s.f
	if s.q.Isolate && granular > 1 {
		var provs []int
		for _, c := range pick {
			if c.single && !slices.Contains(provs, c.provs[0]) {
				provs = append(provs, c.provs[0])
			}
		}
		if len(provs) != granular {
			return AllocationRequest{}, false
		}
	}
	mappings := make(map[string][]int, len(pick))
	for gi, c := range pick {
		sfx := s.q.Groups[gi].Suffix
		mappings[sfx] = append(mappings[sfx], c.provs...)
	}
	for _, set := range s.q.SameSubtree {
		var provs []int
		for _, sfx := range set {
			for _, p := range mappings[sfx] {
				if !slices.Contains(provs, p) {
					provs = append(provs, p)
				}
			}
		}
		if !s.sameSubtree(provs) {
			return AllocationRequest{}, false
		}
	}
	var parts []AllocationPart
	for _, c := range pick {
		for _, part := range c.parts {
			j := slices.IndexFunc(parts, func(x AllocationPart) bool { return x.Provider == part.Provider && x.Class == part.Class })
			if j < 0 {
				parts = append(parts, part)
			} else {
				parts[j].Amount = AddAmounts(parts[j].Amount, part.Amount)
			}
		}
	}
	for _, part := range parts {
		p := &f.Providers[part.Provider]
		inv := p.Inventories[part.Class]
		if !FitsIn(p.Usage[part.Class], part.Amount, inv.Capacity()) || part.Amount > inv.MaxUnit {
			return AllocationRequest{}, false
		}
	}
	if !s.q.NestedAware && f.hasTrees {
		roots := map[int]bool{}
		provs := map[int]bool{}
		for _, part := range parts {
			provs[part.Provider] = true
			roots[f.Providers[part.Provider].Root] = true
		}
		if len(provs) != len(roots) {
			return AllocationRequest{}, false
		}
	}
	slices.SortFunc(parts, func(a, b AllocationPart) int {
		if a.Provider != b.Provider {
			return a.Provider - b.Provider
		}
		return strings.Compare(string(a.Class), string(b.Class))
	})
	for k, v := range mappings {
		slices.Sort(v)
		mappings[k] = slices.Compact(v)
	}
	return AllocationRequest{Parts: parts, Mappings: mappings}, true
}

// sameSubtree reports whether one of provs is an ancestor (or itself) of
// every other.
func (s *search) sameSubtree(provs []int) bool {
	if len(provs) <= 1 {
		return true
	}
	for _, top := range provs {
		all := true
		for _, p := range provs {
			if !s.under(p, top) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// under reports whether top is p or one of its ancestors.
func (s *search) under(p, top int) bool {
	for depth := 0; p >= 0 && depth < 1000; depth++ {
		if p == top {
			return true
		}
		p = s.f.Providers[p].Parent
	}
	return false
}

// key identifies a request by its parts and mappings (two anchors can
// yield the same one, e.g. a sharing provider alone).
func (r AllocationRequest) key(groups []RequestGroup) string {
	var b []byte
	for _, p := range r.Parts {
		b = strconv.AppendInt(b, int64(p.Provider), 10)
		b = append(b, ':')
		b = append(b, p.Class...)
		b = append(b, ':')
		b = strconv.AppendInt(b, p.Amount, 10)
		b = append(b, ',')
	}
	for _, g := range groups {
		b = append(b, '|')
		b = append(b, g.Suffix...)
		for _, p := range r.Mappings[g.Suffix] {
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(p), 10)
		}
	}
	return string(b)
}

func sortedClasses(r Resources) []ResourceClass {
	out := make([]ResourceClass, 0, len(r))
	for rc := range r {
		out = append(out, rc)
	}
	slices.Sort(out)
	return out
}
