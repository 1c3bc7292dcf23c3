package placement

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"
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
// order of Providers is the order answers come in. Read Providers; change
// a provider's inventories or usage only through Update.
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
	// classes holds per provider its inventories with usage and
	// capacity, sorted by class: a search reads them thousands of times,
	// a short slice is quicker to look through than two maps.
	classes [][]classState
}

// classState is one class of a provider's inventory as a search reads it.
type classState struct {
	rc       ResourceClass
	inv      Inventory
	capacity int64
	used     int64
}

// Update sets provider i's inventories and usage (the rest of a
// provider is fixed for the forest's life). Change them through Update
// only, not in Providers: the forest keeps them indexed.
func (f *Forest) Update(i int, inv Inventories, usage Resources) {
	p := &f.Providers[i]
	p.Inventories, p.Usage = inv, usage
	_, f.classes[i] = classStates(nil, inv, usage)
}

// Clone returns a copy of f that Update can change without changing f
// (the providers' other fields, and the indexes made from them, are
// shared: they never change).
func (f *Forest) Clone() *Forest {
	c := *f
	c.Providers = slices.Clone(f.Providers)
	c.classes = slices.Clone(f.classes)
	return &c
}

// classStates appends the states of inv's classes with usage to out,
// sorted by class, and returns out and the part it appended.
func classStates(out []classState, inv Inventories, usage Resources) (all, appended []classState) {
	start := len(out)
	for rc, in := range inv {
		out = append(out, classState{rc: internClass(rc), inv: in, capacity: in.Capacity(), used: usage[rc]})
	}
	cs := out[start:len(out):len(out)]
	slices.SortFunc(cs, func(a, b classState) int { return strings.Compare(string(a.rc), string(b.rc)) })
	return out, cs
}

// internClass returns rc's one shared copy. The forest keeps its classes'
// names interned, and a search interns the request's (sortedClasses), so
// class's comparisons, thousands per request, are equal at the first
// check (the same pointer) instead of comparing the bytes of two copies.
func internClass(rc ResourceClass) ResourceClass {
	return ResourceClass(unique.Make(string(rc)).Value())
}

// class returns p's state of rc, or nil when p has no inventory of it.
func (f *Forest) class(p int, rc ResourceClass) *classState {
	cs := f.classes[p]
	for i := range cs {
		if cs[i].rc == rc {
			return &cs[i]
		}
	}
	return nil
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
	f.classes = make([][]classState, len(ps))
	all := make([]classState, 0, 3*len(ps))
	for i, p := range ps {
		all, f.classes[i] = classStates(all, p.Inventories, p.Usage)
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
	Parts []AllocationPart
	// Mappings holds, per group of the query (in its order), the
	// providers that satisfied it, sorted. The slices may be shared
	// between requests: read them, do not change them.
	Mappings [][]int
}

// Mapping returns the providers that satisfied the group with suffix sfx
// of q (the query r answers), or nil.
func (r AllocationRequest) Mapping(q CandidateQuery, sfx string) []int {
	for i, g := range q.Groups {
		if g.Suffix == sfx && i < len(r.Mappings) {
			return r.Mappings[i]
		}
	}
	return nil
}

// slab hands out small slices cut from larger blocks: a search makes
// thousands of two- or three-element slices, and one allocation per
// block instead of per slice keeps the garbage collector out of it. A
// slab in a Scratch hands its blocks out again after reset.
type slab[T any] struct {
	block []T
	used  [][]T // blocks handed out from since the last reset
	spare [][]T // blocks to hand out again
}

// take returns a slice of length n whose capacity ends at n, so
// appending to it never writes into a neighbour. Its elements are zero
// unless the block is one handed out again: callers set every element.
func (b *slab[T]) take(n int) []T {
	if n > 256 {
		return make([]T, n)
	}
	if len(b.block)+n > cap(b.block) {
		if k := len(b.spare); k > 0 {
			b.block = b.spare[k-1][:0]
			b.spare = b.spare[:k-1]
		} else {
			b.block = make([]T, 0, 1024)
		}
		b.used = append(b.used, b.block)
	}
	l := len(b.block)
	b.block = b.block[:l+n]
	return b.block[l : l+n : l+n]
}

// reset makes every block handed out so far spare: what was taken from
// them must no longer be in use.
func (b *slab[T]) reset() {
	b.spare = append(b.spare, b.used...)
	b.used, b.block = b.used[:0], nil
}

// Scratch is memory one search's answer is made in, kept for the next
// search: the answer to 2,000 candidates over trees takes about 800 KB of
// small slices and indexes, which allocated afresh each time cost a
// quarter of the request in allocation and garbage collection. A Scratch
// serves one search at a time; the requests CandidatesIn returns live in
// it until the next CandidatesIn with the same Scratch.
type Scratch struct {
	ints   slab[int]
	parts  slab[AllocationPart]
	maps   slab[[]int]
	reqs   []AllocationRequest
	groups []*byRoot // byRoots to use again
	nextBR int       // groups[:nextBR] are in use
	next   []int
}

// reset readies sc for another search.
func (sc *Scratch) reset() {
	sc.ints.reset()
	sc.parts.reset()
	sc.maps.reset()
	sc.nextBR = 0
}

// byRootFor returns a byRoot over n providers for m candidates, from sc's
// kept ones when there are.
func (sc *Scratch) byRootFor(n, m int) *byRoot {
	if sc.nextBR == len(sc.groups) {
		sc.groups = append(sc.groups, &byRoot{})
	}
	b := sc.groups[sc.nextBR]
	sc.nextBR++
	if cap(b.off) < n+1 {
		b.off = make([]int, n+1)
	} else {
		b.off = b.off[:n+1]
		clear(b.off)
	}
	if cap(b.c) < m {
		b.c = make([]groupCandidate, m)
	} else {
		b.c = b.c[:m]
	}
	return b
}

// byRoot holds one group's candidates grouped by the root of the tree
// they are a candidate for, each root's in the order they were found.
type byRoot struct {
	off []int // root r's candidates are c[off[r]:off[r+1]]
	c   []groupCandidate
}

// of returns root r's candidates.
func (b *byRoot) of(r int) []groupCandidate { return b.c[b.off[r]:b.off[r+1]] }

// collector gathers a group's candidates in the order they are found,
// then groups them by root (a counting sort, which keeps that order).
type collector struct {
	roots []int
	cands []groupCandidate
}

// collectors keeps collectors' slices between searches (a collector's
// are only needed until group copies them out).
var collectors = sync.Pool{New: func() any { return new(collector) }}

// release clears c and keeps it for another search.
func (c *collector) release() {
	clear(c.cands) // drop the references into the search's slabs
	c.roots, c.cands = c.roots[:0], c.cands[:0]
	collectors.Put(c)
}

func (c *collector) add(root int, g groupCandidate) {
	c.roots = append(c.roots, root)
	c.cands = append(c.cands, g)
}

// group returns the candidates by root over n providers (made in sc),
// or nil when there are none.
func (c *collector) group(n int, sc *Scratch) *byRoot {
	if len(c.cands) == 0 {
		return nil
	}
	b := sc.byRootFor(n, len(c.cands))
	for _, r := range c.roots {
		b.off[r+1]++
	}
	for r := 1; r <= n; r++ {
		b.off[r] += b.off[r-1]
	}
	sc.next = append(sc.next[:0], b.off[:n]...)
	next := sc.next
	for i, r := range c.roots {
		b.c[next[r]] = c.cands[i]
		next[r]++
	}
	return b
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
	return f.CandidatesIn(q, new(Scratch))
}

// CandidatesIn is Candidates making its answer in sc, which it first
// resets: the requests it returns (their parts and mappings) are valid
// until sc's next use.
func (f *Forest) CandidatesIn(q CandidateQuery, sc *Scratch) (reqs []AllocationRequest, summaries []int) {
	sc.reset()
	s := &search{f: f, q: q, ints: &sc.ints, parts: &sc.parts, maps: &sc.maps, sc: sc}
	// perGroup[g][root]: group g's candidates in the tree anchored at root.
	perGroup := make([]*byRoot, len(q.Groups))
	granular := 0
	for i, g := range q.Groups {
		if g.Suffix != "" {
			granular++
		}
		var m *byRoot
		if g.Suffix == "" && !f.Simple() {
			m = s.spread(g)
		} else {
			m = s.single(g)
		}
		if m == nil {
			return nil, nil
		}
		perGroup[i] = m
	}
	if len(perGroup) == 0 {
		return nil, nil
	}
	var seen map[string]bool
	pick := make([]*groupCandidate, len(perGroup))
	usedRoots := make([]bool, len(f.Providers))
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
				key := r.key()
				if seen[key] {
					return
				}
				if seen == nil {
					seen = map[string]bool{}
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
		cands := perGroup[gi].of(anchor)
		for i := range cands {
			pick[gi] = &cands[i]
			combine(anchor, gi+1)
			if done || treeDone {
				return
			}
		}
	}
	// Anchors every group can be satisfied in, in provider order, and
	// how many combinations they have at most (the answer's size when
	// every combination fits, as it mostly does: reqs is made that big
	// once rather than grown).
	var anchors []int
	most := 0
	for a := range f.Providers {
		combos := 1
		for _, m := range perGroup {
			combos = min(combos*(m.off[a+1]-m.off[a]), 1<<16)
			if combos == 0 {
				break
			}
		}
		if combos > 0 {
			anchors = append(anchors, a)
			most += combos
		}
	}
	size := min(most, 1<<20)
	switch {
	case q.FirstPerTree:
		size = len(anchors)
	case q.Limit > 0:
		size = min(most, q.Limit)
	}
	if cap(sc.reqs) >= size {
		reqs = sc.reqs[:0]
	} else {
		reqs = make([]AllocationRequest, 0, size)
	}
	defer func() {
		if cap(reqs) > cap(sc.reqs) {
			sc.reqs = reqs[:0]
		}
	}()
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
	return reqs, f.summarised(q, reqs, usedRoots)
}

// summarised lists the providers an answer's provider_summaries shows:
// before 1.29 over trees, those the requests use; else every provider of
// the trees they use.
func (f *Forest) summarised(q CandidateQuery, reqs []AllocationRequest, usedRoots []bool) (summaries []int) {
	if !q.NestedAware && f.hasTrees {
		used := make([]bool, len(f.Providers))
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
		return summaries
	}
	n := 0
	for _, p := range f.Providers {
		if usedRoots[p.Root] {
			n++
		}
	}
	summaries = make([]int, 0, n)
	for i, p := range f.Providers {
		if usedRoots[p.Root] {
			summaries = append(summaries, i)
		}
	}
	return summaries
}

// search is one Candidates call's working state.
type search struct {
	f         *Forest
	q         CandidateQuery
	anchorsOf map[int][]int // sharing provider → roots it anchors (Forest.sharedRoots only)
	ints      *slab[int]
	parts     *slab[AllocationPart]
	maps      *slab[[]int]
	sc        *Scratch
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
	if s.anchorsOf == nil {
		// The answers depend on aggregates alone: every search of the
		// forest reuses the forest's.
		return s.f.sharedRoots()[p]
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
	cs := f.class(p, rc)
	return cs != nil && cs.inv.amountOK(n) && FitsIn(cs.used, n, cs.capacity)
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
func (s *search) single(g RequestGroup) *byRoot {
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
	out := collectors.Get().(*collector)
	defer out.release()
	amounts := make([]int64, len(classes))
	for k, rc := range classes {
		amounts[k] = g.Resources[rc]
	}
	try := func(i int) {
		if s.outside(i) {
			return
		}
		p := &f.Providers[i]
		if !g.Traits.Match(p.Traits) || !inAggs(g.MemberOf, p) || badAggs(g.MemberOf, p) {
			return
		}
		for k, rc := range classes {
			if !f.fitsOne(i, rc, amounts[k]) {
				return
			}
		}
		c := groupCandidate{provs: s.ints.take(1), parts: s.parts.take(len(classes)), single: g.Suffix != ""}
		c.provs[0] = i
		for k, rc := range classes {
			c.parts[k] = AllocationPart{Provider: i, Class: rc, Amount: amounts[k]}
		}
		if s.anchorOK(p.Root) {
			out.add(p.Root, c)
		}
		if f.shares[i] {
			for _, a := range s.sharedAnchors(i) {
				if a != p.Root && s.anchorOK(a) {
					out.add(a, c)
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
	return out.group(len(f.Providers), s.sc)
}

// pair is a provider that can hold one class for a tree it anchors.
type pair struct{ prov, anchor int }

// spread finds the unnamed group's candidates when trees or sharing
// providers exist: each class from one provider of the anchor's tree or
// from a provider sharing with it, the providers used together holding
// the required traits and none a forbidden one.
func (s *search) spread(g RequestGroup) *byRoot {
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
	out := collectors.Get().(*collector)
	defer out.release()
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
				out.add(anchor, c)
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
	return out.group(len(f.Providers), s.sc)
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
	mappings := s.maps.take(len(pick))
	for gi, c := range pick {
		mappings[gi] = c.provs // sorted and distinct already
	}
	for _, set := range s.q.SameSubtree {
		var provs []int
		for _, sfx := range set {
			for gi, g := range s.q.Groups {
				if g.Suffix != sfx {
					continue
				}
				for _, p := range mappings[gi] {
					if !slices.Contains(provs, p) {
						provs = append(provs, p)
					}
				}
			}
		}
		if !s.sameSubtree(provs) {
			return AllocationRequest{}, false
		}
	}
	n := 0
	for _, c := range pick {
		n += len(c.parts)
	}
	parts := s.parts.take(n)[:0]
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
		cs := f.class(part.Provider, part.Class)
		if cs == nil || !FitsIn(cs.used, part.Amount, cs.capacity) || part.Amount > cs.inv.MaxUnit {
			return AllocationRequest{}, false
		}
	}
	if !s.q.NestedAware && f.hasTrees {
		// One provider per tree: no two parts from distinct providers
		// of one tree.
		for i, a := range parts {
			for _, b := range parts[:i] {
				if a.Provider != b.Provider && f.Providers[a.Provider].Root == f.Providers[b.Provider].Root {
					return AllocationRequest{}, false
				}
			}
		}
	}
	// Insertion sort: a request has a handful of parts.
	for i := 1; i < len(parts); i++ {
		for j := i; j > 0 && partLess(parts[j], parts[j-1]); j-- {
			parts[j], parts[j-1] = parts[j-1], parts[j]
		}
	}
	return AllocationRequest{Parts: parts, Mappings: mappings}, true
}

// partLess orders parts by provider, then class.
func partLess(a, b AllocationPart) bool {
	if a.Provider != b.Provider {
		return a.Provider < b.Provider
	}
	return a.Class < b.Class
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
func (r AllocationRequest) key() string {
	var b []byte
	for _, p := range r.Parts {
		b = strconv.AppendInt(b, int64(p.Provider), 10)
		b = append(b, ':')
		b = append(b, p.Class...)
		b = append(b, ':')
		b = strconv.AppendInt(b, p.Amount, 10)
		b = append(b, ',')
	}
	for _, m := range r.Mappings {
		b = append(b, '|')
		for _, p := range m {
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(p), 10)
		}
	}
	return string(b)
}

func sortedClasses(r Resources) []ResourceClass {
	out := make([]ResourceClass, 0, len(r))
	for rc := range r {
		out = append(out, internClass(rc))
	}
	slices.Sort(out)
	return out
}
