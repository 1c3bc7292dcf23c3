// Package memory is an in-memory store.Store, used by the simulator and by
// tests. One mutex serialises every call, which makes each call atomic; it
// passes the same conformance suite as the durable stores.
package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// maxChanges is how many change-stream entries are kept; older readers get
// store.ErrChangesTrimmed and reload.
const maxChanges = 1 << 18

// Store is the in-memory store.
type Store struct {
	mu         sync.Mutex
	providers  map[string]*placement.Provider
	names      map[string]string // name → uuid
	usage      map[string]placement.Resources
	consumers  map[string]consumerRec          // consumers.go
	byProvider map[string][]placement.Consumer // provider → its consumers' headers (no allocations), by UUID
	ids        ids                             // numbers for consumerRec
	hosts      map[string]records.HostRecord
	services   map[string]records.Service
	instances  map[string]instRec // instances.go
	// plainFlavors are the instances' flavors without extra specs or
	// projects, one copy each (instFlavor).
	plainFlavors map[flavorKey]*records.Flavor
	migrations   map[int64]records.Migration
	flavors      map[string]records.Flavor
	quotas       map[string]map[string]int64
	keyPairs     map[[2]string]records.KeyPair // by (user, name)
	nextKeyID    int64
	traits       map[string]bool                  // created (custom) traits
	classes      map[placement.ResourceClass]bool // created (custom) resource classes
	activeMigs   map[int64]bool                   // not in a terminal status: ListMigrations(ActiveOnly) reads only these
	aggregates   map[int64]records.Aggregate
	nextAggID    int64
	groups       map[string]records.ServerGroup
	actions      map[string][]records.InstanceAction // by instance UUID, oldest first
	nextMigID    int64
	changes      []store.Change
	seq          int64
	plans        planTable
	ident        identityTable
}

// The store's roles, each asserted, so that a reader of a role finds its
// implementers here (and in the other stores).
var (
	_ store.Providers     = (*Store)(nil)
	_ store.Allocations   = (*Store)(nil)
	_ store.Placement     = (*Store)(nil)
	_ store.Hosts         = (*Store)(nil)
	_ store.Instances     = (*Store)(nil)
	_ store.Migrations    = (*Store)(nil)
	_ store.Flavors       = (*Store)(nil)
	_ store.Groups        = (*Store)(nil)
	_ store.KeyPairs      = (*Store)(nil)
	_ store.Quotas        = (*Store)(nil)
	_ store.Plans         = (*Store)(nil)
	_ store.Records       = (*Store)(nil)
	_ store.IdentityStore = (*Store)(nil)
	_ store.Changes       = (*Store)(nil)
	_ store.Store         = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	return &Store{
		providers:    map[string]*placement.Provider{},
		names:        map[string]string{},
		usage:        map[string]placement.Resources{},
		consumers:    map[string]consumerRec{},
		byProvider:   map[string][]placement.Consumer{},
		hosts:        map[string]records.HostRecord{},
		services:     map[string]records.Service{},
		instances:    map[string]instRec{},
		plainFlavors: map[flavorKey]*records.Flavor{},
		migrations:   map[int64]records.Migration{},
		flavors:      map[string]records.Flavor{},
		quotas:       map[string]map[string]int64{},
		keyPairs:     map[[2]string]records.KeyPair{},
		traits:       map[string]bool{},
		classes:      map[placement.ResourceClass]bool{},
		actions:      map[string][]records.InstanceAction{},
		activeMigs:   map[int64]bool{},
		aggregates:   map[int64]records.Aggregate{},
		groups:       map[string]records.ServerGroup{},
	}
}

func (s *Store) note(kind store.ChangeKind, key string) {
	s.seq++
	s.changes = append(s.changes, store.Change{Seq: s.seq, Kind: kind, Key: key})
	if len(s.changes) > maxChanges {
		// In place: Changes hands out copies, so nothing else holds these
		// entries (a new slice each time was most of what noting cost).
		n := copy(s.changes, s.changes[len(s.changes)-maxChanges/2:])
		clear(s.changes[n:])
		s.changes = s.changes[:n]
	}
}

// CreateProvider implements store.Store.
func (s *Store) CreateProvider(_ context.Context, p placement.Provider) (placement.Provider, error) {
	if p.UUID == "" || p.Name == "" {
		return placement.Provider{}, &placement.InvalidError{Msg: "provider needs a uuid and a name"}
	}
	p.Inventories = p.Inventories.WithDefaults()
	if err := p.Inventories.Validate(); err != nil {
		return placement.Provider{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.providers[p.UUID]; ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", p.UUID, store.ErrExists)
	}
	if _, ok := s.names[p.Name]; ok {
		return placement.Provider{}, fmt.Errorf("provider name %q: %w", p.Name, store.ErrExists)
	}
	if err := s.checkNewProvider(p); err != nil {
		return placement.Provider{}, err
	}
	p.Generation = 0
	if len(p.Inventories) > 0 {
		p.Generation = 1
	}
	p = p.Clone()
	p.Traits, p.Aggregates = placement.NormalizeNames(p.Traits), placement.NormalizeNames(p.Aggregates)
	s.providers[p.UUID] = &p
	s.names[p.Name] = p.UUID
	s.note(store.ChangeProvider, p.UUID)
	return clone(p), nil
}

func clone(p placement.Provider) placement.Provider { return p.Clone() }

// GetProvider implements store.Store.
func (s *Store) GetProvider(_ context.Context, uuid string) (placement.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	return clone(*p), nil
}

// ProviderSummaries implements store.Store.
func (s *Store) ProviderSummaries(_ context.Context, uuids []string) ([]store.ProviderSummary, error) {
	return s.summaries(uuids, clone), nil
}

// SharedProviderSummaries is ProviderSummaries with each provider's
// inventories, traits and aggregates shared with the store, not copied
// (its usage is copied): the caller must not change them. The store never
// changes them in place — it replaces them whole — so they stay as they
// were read (scheduler.SharingSource).
func (s *Store) SharedProviderSummaries(_ context.Context, uuids []string) ([]store.ProviderSummary, error) {
	return s.summaries(uuids, func(p placement.Provider) placement.Provider { return p }), nil
}

func (s *Store) summaries(uuids []string, copyOf func(placement.Provider) placement.Provider) []store.ProviderSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	if uuids == nil {
		for u := range s.providers {
			uuids = append(uuids, u)
		}
		sort.Strings(uuids)
	}
	out := make([]store.ProviderSummary, 0, len(uuids))
	for _, u := range uuids {
		p, ok := s.providers[u]
		if !ok {
			continue
		}
		out = append(out, store.ProviderSummary{Provider: copyOf(*p), Usage: s.usage[u].Clone()})
	}
	return out
}

// SetInventories implements store.Store.
func (s *Store) SetInventories(_ context.Context, uuid string, gen int64, invs placement.Inventories) (placement.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	invs = invs.WithDefaults()
	if err := placement.CheckInventoryUpdate(*p, s.usage[uuid], gen, invs); err != nil {
		return placement.Provider{}, fmt.Errorf("setting inventories of %s: %w", uuid, err)
	}
	p.Inventories = invs.Clone()
	p.Generation++
	s.note(store.ChangeProvider, uuid)
	return clone(*p), nil
}

// DeleteProvider implements store.Store.
func (s *Store) DeleteProvider(_ context.Context, uuid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.providers[uuid]
	if !ok {
		return fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	if len(s.byProvider[uuid]) > 0 {
		return fmt.Errorf("deleting provider %s: %w", uuid, &placement.InUseError{Provider: uuid})
	}
	for _, q := range s.providers {
		if q.ParentUUID == uuid {
			return fmt.Errorf("deleting provider %s: parent of %s: %w", uuid, q.UUID, store.ErrHasChildren)
		}
	}
	delete(s.providers, uuid)
	delete(s.names, p.Name)
	delete(s.usage, uuid)
	s.note(store.ChangeProvider, uuid)
	return nil
}

// GetConsumer implements store.Store.
func (s *Store) GetConsumer(_ context.Context, uuid string) (placement.Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.consumers[uuid]
	if !ok {
		return placement.Consumer{}, fmt.Errorf("consumer %s: %w", uuid, store.ErrNotFound)
	}
	return s.ids.consumer(uuid, &c), nil
}

// ConsumersOn implements store.Store.
func (s *Store) ConsumersOn(_ context.Context, providerUUID string) ([]placement.Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	heads := s.byProvider[providerUUID]
	out := make([]placement.Consumer, len(heads))
	for i, h := range heads {
		c := s.consumers[h.UUID]
		out[i] = s.ids.consumer(h.UUID, &c)
	}
	return out, nil
}

// ConsumerHeadersOn is ConsumersOn without the allocations (each
// consumer's Allocations is nil): what the resource tracker's audit reads
// of every consumer on its host (compute.ConsumerLister), without a copy
// of every allocation.
func (s *Store) ConsumerHeadersOn(_ context.Context, providerUUID string) ([]placement.Consumer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	heads := s.byProvider[providerUUID]
	out := make([]placement.Consumer, len(heads))
	copy(out, heads)
	return out, nil
}

// WriteAllocations implements store.Store.
func (s *Store) WriteAllocations(_ context.Context, writes ...placement.AllocationWrite) (placement.WritePlan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := placement.WriteState{Providers: map[string]placement.ProviderState{}, Consumers: map[string]placement.Consumer{}}
	for _, w := range writes {
		if c, ok := s.consumers[w.ConsumerUUID]; ok {
			st.Consumers[w.ConsumerUUID] = s.ids.consumer(w.ConsumerUUID, &c)
		}
		for p := range w.ProviderGenerations {
			s.addProviderState(st, p)
		}
	}
	for _, p := range placement.ProvidersTouched(st.Consumers, writes) {
		s.addProviderState(st, p)
	}
	plan, err := placement.PlanWrites(st, writes)
	if err != nil {
		return placement.WritePlan{}, err
	}
	s.apply(plan)
	return plan, nil
}

// apply persists an allocation plan (s.mu held).
func (s *Store) apply(plan placement.WritePlan) {
	for _, ch := range plan.Consumers {
		if old, ok := s.consumers[ch.UUID]; ok {
			old.eachProvider(func(pi int32, es []allocEntry) {
				p := s.ids.provs[pi]
				u := s.usageOf(p)
				for _, e := range es {
					if e.class != noClass {
						rc := s.ids.classes[e.class]
						if u[rc] -= e.n; u[rc] == 0 {
							delete(u, rc)
						}
					}
				}
				s.dropConsumerOn(p, ch.UUID)
			})
			delete(s.consumers, ch.UUID)
		}
		if ch.New == nil {
			continue
		}
		rec := s.ids.pack(ch.New)
		s.consumers[ch.UUID] = rec
		head := rec.header(ch.UUID)
		rec.eachProvider(func(pi int32, es []allocEntry) {
			p := s.ids.provs[pi]
			u := s.usageOf(p)
			for _, e := range es {
				if e.class != noClass {
					rc := s.ids.classes[e.class]
					u[rc] = placement.AddAmounts(u[rc], e.n)
				}
			}
			s.addConsumerOn(p, head)
		})
	}
	for _, p := range slices.Sorted(maps.Keys(plan.Providers)) {
		s.providers[p].Generation = plan.Providers[p]
		s.note(store.ChangeProvider, p)
	}
}

// usageOf is provider p's usage, made if it has none yet (as
// Resources.Add and Sub make it). Called with mu held.
func (s *Store) usageOf(p string) placement.Resources {
	u := s.usage[p]
	if u == nil {
		u = placement.Resources{}
		s.usage[p] = u
	}
	return u
}

// Reshape implements store.Store.
func (s *Store) Reshape(_ context.Context, invs []placement.InventoryWrite, writes []placement.AllocationWrite) (placement.ReshapePlan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := placement.WriteState{Providers: map[string]placement.ProviderState{}, Consumers: map[string]placement.Consumer{}}
	for _, w := range writes {
		if c, ok := s.consumers[w.ConsumerUUID]; ok {
			st.Consumers[w.ConsumerUUID] = s.ids.consumer(w.ConsumerUUID, &c)
		}
	}
	for _, iw := range invs {
		s.addProviderState(st, iw.UUID)
	}
	for _, p := range placement.ProvidersTouched(st.Consumers, writes) {
		s.addProviderState(st, p)
	}
	plan, err := placement.PlanReshape(st, invs, writes)
	if err != nil {
		return placement.ReshapePlan{}, fmt.Errorf("reshaping: %w", err)
	}
	for u, next := range plan.Inventories {
		s.providers[u].Inventories = next.Clone()
	}
	s.apply(plan.WritePlan)
	return plan, nil
}

func (s *Store) addProviderState(st placement.WriteState, uuid string) {
	if _, done := st.Providers[uuid]; done {
		return
	}
	p, ok := s.providers[uuid]
	if !ok {
		return
	}
	st.Providers[uuid] = placement.ProviderState{UUID: uuid, Generation: p.Generation, Inventories: p.Inventories, Usage: s.usage[uuid]}
}

// PutHostRecord implements store.Store.
func (s *Store) PutHostRecord(_ context.Context, h records.HostRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hosts[h.Host] = h
	s.note(store.ChangeHost, h.Host)
	return nil
}

// PutHostRecords implements store.HostRecordBatch.
func (s *Store) PutHostRecords(_ context.Context, recs []records.HostRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range recs {
		s.hosts[h.Host] = h
		s.note(store.ChangeHost, h.Host)
	}
	return nil
}

// GetHostRecord implements store.Store.
func (s *Store) GetHostRecord(_ context.Context, host string) (records.HostRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.hosts[host]
	if !ok {
		return h, fmt.Errorf("host record %s: %w", host, store.ErrNotFound)
	}
	return h, nil
}

// ListHostRecords implements store.Store.
func (s *Store) ListHostRecords(_ context.Context) ([]records.HostRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]records.HostRecord, 0, len(s.hosts))
	for _, k := range slices.Sorted(maps.Keys(s.hosts)) {
		out = append(out, s.hosts[k])
	}
	return out, nil
}

// GetHostRecords implements store.HostBatchReader.
func (s *Store) GetHostRecords(_ context.Context, hosts []string) ([]records.HostRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return byKeys(s.hosts, hosts), nil
}

// GetServices implements store.HostBatchReader.
func (s *Store) GetServices(_ context.Context, hosts []string) ([]records.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return byKeys(s.services, hosts), nil
}

// byKeys returns m's values of keys that are in m, sorted by key and
// each once.
func byKeys[T any](m map[string]T, keys []string) []T {
	out := []T{}
	for _, k := range slices.Compact(slices.Sorted(slices.Values(keys))) {
		if v, ok := m[k]; ok {
			out = append(out, v)
		}
	}
	return out
}

// PutService implements store.Store.
func (s *Store) PutService(_ context.Context, sv records.Service) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services[sv.Host] = sv
	s.note(store.ChangeService, sv.Host)
	return nil
}

// UpdateService implements store.Store.
func (s *Store) UpdateService(_ context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.services[host]
	if !ok {
		return sv, fmt.Errorf("service %s: %w", host, store.ErrNotFound)
	}
	if err := fn(&sv); err != nil {
		return records.Service{}, err
	}
	sv.Host = host
	s.services[host] = sv
	s.note(store.ChangeService, host)
	return sv, nil
}

// UpdateServices implements store.ServiceBatch.
func (s *Store) UpdateServices(_ context.Context, hosts []string, fn func(i int, s *records.Service) error) ([]records.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]records.Service, len(hosts))
	for i, host := range hosts {
		sv, ok := s.services[host]
		if !ok {
			return nil, fmt.Errorf("service %s: %w", host, store.ErrNotFound)
		}
		if err := fn(i, &sv); err != nil {
			return nil, err
		}
		sv.Host = host
		out[i] = sv
	}
	for _, sv := range out {
		s.services[sv.Host] = sv
		s.note(store.ChangeService, sv.Host)
	}
	return out, nil
}

// GetService implements store.Store.
func (s *Store) GetService(_ context.Context, host string) (records.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.services[host]
	if !ok {
		return sv, fmt.Errorf("service %s: %w", host, store.ErrNotFound)
	}
	return sv, nil
}

// ListServices implements store.Store.
func (s *Store) ListServices(_ context.Context) ([]records.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]records.Service, 0, len(s.services))
	for _, k := range slices.Sorted(maps.Keys(s.services)) {
		out = append(out, s.services[k])
	}
	return out, nil
}

// CreateInstance implements store.Store.
func (s *Store) CreateInstance(_ context.Context, in records.Instance) (records.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.instances[in.UUID]; ok {
		return records.Instance{}, fmt.Errorf("instance %s: %w", in.UUID, store.ErrExists)
	}
	in.Version = 1
	s.instances[in.UUID] = s.packInstance(in)
	return in, nil
}

// GetInstance implements store.Store.
func (s *Store) GetInstance(_ context.Context, uuid string) (records.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.instances[uuid]
	if !ok {
		return records.Instance{}, fmt.Errorf("instance %s: %w", uuid, store.ErrNotFound)
	}
	return unpackInstance(uuid, &r), nil
}

// UpdateInstance implements store.Store.
func (s *Store) UpdateInstance(_ context.Context, in records.Instance) (records.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.instances[in.UUID]
	if !ok {
		return records.Instance{}, fmt.Errorf("instance %s: %w", in.UUID, store.ErrNotFound)
	}
	if cur.version != in.Version {
		return records.Instance{}, store.VersionConflict(placement.InstanceVersion, in.UUID, in.Version, cur.version)
	}
	in.Version++
	s.instances[in.UUID] = s.packInstance(in)
	return in, nil
}

// DeleteInstance implements store.Store.
func (s *Store) DeleteInstance(_ context.Context, uuid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.instances[uuid]; !ok {
		return fmt.Errorf("instance %s: %w", uuid, store.ErrNotFound)
	}
	delete(s.instances, uuid)
	return nil
}

// ListInstances implements store.Store.
func (s *Store) ListInstances(_ context.Context, host string) ([]records.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Sized first: a copy of every instance is large (the simulator's
	// final audit lists 180,000), and growing it by appends would copy it
	// again and again.
	n := len(s.instances)
	if host != "" {
		n = 0
		for _, r := range s.instances {
			if r.host == host {
				n++
			}
		}
	}
	if n == 0 {
		return nil, nil
	}
	keys := make([]string, 0, n)
	for k, r := range s.instances {
		if host == "" || r.host == host {
			keys = append(keys, k)
		}
	}
	return s.sortedInstances(keys), nil
}

// sortedInstances copies the instances keys names, in UUID order. Called
// with mu held.
func (s *Store) sortedInstances(keys []string) []records.Instance {
	slices.Sort(keys)
	out := make([]records.Instance, len(keys))
	for i, k := range keys {
		r := s.instances[k]
		out[i] = unpackInstance(k, &r)
	}
	return out
}

// ListProjectInstances implements store.Instances.
func (s *Store) ListProjectInstances(_ context.Context, project string) ([]records.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k, r := range s.instances {
		if r.projectID == project {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return s.sortedInstances(keys), nil
}

// CreateMigration implements store.Store.
func (s *Store) CreateMigration(_ context.Context, m records.Migration) (records.Migration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.createMigration(m), nil
}

// createMigration stores m as a new migration and returns it with its ID
// and version. Called with mu held.
func (s *Store) createMigration(m records.Migration) records.Migration {
	s.nextMigID++
	m.ID, m.Version = s.nextMigID, 1
	stored := m
	stored.TriedHosts = append([]string(nil), m.TriedHosts...)
	s.migrations[m.ID] = stored
	s.markActive(m)
	return m
}

// BeginMove implements store.Store: both writes under one hold of the
// store's lock.
func (s *Store) BeginMove(_ context.Context, in records.Instance, m records.Migration) (records.Instance, records.Migration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.instances[in.UUID]
	if !ok {
		return records.Instance{}, records.Migration{}, fmt.Errorf("instance %s: %w", in.UUID, store.ErrNotFound)
	}
	if cur.version != in.Version {
		return records.Instance{}, records.Migration{}, store.VersionConflict(placement.InstanceVersion, in.UUID, in.Version, cur.version)
	}
	in.Version++
	s.instances[in.UUID] = s.packInstance(in)
	return in, s.createMigration(m), nil
}

func (s *Store) markActive(m records.Migration) {
	if records.MigrationTerminal(m.Status) {
		delete(s.activeMigs, m.ID)
	} else {
		s.activeMigs[m.ID] = true
	}
}

// GetMigration implements store.Store.
func (s *Store) GetMigration(_ context.Context, id int64) (records.Migration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.migrations[id]
	if !ok {
		return m, fmt.Errorf("migration %d: %w", id, store.ErrNotFound)
	}
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	return m, nil
}

// UpdateMigration implements store.Store.
func (s *Store) UpdateMigration(_ context.Context, m records.Migration) (records.Migration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.migrations[m.ID]
	if !ok {
		return records.Migration{}, fmt.Errorf("migration %d: %w", m.ID, store.ErrNotFound)
	}
	if cur.Version != m.Version {
		return records.Migration{}, store.VersionConflict(placement.MigrationVersion, fmt.Sprint(m.ID), m.Version, cur.Version)
	}
	m.Version++
	stored := m
	stored.TriedHosts = append([]string(nil), m.TriedHosts...)
	s.migrations[m.ID] = stored
	s.markActive(m)
	return m, nil
}

// ListMigrations implements store.Store.
func (s *Store) ListMigrations(_ context.Context, f store.MigrationFilter) ([]records.Migration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []records.Migration
	match := func(m records.Migration) {
		if store.MatchMigration(m, f) {
			m.TriedHosts = append([]string(nil), m.TriedHosts...)
			out = append(out, m)
		}
	}
	if f.ActiveOnly {
		for id := range s.activeMigs {
			match(s.migrations[id])
		}
	} else {
		for _, m := range s.migrations {
			match(m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Changes implements store.Store.
func (s *Store) Changes(_ context.Context, since int64, limit int) ([]store.Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.changes) == 0 {
		return nil, nil
	}
	first := s.changes[0].Seq
	if since < first-1 {
		return nil, store.ErrChangesTrimmed
	}
	i := int(since - first + 1)
	if i >= len(s.changes) {
		return nil, nil
	}
	end := len(s.changes)
	if limit > 0 && i+limit < end {
		end = i + limit
	}
	return append([]store.Change(nil), s.changes[i:end]...), nil
}

// LastChange implements store.Store.
func (s *Store) LastChange(_ context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq, nil
}

// Close implements store.Store.
func (s *Store) Close() error { return nil }

// cloneInstance copies the maps an instance holds, so the store never
// shares them with a caller.
func cloneInstance(in records.Instance) records.Instance {
	in.Flavor = cloneFlavor(in.Flavor)
	if in.Hints != nil {
		h := *in.Hints
		h.SameHost, h.DifferentHost = slices.Clone(h.SameHost), slices.Clone(h.DifferentHost)
		in.Hints = &h
	}
	if in.ResizeFlavor != nil {
		f := cloneFlavor(*in.ResizeFlavor)
		in.ResizeFlavor = &f
	}
	in.Metadata = maps.Clone(in.Metadata)
	in.Tags = slices.Clone(in.Tags)
	in.ActionOps = slices.Clone(in.ActionOps)
	if in.Snapshot != nil {
		sn := *in.Snapshot
		in.Snapshot = &sn
	}
	return in
}

// CreateInstanceAction implements store.Store.
func (s *Store) CreateInstanceAction(_ context.Context, a records.InstanceAction) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.actions[a.InstanceUUID] {
		if b.RequestID == a.RequestID {
			return fmt.Errorf("instance action %s of %s: %w", a.RequestID, a.InstanceUUID, store.ErrExists)
		}
	}
	s.actions[a.InstanceUUID] = append(s.actions[a.InstanceUUID], a)
	return nil
}

// ListInstanceActions implements store.Store.
func (s *Store) ListInstanceActions(_ context.Context, instanceUUID string) ([]records.InstanceAction, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.actions[instanceUUID]), nil
}

// CreateFlavor implements store.Store.
func (s *Store) CreateFlavor(_ context.Context, f records.Flavor) (records.Flavor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.ID == "" || f.Name == "" {
		return records.Flavor{}, &placement.InvalidError{Msg: "flavor needs an id and a name"}
	}
	if _, ok := s.flavors[f.ID]; ok {
		return records.Flavor{}, fmt.Errorf("flavor %s: %w", f.ID, store.ErrExists)
	}
	for _, o := range s.flavors {
		if o.Name == f.Name {
			return records.Flavor{}, fmt.Errorf("flavor name %q: %w", f.Name, store.ErrExists)
		}
	}
	f = cloneFlavor(f)
	s.flavors[f.ID] = f
	return cloneFlavor(f), nil
}

// UpdateFlavor implements store.Store.
func (s *Store) UpdateFlavor(_ context.Context, id string, fn func(*records.Flavor) error) (records.Flavor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.flavors[id]
	if !ok {
		return records.Flavor{}, fmt.Errorf("flavor %s: %w", id, store.ErrNotFound)
	}
	f := cloneFlavor(cur)
	if err := fn(&f); err != nil {
		return records.Flavor{}, err
	}
	f.ID, f.Name = cur.ID, cur.Name
	s.flavors[id] = cloneFlavor(f)
	return f, nil
}

// GetFlavor implements store.Store.
func (s *Store) GetFlavor(_ context.Context, id string) (records.Flavor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.flavors[id]
	if !ok {
		return records.Flavor{}, fmt.Errorf("flavor %s: %w", id, store.ErrNotFound)
	}
	return cloneFlavor(f), nil
}

// ListFlavors implements store.Store.
func (s *Store) ListFlavors(_ context.Context) ([]records.Flavor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]records.Flavor, 0, len(s.flavors))
	for _, id := range slices.Sorted(maps.Keys(s.flavors)) {
		out = append(out, cloneFlavor(s.flavors[id]))
	}
	return out, nil
}

// DeleteFlavor implements store.Store.
func (s *Store) DeleteFlavor(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.flavors[id]; !ok {
		return fmt.Errorf("flavor %s: %w", id, store.ErrNotFound)
	}
	delete(s.flavors, id)
	return nil
}

func cloneFlavor(f records.Flavor) records.Flavor {
	if f.ExtraSpecs != nil {
		specs := make(map[string]string, len(f.ExtraSpecs))
		for k, v := range f.ExtraSpecs {
			specs[k] = v
		}
		f.ExtraSpecs = specs
	}
	f.Projects = slices.Clone(f.Projects)
	return f
}
