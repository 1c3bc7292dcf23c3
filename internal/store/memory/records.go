package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"keel/internal/records"
	"keel/internal/store"
)

// Records is the in-memory store's compute records: host records and
// services (here), instances and their actions (instances.go), migrations,
// flavors, aggregates and server groups (groups.go), key pairs, quota
// limits and move plans. It implements store.Records, as sqlstore.Records
// does for the SQL stores.
type Records struct {
	*core
	// placement is the store's placement, whose providers DeleteService
	// deletes with a host (hostdelete.go).
	placement *Placement
	hosts     map[string]records.HostRecord
	services  map[string]records.Service
	instances map[string]instRec // instances.go
	// plainFlavors are the instances' flavors without extra specs or
	// projects, one copy each (instFlavor).
	plainFlavors map[flavorKey]*records.Flavor
	actions      map[string][]records.InstanceAction // by instance UUID, oldest first
	migrations   map[int64]records.Migration
	activeMigs   map[int64]bool // not in a terminal status: ListMigrations(ActiveOnly) reads only these
	nextMigID    int64
	flavors      map[string]records.Flavor
	aggregates   map[int64]records.Aggregate
	nextAggID    int64
	groups       map[string]records.ServerGroup
	keyPairs     map[[2]string]records.KeyPair // by (user, name)
	nextKeyID    int64
	quotas       map[string]map[string]int64
	plans        planTable
}

func newRecords(c *core, pl *Placement) *Records {
	return &Records{
		core:         c,
		placement:    pl,
		hosts:        map[string]records.HostRecord{},
		services:     map[string]records.Service{},
		instances:    map[string]instRec{},
		plainFlavors: map[flavorKey]*records.Flavor{},
		actions:      map[string][]records.InstanceAction{},
		migrations:   map[int64]records.Migration{},
		activeMigs:   map[int64]bool{},
		flavors:      map[string]records.Flavor{},
		aggregates:   map[int64]records.Aggregate{},
		groups:       map[string]records.ServerGroup{},
		keyPairs:     map[[2]string]records.KeyPair{},
		quotas:       map[string]map[string]int64{},
	}
}

// PutHostRecord implements store.Store.
func (r *Records) PutHostRecord(_ context.Context, h records.HostRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts[h.Host] = h
	r.note(store.ChangeHost, h.Host)
	return nil
}

// PutHostRecords implements store.HostRecordBatch.
func (r *Records) PutHostRecords(_ context.Context, recs []records.HostRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range recs {
		r.hosts[h.Host] = h
		r.note(store.ChangeHost, h.Host)
	}
	return nil
}

// GetHostRecord implements store.Store.
func (r *Records) GetHostRecord(_ context.Context, host string) (records.HostRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.hosts[host]
	if !ok {
		return h, fmt.Errorf("host record %s: %w", host, store.ErrNotFound)
	}
	return h, nil
}

// ListHostRecords implements store.Store.
func (r *Records) ListHostRecords(_ context.Context) ([]records.HostRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]records.HostRecord, 0, len(r.hosts))
	for _, k := range slices.Sorted(maps.Keys(r.hosts)) {
		out = append(out, r.hosts[k])
	}
	return out, nil
}

// GetHostRecords implements store.HostBatchReader.
func (r *Records) GetHostRecords(_ context.Context, hosts []string) ([]records.HostRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return byKeys(r.hosts, hosts), nil
}

// GetServices implements store.HostBatchReader.
func (r *Records) GetServices(_ context.Context, hosts []string) ([]records.Service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return byKeys(r.services, hosts), nil
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
func (r *Records) PutService(_ context.Context, sv records.Service) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.services[sv.Host] = sv
	r.note(store.ChangeService, sv.Host)
	return nil
}

// UpdateService implements store.Store.
func (r *Records) UpdateService(_ context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sv, ok := r.services[host]
	if !ok {
		return sv, fmt.Errorf("service %s: %w", host, store.ErrNotFound)
	}
	if err := fn(&sv); err != nil {
		return records.Service{}, err
	}
	sv.Host = host
	r.services[host] = sv
	r.note(store.ChangeService, host)
	return sv, nil
}

// UpdateServices implements store.ServiceBatch.
func (r *Records) UpdateServices(_ context.Context, hosts []string, fn func(i int, s *records.Service) error) ([]records.Service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]records.Service, len(hosts))
	for i, host := range hosts {
		sv, ok := r.services[host]
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
		r.services[sv.Host] = sv
		r.note(store.ChangeService, sv.Host)
	}
	return out, nil
}

// GetService implements store.Store.
func (r *Records) GetService(_ context.Context, host string) (records.Service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sv, ok := r.services[host]
	if !ok {
		return sv, fmt.Errorf("service %s: %w", host, store.ErrNotFound)
	}
	return sv, nil
}

// ListServices implements store.Store.
func (r *Records) ListServices(_ context.Context) ([]records.Service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]records.Service, 0, len(r.services))
	for _, k := range slices.Sorted(maps.Keys(r.services)) {
		out = append(out, r.services[k])
	}
	return out, nil
}
