package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

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
}

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
	sums, err := v.src.ProviderSummaries(ctx, nil)
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
	for _, s := range sums {
		h := &HostState{Name: s.Name, Zone: "nova"}
		h.setProvider(s.Provider, s.Usage)
		v.add(h)
	}
	for _, r := range recs {
		if h := v.byName[r.Host]; h != nil {
			h.Record, h.HasRecord = r, true
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
		sums, err := v.src.ProviderSummaries(ctx, uuids)
		if err != nil {
			return fmt.Errorf("refreshing host view providers: %w", err)
		}
		found := map[string]bool{}
		for _, s := range sums {
			found[s.UUID] = true
			h := v.byUUID[s.UUID]
			if h == nil {
				h = v.byName[s.Name]
			}
			if h == nil {
				h = &HostState{Name: s.Name, Zone: "nova"}
				h.setProvider(s.Provider, s.Usage)
				v.add(h)
				v.loadHostExtras(ctx, h)
			} else {
				if h.ProviderUUID != s.UUID {
					// The host re-registered under a new provider: forget
					// the old UUID, so its removal does not remove the host.
					delete(v.byUUID, h.ProviderUUID)
				}
				h.setProvider(s.Provider, s.Usage)
				v.byUUID[s.UUID] = h
			}
			touched[h] = true
		}
		for _, u := range uuids {
			if !found[u] {
				v.remove(u)
			}
		}
	}
	for name := range hosts {
		if h := v.byName[name]; h != nil {
			rec, err := v.src.GetHostRecord(ctx, name)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("refreshing host record %s: %w", name, err)
			}
			h.Record, h.HasRecord = rec, err == nil
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
		h.Record, h.HasRecord = rec, true
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

// indexWeigher keeps a rank order for a host-only weigher (its raw index);
// the next decision rebuilds the orders if this adds one.
func (v *View) indexWeigher(raw int, multiplier float64, composite bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ri := &v.dense.rank
	if !ri.enabled[raw] || ri.inComp[raw] != composite {
		ri.enabled[raw] = true
		ri.inComp[raw] = ri.inComp[raw] || composite
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
