package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// hostViewStore is what the host view follows: providers, host records
// and services, aggregates, and the change stream.
type hostViewStore interface {
	store.Providers
	store.Hosts
	store.Groups
	store.Changes
}

// hostView is the web view's and the per-host metrics' picture of every
// host: providers (inventories and usage from allocations, i.e. claims),
// host records, services and aggregates, kept current by following the
// store's change stream, as the scheduler's view does (that view has no
// listing of its own to read).
type hostView struct {
	st hostViewStore

	mu    sync.Mutex
	seq   int64
	ready bool
	provs map[string]store.ProviderSummary // by provider UUID
	recs  map[string]records.HostRecord    // by host
	svcs  map[string]records.Service       // by host
	aggs  []records.Aggregate
	// forest is every provider for placement's candidate search (nil
	// after a provider changed: built again when asked for).
	forest *providerForest
}

func newHostView(st hostViewStore) *hostView {
	return &hostView{st: st}
}

// viewHost is one host as the view knows it.
type viewHost struct {
	Name       string
	Provider   store.ProviderSummary
	Record     records.HostRecord
	HasRecord  bool
	Service    records.Service
	HasService bool
	Zone       string
	Aggregates []string // names, sorted
	// Capacity and Used are per class over the host's whole tree: its
	// root provider and every descendant (NUMA cells, PFs), not the pools
	// it shares. Capacity is (total − reserved) × allocation_ratio.
	Capacity, Used map[placement.ResourceClass]int64
	// Nested lists the classes some descendant contributes to.
	Nested map[placement.ResourceClass]bool
}

// viewChanges says what a refresh changed.
type viewChanges struct {
	Providers bool // inventories or allocations: claims came or went
	Other     bool // host records, services, aggregates
}

func (c viewChanges) any() bool { return c.Providers || c.Other }

// refresh applies the changes since the last call.
func (v *hostView) refresh(ctx context.Context) (viewChanges, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ready {
		return viewChanges{true, true}, v.reloadLocked(ctx)
	}
	var changed viewChanges
	for {
		chs, err := v.st.Changes(ctx, v.seq, 4096)
		if errors.Is(err, store.ErrChangesTrimmed) {
			return viewChanges{true, true}, v.reloadLocked(ctx)
		}
		if err != nil {
			return changed, fmt.Errorf("web view: reading the change stream: %w", err)
		}
		if len(chs) == 0 {
			return changed, nil
		}
		for _, c := range chs {
			if c.Kind == store.ChangeProvider {
				changed.Providers = true
			} else {
				changed.Other = true
			}
		}
		if err := v.applyLocked(ctx, chs); err != nil {
			return changed, err
		}
		v.seq = chs[len(chs)-1].Seq
		if len(chs) < 4096 {
			return changed, nil
		}
	}
}

func (v *hostView) reloadLocked(ctx context.Context) error {
	seq, err := v.st.LastChange(ctx)
	if err != nil {
		return fmt.Errorf("web view: %w", err)
	}
	sums, err := v.st.ProviderSummaries(ctx, nil)
	if err != nil {
		return fmt.Errorf("web view: loading providers: %w", err)
	}
	if err := v.loadRecordsLocked(ctx); err != nil {
		return err
	}
	if err := v.loadServicesLocked(ctx); err != nil {
		return err
	}
	aggs, err := v.st.ListAggregates(ctx)
	if err != nil {
		return fmt.Errorf("web view: loading aggregates: %w", err)
	}
	v.forest = nil
	v.provs = make(map[string]store.ProviderSummary, len(sums))
	for _, s := range sums {
		v.provs[s.UUID] = s
	}
	v.aggs, v.seq, v.ready = aggs, seq, true
	return nil
}

// loadRecordsLocked reads every host record again.
func (v *hostView) loadRecordsLocked(ctx context.Context) error {
	recs, err := v.st.ListHostRecords(ctx)
	if err != nil {
		return fmt.Errorf("web view: loading host records: %w", err)
	}
	v.recs = make(map[string]records.HostRecord, len(recs))
	for _, r := range recs {
		v.recs[r.Host] = r
	}
	return nil
}

// loadServicesLocked reads every compute service again.
func (v *hostView) loadServicesLocked(ctx context.Context) error {
	svcs, err := v.st.ListServices(ctx)
	if err != nil {
		return fmt.Errorf("web view: loading services: %w", err)
	}
	v.svcs = make(map[string]records.Service, len(svcs))
	for _, s := range svcs {
		if s.IsCompute() {
			v.svcs[s.Host] = s
		}
	}
	return nil
}

// listBeyond: with a store that reads one host at a time, once more
// than 1/listBeyond of the view's host records (or services) changed,
// they are all read again with one listing rather than one read each. A
// point read costs about as much as eleven rows of a listing (SQLite,
// 2,000 hosts: 210 µs against 19), so a view read rarely, with every
// agent reporting every 10 s, costs at most about a listing, not one
// read per host.
const listBeyond = 10

// listBeyondBatch is listBeyond for a store that reads many hosts by key
// in one query (store.HostBatchReader): a row read so costs about what a
// listed row does, so the view lists only once more than half changed.
const listBeyondBatch = 2

func (v *hostView) applyLocked(ctx context.Context, chs []store.Change) error {
	var provs, hosts, svcs []string
	seen := map[store.Change]bool{}
	aggs := false
	for _, c := range chs {
		k := store.Change{Kind: c.Kind, Key: c.Key}
		if seen[k] {
			continue
		}
		seen[k] = true
		switch c.Kind {
		case store.ChangeProvider:
			provs = append(provs, c.Key)
		case store.ChangeHost:
			hosts = append(hosts, c.Key)
		case store.ChangeService:
			svcs = append(svcs, c.Key)
		case store.ChangeAggregate:
			aggs = true
		}
	}
	if err := v.readRecordsLocked(ctx, hosts); err != nil {
		return err
	}
	if err := v.readServicesLocked(ctx, svcs); err != nil {
		return err
	}
	if len(provs) > 0 {
		v.forest = nil
		sums, err := v.st.ProviderSummaries(ctx, provs)
		if err != nil {
			return fmt.Errorf("web view: reading providers: %w", err)
		}
		got := map[string]bool{}
		for _, s := range sums {
			v.provs[s.UUID] = s
			got[s.UUID] = true
		}
		for _, u := range provs {
			if !got[u] {
				delete(v.provs, u) // deleted
			}
		}
	}
	if aggs {
		a, err := v.st.ListAggregates(ctx)
		if err != nil {
			return fmt.Errorf("web view: loading aggregates: %w", err)
		}
		v.aggs = a
	}
	return nil
}

// listAll says whether n changed rows of a view of have rows are read
// again with one listing rather than by key.
func (v *hostView) listAll(n, have int) bool {
	beyond := listBeyond
	if _, ok := v.st.(store.HostBatchReader); ok {
		beyond = listBeyondBatch
	}
	return n > 1 && n > have/beyond
}

// readRecordsLocked reads the host records of hosts, which changed,
// again: all of them with one listing if many changed, else by key (in
// one query per batch, where the store can).
func (v *hostView) readRecordsLocked(ctx context.Context, hosts []string) error {
	switch b, batch := v.st.(store.HostBatchReader); {
	case len(hosts) == 0:
		return nil
	case v.listAll(len(hosts), len(v.recs)):
		return v.loadRecordsLocked(ctx)
	case batch:
		recs, err := b.GetHostRecords(ctx, hosts)
		if err != nil {
			return fmt.Errorf("web view: %w", err)
		}
		for _, h := range hosts {
			delete(v.recs, h) // left out of the read: deleted
		}
		for _, r := range recs {
			v.recs[r.Host] = r
		}
		return nil
	}
	for _, h := range hosts {
		r, err := v.st.GetHostRecord(ctx, h)
		if errors.Is(err, store.ErrNotFound) {
			delete(v.recs, h)
		} else if err != nil {
			return fmt.Errorf("web view: reading host record %s: %w", h, err)
		} else {
			v.recs[h] = r
		}
	}
	return nil
}

// readServicesLocked reads the services of hosts, which changed, again,
// as readRecordsLocked reads host records; only compute services are
// kept.
func (v *hostView) readServicesLocked(ctx context.Context, hosts []string) error {
	switch b, batch := v.st.(store.HostBatchReader); {
	case len(hosts) == 0:
		return nil
	case v.listAll(len(hosts), len(v.svcs)):
		return v.loadServicesLocked(ctx)
	case batch:
		svcs, err := b.GetServices(ctx, hosts)
		if err != nil {
			return fmt.Errorf("web view: %w", err)
		}
		for _, h := range hosts {
			delete(v.svcs, h)
		}
		for _, s := range svcs {
			if s.IsCompute() {
				v.svcs[s.Host] = s
			}
		}
		return nil
	}
	for _, h := range hosts {
		s, err := v.st.GetService(ctx, h)
		if errors.Is(err, store.ErrNotFound) {
			delete(v.svcs, h)
		} else if err != nil {
			return fmt.Errorf("web view: reading service %s: %w", h, err)
		} else if s.IsCompute() {
			v.svcs[h] = s
		}
	}
	return nil
}

// ComputeHosts implements computeapi.HostLister: the view, brought up to
// date with the change stream first, so the hypervisor calls decode only
// the records that changed since the view was last read.
func (v *hostView) ComputeHosts(ctx context.Context) ([]records.HostRecord, map[string]records.Service, error) {
	if _, err := v.refresh(ctx); err != nil {
		return nil, nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	recs := make([]records.HostRecord, 0, len(v.recs))
	for _, h := range slices.Sorted(maps.Keys(v.recs)) {
		recs = append(recs, v.recs[h])
	}
	return recs, maps.Clone(v.svcs), nil
}

// hosts returns every root provider's host (sharing pools are not
// hosts), sorted by name.
func (v *hostView) hosts() []viewHost {
	v.mu.Lock()
	defer v.mu.Unlock()
	aggsOf := map[string][]string{}
	zoneOf := map[string]string{}
	for _, a := range v.aggs {
		for _, h := range a.Hosts {
			aggsOf[h] = append(aggsOf[h], a.Name)
			if z := a.Zone(); z != "" && zoneOf[h] == "" {
				zoneOf[h] = z
			}
		}
	}
	sums := make([]store.ProviderSummary, 0, len(v.provs))
	for _, p := range v.provs {
		sums = append(sums, p)
	}
	trees := store.HostTrees(sums)
	out := make([]viewHost, 0, len(trees))
	for _, t := range trees {
		p := t.Root
		h := viewHost{Name: p.Name, Provider: p, Capacity: t.Capacity, Used: t.Used, Nested: t.Nested}
		h.Record, h.HasRecord = v.recs[p.Name]
		h.Service, h.HasService = v.svcs[p.Name]
		h.Zone = zoneOf[p.Name]
		if h.Zone == "" {
			h.Zone = h.Service.Zone
		}
		if h.Zone == "" {
			h.Zone = "nova"
		}
		h.Aggregates = aggsOf[p.Name]
		sort.Strings(h.Aggregates)
		out = append(out, h)
	}
	return out
}

// stdClasses are the classes the view colours hosts by.
var stdClasses = []placement.ResourceClass{placement.VCPU, placement.MemoryMB, placement.DiskGB}

// fill is used over capacity ((total − reserved) × allocation_ratio) of
// one class over the host's tree (its NUMA cells' memory is the host's);
// ok is false when the host has no such inventory.
func fill(h viewHost, rc placement.ResourceClass) (f float64, ok bool) {
	c, ok := h.Capacity[rc]
	if !ok {
		return 0, false
	}
	if c <= 0 {
		return 1, true
	}
	return float64(h.Used[rc]) / float64(c), true
}

// up says whether a host's service is up (not forced down, heard from
// within downTime).
func up(h viewHost, now time.Time, downTime time.Duration) bool {
	if !h.HasService || h.Service.ForcedDown {
		return false
	}
	return downTime <= 0 || now.Sub(h.Service.LastSeenUp) <= downTime
}

// imbalance is the coefficient of variation (stddev / mean) of the
// classes' fill over the given hosts; 0 for a mean of 0.
func imbalance(hs []viewHost) map[placement.ResourceClass]float64 {
	out := map[placement.ResourceClass]float64{}
	for _, rc := range stdClasses {
		var xs []float64
		for _, h := range hs {
			if f, ok := fill(h, rc); ok {
				xs = append(xs, f)
			}
		}
		out[rc] = cv(xs)
	}
	return out
}

func cv(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	if mean == 0 {
		return 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss/float64(len(xs))) / mean
}

// providerForest is every provider as placement's candidate search reads
// it, with each root's host name.
type providerForest struct {
	f    *placement.Forest
	host []string // per provider: its root's name
}

// providers returns the forest of every provider, built again after a
// provider changed. Sharing providers come last, as in the scheduler's
// view (a host's own provider is the first candidate, a pool the next).
func (v *hostView) providers() *providerForest {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.forest != nil {
		return v.forest
	}
	shares := func(p store.ProviderSummary) bool {
		_, ok := slices.BinarySearch(p.Traits, placement.SharesViaAggregate)
		return ok
	}
	uuids := slices.SortedFunc(maps.Keys(v.provs), func(a, b string) int {
		if sa, sb := shares(v.provs[a]), shares(v.provs[b]); sa != sb {
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
	rootOf := func(u string) string {
		for range len(uuids) { // a parent loop cannot hold it forever
			p := v.provs[u]
			if _, ok := v.provs[p.ParentUUID]; p.ParentUUID == "" || !ok {
				return u
			}
			u = p.ParentUUID
		}
		return u
	}
	ps := make([]placement.CandidateProvider, len(uuids))
	pf := &providerForest{host: make([]string, len(uuids))}
	for i, u := range uuids {
		p := v.provs[u]
		parent, ok := pos[p.ParentUUID]
		if p.ParentUUID == "" || !ok {
			parent = -1
		}
		root := rootOf(u)
		ps[i] = placement.CandidateProvider{UUID: u, Parent: parent, Root: pos[root],
			Inventories: p.Inventories, Usage: p.Usage, Traits: p.Traits, Aggregates: p.Aggregates}
		if !shares(p) {
			pf.host[i] = v.provs[root].Name
		}
	}
	pf.f = placement.NewForest(ps)
	v.forest = pf
	return pf
}

// fitsOn lists the hosts (of those ok accepts) on which flavor f fits now,
// as the scheduler's placement step decides it: its request groups
// (placement.FlavorQuery: extra specs, granular groups, traits) asked of
// placement's candidate search over provider trees (children) and sharing
// providers. A candidate counts for the host whose own tree takes part in
// it. nil when the flavor asks for something placement refuses.
func (pf *providerForest) fitsOn(f records.Flavor, ok func(host string) bool) []string {
	q, err := placement.FlavorQuery(f.Resources(), f.ExtraSpecs)
	if err != nil {
		return nil
	}
	q.FirstPerTree = true
	reqs, _ := pf.f.Candidates(q)
	seen := map[string]bool{}
	var out []string
	for _, r := range reqs {
		for _, part := range r.Parts {
			if h := pf.host[part.Provider]; h != "" {
				if !seen[h] && ok(h) {
					seen[h] = true
					out = append(out, h)
				}
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// aggregatesLabel joins a host's aggregate names as openstack-exporter
// does.
func aggregatesLabel(h viewHost) string { return strings.Join(h.Aggregates, ",") }
