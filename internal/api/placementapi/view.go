package placementapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"keel/internal/placement"
	"keel/internal/store"
)

// view is an immutable picture of every provider with its usage, sorted by
// name, as of one position in the store's change stream. Requests that
// read many providers (lists, allocation candidates) share it instead of
// reading every provider from the store each time.
type view struct {
	seq    int64
	sorted []*entry // by name
	byUUID map[string]*entry
	pos    map[string]int    // provider → its index in sorted
	roots  map[string]string // provider → root of its tree
	// sharing counts the providers with MISC_SHARES_VIA_AGGREGATE.
	sharing int
	// trees holds the view as a placement.Forest, made on first use.
	trees *forestOnce
}

// forestOnce makes a view's placement.Forest once.
type forestOnce struct {
	once sync.Once
	f    *placement.Forest
	// rootOf names, per provider (as the view's sorted), the root of its
	// tree as view.root does: an answer's summaries read it thousands of
	// times, a slice is quicker than the roots map.
	rootOf []string
	done   atomic.Bool // f is made
}

// made returns the forest if it has been made, else nil.
func (o *forestOnce) made() *placement.Forest {
	if !o.done.Load() {
		return nil
	}
	return o.f
}

// simple reports whether every provider is a tree of its own and none
// shares its inventory: allocation candidates are then single providers.
func (v *view) simple() bool { return len(v.roots) == 0 && v.sharing == 0 }

// forest returns the view's providers as a placement.Forest (in the
// view's name order), made on the first call.
func (v *view) forest() *placement.Forest {
	v.trees.once.Do(func() {
		ps := make([]placement.CandidateProvider, len(v.sorted))
		v.trees.rootOf = make([]string, len(v.sorted))
		for i, s := range v.sorted {
			v.trees.rootOf[i] = v.root(s.UUID)
			parent, ok := v.pos[s.ParentUUID]
			if s.ParentUUID == "" || !ok {
				parent = -1
			}
			root, ok := v.pos[v.root(s.UUID)]
			if !ok {
				root = i
			}
			ps[i] = placement.CandidateProvider{UUID: s.UUID, Parent: parent, Root: root,
				Inventories: s.Inventories, Usage: s.Usage, Traits: s.Traits, Aggregates: s.Aggregates}
		}
		v.trees.f = placement.NewForest(ps)
		v.trees.done.Store(true)
	})
	return v.trees.f
}

// shares reports whether s carries MISC_SHARES_VIA_AGGREGATE.
func (s *entry) shares() bool {
	_, ok := slices.BinarySearch(s.Traits, placement.SharesViaAggregate)
	return ok
}

// entry is one provider of a view, with what answers derive from it
// computed once.
type entry struct {
	*store.ProviderSummary
	classes []placement.ResourceClass // sorted
	caps    []int64                   // capacity per class, as classes
	quoted  []byte                    // the UUID as a JSON string
	memo    atomic.Pointer[memo]      // the last candidates request's findings
	// summary is the entry's provider_summaries member as 1.29+ writes
	// it, made on first use.
	summary atomic.Pointer[summaryFragment]
}

// summaryFragment is an entry's summary, valid while its tree's root is
// root.
type summaryFragment struct {
	root string
	b    []byte
}

func newEntry(s *store.ProviderSummary) *entry {
	e := &entry{ProviderSummary: s, classes: slices.Sorted(maps.Keys(s.Inventories)), quoted: appendString(nil, s.UUID)}
	e.caps = make([]int64, len(e.classes))
	for i, rc := range e.classes {
		e.caps[i] = s.Inventories[rc].Capacity()
	}
	return e
}

// root returns the root of u's tree (u itself for a root).
func (v *view) root(u string) string {
	if r, ok := v.roots[u]; ok {
		return r
	}
	return u
}

// viewCache keeps the current view and brings it up to date by following
// the change stream: a request first asks the store for its newest change
// (one cheap read), and only when something changed re-reads the providers
// the new entries name. What a client wrote is therefore always in the view
// of its next request.
type viewCache struct {
	src interface {
		ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
		Changes(ctx context.Context, since int64, limit int) ([]store.Change, error)
		LastChange(ctx context.Context) (int64, error)
	}
	mu  sync.Mutex
	cur *view
}

// changeBatch is how many change-stream entries one read takes.
const changeBatch = 4096

// get returns a view at least as new as the store's newest change when it
// was called.
func (c *viewCache) get(ctx context.Context) (*view, error) {
	last, err := c.src.LastChange(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the change stream: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && c.cur.seq >= last {
		return c.cur, nil
	}
	if c.cur == nil {
		return c.reload(ctx, last)
	}
	changed := map[string]bool{}
	seq := c.cur.seq
	for seq < last {
		chs, err := c.src.Changes(ctx, seq, changeBatch)
		if errors.Is(err, store.ErrChangesTrimmed) {
			return c.reload(ctx, last)
		}
		if err != nil {
			return nil, fmt.Errorf("reading the change stream: %w", err)
		}
		if len(chs) == 0 {
			break
		}
		for _, ch := range chs {
			if ch.Kind == store.ChangeProvider {
				changed[ch.Key] = true
			}
		}
		seq = chs[len(chs)-1].Seq
	}
	if len(changed) == 0 {
		next := *c.cur
		next.seq = seq
		c.cur = &next
		return c.cur, nil
	}
	sums, err := c.src.ProviderSummaries(ctx, slices.Sorted(maps.Keys(changed)))
	if err != nil {
		return nil, fmt.Errorf("reading changed providers: %w", err)
	}
	if v := c.cur.replaced(seq, changed, sums); v != nil {
		c.cur = v
		return v, nil
	}
	byUUID := maps.Clone(c.cur.byUUID)
	for u := range changed {
		delete(byUUID, u)
	}
	for i := range sums {
		byUUID[sums[i].UUID] = newEntry(&sums[i])
	}
	c.cur = build(seq, byUUID)
	return c.cur, nil
}

// replaced returns a copy of v with the changed providers' entries
// swapped in place — the common case, where a write changed usages or
// inventories but no provider came, went, was renamed or moved in a
// tree — or nil when the view must be built afresh. It saves sorting
// every provider again after each claim.
func (v *view) replaced(seq int64, changed map[string]bool, sums []store.ProviderSummary) *view {
	if len(sums) != len(changed) {
		return nil // a provider was deleted
	}
	for i := range sums {
		old, ok := v.byUUID[sums[i].UUID]
		if !ok || old.Name != sums[i].Name || old.ParentUUID != sums[i].ParentUUID {
			return nil
		}
	}
	n := &view{seq: seq, sorted: slices.Clone(v.sorted), byUUID: maps.Clone(v.byUUID), pos: v.pos, roots: v.roots,
		sharing: v.sharing, trees: &forestOnce{}}
	// When only inventories and usage changed (a claim, an agent's
	// report), the new view's forest is the old one with those providers
	// updated, not one made afresh.
	old := v.trees.made()
	for i := range sums {
		p := v.byUUID[sums[i].UUID]
		if !slices.Equal(p.Traits, sums[i].Traits) || !slices.Equal(p.Aggregates, sums[i].Aggregates) {
			old = nil
		}
	}
	if old != nil {
		f := old.Clone()
		for i := range sums {
			f.Update(v.pos[sums[i].UUID], sums[i].Inventories, sums[i].Usage)
		}
		// (The roots are the old view's: no provider moved.)
		n.trees.once.Do(func() { n.trees.f, n.trees.rootOf = f, v.trees.rootOf; n.trees.done.Store(true) })
	}
	for i := range sums {
		e := newEntry(&sums[i])
		if v.byUUID[e.UUID].shares() {
			n.sharing--
		}
		if e.shares() {
			n.sharing++
		}
		n.byUUID[e.UUID] = e
		n.sorted[v.pos[e.UUID]] = e
	}
	return n
}

// reload reads every provider afresh.
func (c *viewCache) reload(ctx context.Context, last int64) (*view, error) {
	sums, err := c.src.ProviderSummaries(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("reading providers: %w", err)
	}
	byUUID := make(map[string]*entry, len(sums))
	for i := range sums {
		byUUID[sums[i].UUID] = newEntry(&sums[i])
	}
	c.cur = build(last, byUUID)
	return c.cur, nil
}

func build(seq int64, byUUID map[string]*entry) *view {
	v := &view{seq: seq, byUUID: byUUID, sorted: make([]*entry, 0, len(byUUID)), pos: make(map[string]int, len(byUUID)), roots: map[string]string{},
		trees: &forestOnce{}}
	for _, s := range byUUID {
		v.sorted = append(v.sorted, s)
		if s.shares() {
			v.sharing++
		}
	}
	slices.SortFunc(v.sorted, func(a, b *entry) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.UUID, b.UUID)
	})
	for i, s := range v.sorted {
		v.pos[s.UUID] = i
		if s.ParentUUID == "" {
			continue
		}
		r := s.ParentUUID
		for i := 0; i < 1000; i++ {
			p, ok := byUUID[r]
			if !ok || p.ParentUUID == "" {
				break
			}
			r = p.ParentUUID
		}
		v.roots[s.UUID] = r
	}
	return v
}
