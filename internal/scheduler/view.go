package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Source is what the host view reads from the store.
type Source interface {
	ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
	ListHostRecords(ctx context.Context) ([]records.HostRecord, error)
	GetHostRecord(ctx context.Context, host string) (records.HostRecord, error)
	ListServices(ctx context.Context) ([]records.Service, error)
	GetService(ctx context.Context, host string) (records.Service, error)
	Changes(ctx context.Context, since int64, limit int) ([]store.Change, error)
	LastChange(ctx context.Context) (int64, error)
	ListAggregates(ctx context.Context) ([]records.Aggregate, error)
}

// SharingSource is a Source that can list providers whose inventories,
// traits and aggregates it shares with the caller instead of copying
// them: memory.Store, which replaces those of a provider as a whole and
// never changes them in place. The view only reads them (a claim it
// assumes copies the usage first), so it takes them shared when it can
// — two maps and two slices less per changed provider and refresh.
type SharingSource interface {
	SharedProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
}

// summaries reads providers from the source, shared when it can.
func (v *View) summaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error) {
	if ss, ok := v.src.(SharingSource); ok {
		return ss.SharedProviderSummaries(ctx, uuids)
	}
	return v.src.ProviderSummaries(ctx, uuids)
}

// changeBatch is how many change-stream entries one read takes.
const changeBatch = 4096

// View is the scheduler's in-memory picture of every host, kept current by
// following the store's change stream. A host appears once it has a
// resource provider; its name is the provider's name (as Nova names a
// provider after its hypervisor host).
type View struct {
	src          Source
	readsRecords bool

	mu     sync.Mutex
	seq    int64
	hosts  []*HostState // sorted by name
	byName map[string]*HostState
	byUUID map[string]*HostState
	sorted bool
	dense  dense
	// aggMeta is every host's aggregates' metadata, reloaded whenever an
	// aggregate changes; overridden counts, per multiplier option, the
	// hosts whose aggregates set it.
	aggMeta    map[string][]map[string]string
	overridden map[string]int
	// nodes is every provider; kids, per host's provider, the providers
	// of its tree below it; special counts the providers that are
	// children or share (MISC_SHARES_VIA_AGGREGATE): while it is 0 every
	// host is one provider and the flat checks decide. forest indexes
	// nodes for placement's candidate search (forestPos: its index of a
	// provider), rebuilt when a provider appears, goes, or changes its
	// traits or aggregates (stale), patched in place otherwise.
	nodes     map[string]*provNode
	kids      map[string]map[string]bool
	special   int
	forest    *placement.Forest
	forestPos map[string]int
	stale     bool
	// answers caches treeAllocations per request (its groups' query
	// string); dirty holds the roots whose trees changed since, or all.
	answers  map[string]*answer
	dirtyAll bool
	// usage is where each instance was last measured (indexUsage);
	// assumeFor how long a claim's assumed load waits for a measurement
	// that confirms it (SetMetricsMaxAge).
	usage     map[string]usageOf
	assumeFor time.Duration
}

// setMetrics sets how long the load a claim assumed on a host's measured
// view waits for a measurement that sees it ([metrics] max_age; 0: 60 s),
// and, when MetricsWeigher weighs (mult ≠ nil: its configured multiplier),
// has the dense rows keep its value.
func (v *View) setMetrics(mc MetricsConfig, mult *float64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.assumeFor = mc.MaxAge
	v.dense.metrics = nil
	if mult != nil {
		v.dense.metrics = &metricsSetting{cfg: mc, mult: *mult}
	}
	v.sorted = false // every row again, with or without the value
}

// setRecord takes a host's new record: its measured instances indexed,
// the assumed loads it accounts for dropped.
func (v *View) setRecord(h *HostState, rec records.HostRecord, ok bool) {
	old := h.Record
	h.Record, h.HasRecord = rec, ok
	v.indexUsage(h, old)
	assumeFor := v.assumeFor
	if assumeFor <= 0 {
		assumeFor = 60 * time.Second
	}
	h.pruneAssumed(assumeFor)
}

// provNode is one provider as the view holds it: its summary, and the
// root of its tree.
type provNode struct {
	sum  store.ProviderSummary
	root string
}

// shares reports whether the provider carries MISC_SHARES_VIA_AGGREGATE.
func (n *provNode) shares() bool {
	_, ok := slices.BinarySearch(n.sum.Traits, placement.SharesViaAggregate)
	return ok
}

// isHost reports whether the provider is a host's: a root that does not
// share.
func (n *provNode) isHost() bool { return n.sum.ParentUUID == "" && !n.shares() }

// special reports whether the provider makes the view a forest (a child,
// or a sharing provider).
func (n *provNode) special() bool { return n.sum.ParentUUID != "" || n.shares() }

// NewView builds a view for a policy and loads it fully.
func NewView(ctx context.Context, src Source, policy Policy) (*View, error) {
	v := &View{src: src, readsRecords: policy.ReadsRecords()}
	if err := v.reload(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// reload reads everything afresh. Called with mu held or before sharing.
func (v *View) reload(ctx context.Context) error {
	seq, err := v.src.LastChange(ctx)
	if err != nil {
		return fmt.Errorf("loading host view: %w", err)
	}
	sums, err := v.summaries(ctx, nil)
	if err != nil {
		return fmt.Errorf("loading host view providers: %w", err)
	}
	recs, err := v.src.ListHostRecords(ctx)
	if err != nil {
		return fmt.Errorf("loading host view records: %w", err)
	}
	svcs, err := v.src.ListServices(ctx)
	if err != nil {
		return fmt.Errorf("loading host view services: %w", err)
	}
	if err := v.loadAggregates(ctx); err != nil {
		return err
	}
	v.seq = seq
	v.hosts = v.hosts[:0]
	v.byName = make(map[string]*HostState, len(sums))
	v.byUUID = make(map[string]*HostState, len(sums))
	v.nodes = make(map[string]*provNode, len(sums))
	v.kids = map[string]map[string]bool{}
	v.special, v.stale = 0, true
	for _, s := range sums {
		v.nodes[s.UUID] = &provNode{sum: s}
	}
	for _, s := range sums {
		n := v.nodes[s.UUID]
		n.root = v.rootOf(s.UUID)
		v.link(n)
	}
	for _, s := range sums {
		if n := v.nodes[s.UUID]; n.isHost() {
			h := &HostState{Name: s.Name, Zone: "nova"}
			v.setHost(h, n)
			v.add(h)
		}
	}
	v.usage = nil
	for _, r := range recs {
		if h := v.byName[r.Host]; h != nil {
			v.setRecord(h, r, true)
		}
	}
	for _, s := range svcs {
		if h := v.byName[s.Host]; h != nil {
			h.setService(s)
		}
	}
	for _, h := range v.hosts {
		h.derive(v.readsRecords)
	}
	v.sorted = false
	return nil
}

func (v *View) add(h *HostState) {
	h.idx = -1
	h.setAggregates(v.aggMeta[h.Name])
	v.hosts = append(v.hosts, h)
	v.byName[h.Name] = h
	v.byUUID[h.ProviderUUID] = h
	v.sorted = false
}

func (h *HostState) setService(s records.Service) {
	h.HasService = true
	h.Disabled = s.Disabled
	h.ForcedDown = s.ForcedDown
	h.LastSeenUp = s.LastSeenUp
	if s.Zone != "" {
		h.Zone = s.Zone
	}
}

// Refresh applies every change the store has recorded since the last
// refresh.
func (v *View) Refresh(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.refreshLocked(ctx)
}

func (v *View) refreshLocked(ctx context.Context) error {
	for {
		chs, err := v.src.Changes(ctx, v.seq, changeBatch)
		if errors.Is(err, store.ErrChangesTrimmed) {
			return v.reload(ctx)
		}
		if err != nil {
			return fmt.Errorf("refreshing host view: %w", err)
		}
		if len(chs) == 0 {
			return nil
		}
		if err := v.apply(ctx, chs); err != nil {
			return err
		}
		v.seq = chs[len(chs)-1].Seq
		if len(chs) < changeBatch {
			return nil
		}
	}
}

func (v *View) apply(ctx context.Context, chs []store.Change) error {
	provs := map[string]bool{}
	hosts := map[string]bool{}
	svcs := map[string]bool{}
	aggs := false
	for _, c := range chs {
		switch c.Kind {
		case store.ChangeProvider:
			provs[c.Key] = true
		case store.ChangeHost:
			hosts[c.Key] = true
		case store.ChangeService:
			svcs[c.Key] = true
		case store.ChangeAggregate:
			aggs = true
		}
	}
	if aggs {
		if err := v.loadAggregates(ctx); err != nil {
			return err
		}
	}
	touched := map[*HostState]bool{}
	if len(provs) > 0 {
		uuids := make([]string, 0, len(provs))
		for u := range provs {
			uuids = append(uuids, u)
		}
		sort.Strings(uuids)
		sums, err := v.summaries(ctx, uuids)
		if err != nil {
			return fmt.Errorf("refreshing host view providers: %w", err)
		}
		found := map[string]bool{}
		for _, s := range sums {
			if old := v.nodes[s.UUID]; old != nil && (old.sum.ParentUUID != s.ParentUUID || old.shares() != (&provNode{sum: s}).shares()) {
				// A provider moved in its tree or started or stopped
				// sharing: read everything again (rare).
				return v.reload(ctx)
			}
		}
		var added []*provNode
		for _, s := range sums {
			if v.nodes[s.UUID] == nil {
				n := &provNode{sum: s}
				v.nodes[s.UUID] = n
				added = append(added, n)
			}
		}
		for _, n := range added {
			// Roots once every new provider is in: a new child's parent
			// may be new too.
			n.root = v.rootOf(n.sum.UUID)
			v.link(n)
			v.stale = true
		}
		for _, s := range sums {
			found[s.UUID] = true
			n := v.updateNode(s)
			if !n.isHost() {
				if h := v.byUUID[n.root]; h != nil && n.root != s.UUID {
					touched[h] = true
				}
				continue
			}
			h := v.byUUID[s.UUID]
			if h == nil {
				h = v.byName[s.Name]
			}
			if h == nil {
				h = &HostState{Name: s.Name, Zone: "nova"}
				v.setHost(h, n)
				v.add(h)
				v.loadHostExtras(ctx, h)
			} else {
				if h.ProviderUUID != s.UUID {
					// The host re-registered under a new provider: forget
					// the old UUID, so its removal does not remove the host.
					delete(v.byUUID, h.ProviderUUID)
				}
				v.setHost(h, n)
				v.byUUID[s.UUID] = h
			}
			touched[h] = true
		}
		for _, u := range uuids {
			if !found[u] {
				if n := v.nodes[u]; n != nil && n.root != u {
					if h := v.byUUID[n.root]; h != nil {
						touched[h] = true
					}
				}
				v.dropNode(u)
				v.remove(u)
			}
		}
	}
	for h := range touched {
		if n := v.nodes[h.ProviderUUID]; n != nil {
			v.setHost(h, n)
		}
	}
	for name := range hosts {
		if h := v.byName[name]; h != nil {
			rec, err := v.src.GetHostRecord(ctx, name)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("refreshing host record %s: %w", name, err)
			}
			v.setRecord(h, rec, err == nil)
			touched[h] = true
		}
	}
	for name := range svcs {
		if h := v.byName[name]; h != nil {
			s, err := v.src.GetService(ctx, name)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("refreshing service %s: %w", name, err)
			}
			if err == nil {
				h.setService(s)
				v.dense.sync(h)
			}
		}
	}
	for h := range touched {
		h.derive(v.readsRecords)
		v.dense.sync(h)
	}
	return nil
}

// loadAggregates reads every aggregate and merges each host's metadata.
// Aggregates are few and change rarely, so any change reloads them all.
func (v *View) loadAggregates(ctx context.Context) error {
	aggs, err := v.src.ListAggregates(ctx)
	if err != nil {
		return fmt.Errorf("loading host view aggregates: %w", err)
	}
	byHost := map[string][]map[string]string{}
	for _, a := range aggs {
		for _, h := range a.Hosts {
			byHost[h] = append(byHost[h], a.Metadata)
		}
	}
	v.setAggregates(byHost)
	return nil
}

// setAggregates takes every host's aggregates' metadata and applies it to
// the hosts in the view.
func (v *View) setAggregates(byHost map[string][]map[string]string) {
	v.aggMeta = byHost
	v.overridden = map[string]int{}
	for _, mds := range byHost {
		for k := range WeightMultipliers(mds) {
			v.overridden[k]++
		}
	}
	for _, h := range v.hosts {
		h.setAggregates(v.aggMeta[h.Name])
		if v.dense.metrics != nil {
			v.dense.sync(h) // MetricsWeigher's value reads the host's multiplier
		}
	}
}

// overrides reports whether some host's aggregates set a multiplier
// option.
func (v *View) overrides(option string) bool {
	return v.overridden[option] > 0
}

// loadHostExtras reads the record and service of a host that just appeared.
func (v *View) loadHostExtras(ctx context.Context, h *HostState) {
	if rec, err := v.src.GetHostRecord(ctx, h.Name); err == nil {
		v.setRecord(h, rec, true)
	}
	if s, err := v.src.GetService(ctx, h.Name); err == nil {
		h.setService(s)
	}
}

func (v *View) remove(uuid string) {
	h := v.byUUID[uuid]
	if h == nil || h.ProviderUUID != uuid {
		delete(v.byUUID, uuid)
		return
	}
	delete(v.byUUID, uuid)
	delete(v.byName, h.Name)
	for i, x := range v.hosts {
		if x == h {
			v.hosts = append(v.hosts[:i], v.hosts[i+1:]...)
			break
		}
	}
	v.sorted = false
}

// snapshot returns the hosts sorted by name; called with mu held. The
// returned slice must not be modified.
func (v *View) snapshot() []*HostState {
	if !v.sorted {
		sort.Slice(v.hosts, func(i, j int) bool { return v.hosts[i].Name < v.hosts[j].Name })
		v.dense.resize(len(v.hosts))
		for i, h := range v.hosts {
			h.idx = i
			v.dense.sync(h)
		}
		v.dense.rank.rebuild(v.dense.rows)
		v.sorted = true
	}
	return v.hosts
}

// indexWeigher keeps a rank order for a host-only weigher (its raw index),
// in the composite order too when its multiplier is positive; the next
// decision rebuilds the orders if this adds one.
func (v *View) indexWeigher(raw int, multiplier float64, fixedMin bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ri := &v.dense.rank
	composite := multiplier > 0
	if !ri.enabled[raw] || ri.inComp[raw] != composite || ri.fixedMin[raw] != fixedMin {
		ri.enabled[raw] = true
		ri.inComp[raw] = ri.inComp[raw] || composite
		ri.fixedMin[raw] = fixedMin
		ri.mult[raw] = multiplier
		v.sorted = false
	}
}

// Host returns a copy of one host's state.
func (v *View) Host(name string) (HostState, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	h := v.byName[name]
	if h == nil {
		return HostState{}, false
	}
	return *h, true
}

// HostZone returns a host's availability zone: the zone its aggregates
// name (the first, should they name several), else its service's ("" for
// a host the view does not know).
func (v *View) HostZone(name string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	h := v.byName[name]
	if h == nil {
		return ""
	}
	if azs := h.AggregateMetadata[ZoneKey]; len(azs) > 0 {
		return azs[0]
	}
	return h.Zone
}

// Len returns the number of hosts in the view.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.hosts)
}

// rootOf walks up from provider uuid to its tree's root (uuid itself for
// a root, or when a parent is missing).
func (v *View) rootOf(uuid string) string {
	cur := uuid
	for depth := 0; depth < 1000; depth++ {
		n := v.nodes[cur]
		if n == nil || n.sum.ParentUUID == "" || v.nodes[n.sum.ParentUUID] == nil {
			return cur
		}
		cur = n.sum.ParentUUID
	}
	return cur
}

// link counts n and files it under its root's tree.
func (v *View) link(n *provNode) {
	if n.special() {
		v.special++
	}
	if n.root != n.sum.UUID {
		k := v.kids[n.root]
		if k == nil {
			k = map[string]bool{}
			v.kids[n.root] = k
		}
		k[n.sum.UUID] = true
	}
}

// updateNode takes a provider's new summary (its place in the tree
// unchanged, as apply checks; a new provider already filed), keeping the
// forest current.
func (v *View) updateNode(s store.ProviderSummary) *provNode {
	n := v.nodes[s.UUID]
	if !slices.Equal(n.sum.Traits, s.Traits) || !slices.Equal(n.sum.Aggregates, s.Aggregates) {
		v.stale = true
	}
	before, sameInv := n.sum.Usage, sameInventories(n.sum.Inventories, s.Inventories)
	n.sum = s
	v.patchForest(n)
	v.touch(n, before, sameInv)
	return n
}

// touch marks the trees whose candidates n's change may change (before
// is its usage until now; sameInv says its inventories stayed): its own;
// for a provider that shares, every tree in an aggregate with it — but
// when only its usage grew, just the trees whose candidate takes from it
// an amount that no longer fits (a tree's first candidate that does not
// use the pool, or still fits, stays its first: those before it did not
// fit and fit less now).
func (v *View) touch(n *provNode, before placement.Resources, sameInv bool) {
	if v.dirtyAll || len(v.answers) == 0 {
		return
	}
	if n.shares() && sameInv && grewOnly(before, n.sum.Usage) {
		for _, a := range v.answers {
			for h, alloc := range a.allocs {
				for rc, amt := range alloc[n.sum.UUID] {
					if n.sum.Usage[rc]+amt > n.sum.Inventories[rc].Capacity() {
						if a.dirty == nil {
							a.dirty = map[string]bool{}
						}
						a.dirty[h.ProviderUUID] = true
						break
					}
				}
			}
		}
		return
	}
	mark := func(root string) {
		for _, a := range v.answers {
			if a.dirty == nil {
				a.dirty = map[string]bool{}
			}
			a.dirty[root] = true
		}
	}
	if !n.shares() {
		mark(n.root)
		return
	}
	for _, m := range v.nodes {
		for _, agg := range m.sum.Aggregates {
			if _, ok := slices.BinarySearch(n.sum.Aggregates, agg); ok {
				mark(m.root)
				break
			}
		}
	}
}

// grewOnly reports whether no class's usage went down from before to now.
func grewOnly(before, now placement.Resources) bool {
	for rc, n := range before {
		if now[rc] < n {
			return false
		}
	}
	return true
}

// sameInventories reports whether a and b hold the same inventories.
func sameInventories(a, b placement.Inventories) bool {
	if len(a) != len(b) {
		return false
	}
	for rc, inv := range a {
		if other, ok := b[rc]; !ok || other != inv {
			return false
		}
	}
	return true
}

// dropNode forgets a provider that is gone.
func (v *View) dropNode(uuid string) {
	n := v.nodes[uuid]
	if n == nil {
		return
	}
	if n.special() {
		v.special--
	}
	delete(v.kids[n.root], uuid)
	delete(v.kids, uuid)
	delete(v.nodes, uuid)
	v.stale = true
}

// patchForest copies a provider's inventories and usage into the forest.
func (v *View) patchForest(n *provNode) {
	if v.stale || v.forest == nil {
		return
	}
	if i, ok := v.forestPos[n.sum.UUID]; ok {
		v.forest.Update(i, n.sum.Inventories, n.sum.Usage)
	}
}

// setHost loads a host's totals from its provider n and the providers
// of its tree below it that do not share: what the flat checks and the
// weighers read.
func (v *View) setHost(h *HostState, n *provNode) {
	h.setProvider(n.sum.Provider, n.sum.Usage)
	kids := v.kids[n.sum.UUID]
	if len(kids) == 0 {
		return // a flat host: no sorted list to make (every refresh of a claimed host made one)
	}
	for _, u := range slices.Sorted(maps.Keys(kids)) {
		if k := v.nodes[u]; k != nil && !k.shares() {
			h.addChild(k.sum.Inventories, k.sum.Usage)
		}
	}
}

// forestLocked returns the forest of every provider, building it if a
// provider appeared, went or changed its traits or aggregates since.
func (v *View) forestLocked() *placement.Forest {
	if v.forest != nil && !v.stale {
		return v.forest
	}
	// Sharing providers last: a candidate search lists a class's
	// providers in this order, so a host's own provider comes before a
	// pool, and the first candidate (the one claimed) takes the pool only
	// when the host's own has no room.
	uuids := slices.SortedFunc(maps.Keys(v.nodes), func(a, b string) int {
		if sa, sb := v.nodes[a].shares(), v.nodes[b].shares(); sa != sb {
			if sa {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	pos := make(map[string]int, len(uuids))
	for i, u := range uuids {
		pos[u] = i
	}
	ps := make([]placement.CandidateProvider, len(uuids))
	for i, u := range uuids {
		n := v.nodes[u]
		parent := -1
		if j, ok := pos[n.sum.ParentUUID]; ok {
			parent = j
		}
		root, ok := pos[n.root]
		if !ok {
			root = i
		}
		ps[i] = placement.CandidateProvider{UUID: u, Parent: parent, Root: root,
			Inventories: n.sum.Inventories, Usage: n.sum.Usage, Traits: n.sum.Traits, Aggregates: n.sum.Aggregates}
	}
	v.forest, v.forestPos, v.stale = placement.NewForest(ps), pos, false
	v.dirtyAll = true // indexes changed: every cached answer goes
	return v.forest
}

// treeAllocations asks placement's candidate search for q over every
// provider and returns, per host with a candidate, the first one's
// allocation (provider UUID → resources). A candidate is a host's when
// a provider of that host's tree takes part in it (one made of sharing
// providers alone is nobody's).
//
// Answers are cached per request: the next decision asks the candidate
// search again only for the trees that changed since (a claim's, those
// the change stream names, every tree sharing a pool that changed), all
// of them when a provider appeared, went or changed its traits or
// aggregates.
func (v *View) treeAllocations(q placement.CandidateQuery) map[*HostState]map[string]placement.Resources {
	f := v.forestLocked()
	q.FirstPerTree = true
	key := q.String()
	if v.dirtyAll {
		clear(v.answers)
		v.dirtyAll = false
	}
	a := v.answers[key]
	if a == nil {
		if v.answers == nil || len(v.answers) >= 8 {
			v.answers = map[string]*answer{} // a few flavors at a time; no more kept
		}
		a = &answer{allocs: map[*HostState]map[string]placement.Resources{}}
		v.merge(a.allocs, f, q)
		v.answers[key] = a
		return a.allocs
	}
	if len(a.dirty) > 0 {
		q.Roots = make(map[int]bool, len(a.dirty))
		for u := range a.dirty {
			if i, ok := v.forestPos[u]; ok {
				q.Roots[i] = true
			}
			if h := v.byUUID[u]; h != nil {
				delete(a.allocs, h)
			}
		}
		a.dirty = nil
		v.merge(a.allocs, f, q)
	}
	return a.allocs
}

// answer is one request's cached candidates: each host's first, and the
// trees (root UUIDs) to ask again.
type answer struct {
	allocs map[*HostState]map[string]placement.Resources
	dirty  map[string]bool
}

// merge adds the first candidate of each host q finds to out.
func (v *View) merge(out map[*HostState]map[string]placement.Resources, f *placement.Forest, q placement.CandidateQuery) {
	reqs, _ := f.Candidates(q)
	for _, r := range reqs {
		var h *HostState
		for _, part := range r.Parts {
			p := &f.Providers[part.Provider]
			if hs := v.byUUID[f.Providers[p.Root].UUID]; hs != nil && hs.ProviderUUID == f.Providers[p.Root].UUID {
				if n := v.nodes[p.UUID]; n != nil && !n.shares() {
					h = hs
					break
				}
			}
		}
		if h == nil || out[h] != nil {
			continue
		}
		alloc := map[string]placement.Resources{}
		for _, part := range r.Parts {
			u := f.Providers[part.Provider].UUID
			if alloc[u] == nil {
				alloc[u] = placement.Resources{}
			}
			alloc[u][part.Class] += part.Amount
		}
		out[h] = alloc
	}
}

// consumeTree adds a claimed allocation to the providers' usage (the
// scheduler assumes its own claim until the change stream confirms it)
// and reloads the host's totals.
func (v *View) consumeTree(h *HostState, alloc map[string]placement.Resources, newGen int64) {
	for u, res := range alloc {
		n := v.nodes[u]
		if n == nil {
			continue
		}
		before := n.sum.Usage
		n.sum.Usage = n.sum.Usage.Clone().Add(res)
		if u == h.ProviderUUID && newGen > n.sum.Generation {
			n.sum.Generation = newGen
		}
		v.patchForest(n)
		v.touch(n, before, true)
	}
	if n := v.nodes[h.ProviderUUID]; n != nil {
		v.setHost(h, n)
	}
	h.derive(v.readsRecords)
	v.dense.sync(h)
}
