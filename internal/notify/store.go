package notify

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"keel/internal/identity"
	"keel/internal/records"
	"keel/internal/store"
)

// Store is a store whose committed writes of instance, migration and
// service records are notified: it reads the record before each write,
// and once the write commits emits what the change means
// (InstanceChange, MigrationChange, ServiceChange). Writes that concern
// one instance (its record, its migrations') or one service are
// serialised here, so their events leave in commit order.
type Store struct {
	store.Store
	n       *Notifier
	now     func() time.Time
	apiHost string
	locks   [64]sync.Mutex
}

// A Store batches what the store it wraps batches: the server's
// heartbeats and host records go through it.
var (
	_ store.ServiceBatch    = (*Store)(nil)
	_ store.HostRecordBatch = (*Store)(nil)
	_ store.HostBatchReader = (*Store)(nil)
)

// Wrap returns st notifying n; now is the clock of the events' times and
// apiHost this server's host name ([DEFAULT] host: the publisher of what
// nova-api would send).
func Wrap(st store.Store, n *Notifier, now func() time.Time, apiHost string) *Store {
	return &Store{Store: st, n: n, now: now, apiHost: apiHost}
}

func (s *Store) lock(key string) func() {
	l := &s.locks[s.stripe(key)]
	l.Lock()
	return l.Unlock
}

// stripe is the index of key's lock.
func (s *Store) stripe(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(s.locks)))
}

// lockAll takes the locks of keys, in the locks' order (so two callers
// never wait for each other's), and returns what releases them.
func (s *Store) lockAll(keys []string) func() {
	var take [len(Store{}.locks)]bool
	for _, k := range keys {
		take[s.stripe(k)] = true
	}
	for i, t := range take {
		if t {
			s.locks[i].Lock()
		}
	}
	return func() {
		for i, t := range take {
			if t {
				s.locks[i].Unlock()
			}
		}
	}
}

// source is who asked (the API caller, when ctx is a request's) and when.
func (s *Store) source(ctx context.Context) Source {
	src := Source{Now: s.now(), APIHost: s.apiHost}
	if p, ok := identity.PrincipalFrom(ctx); ok {
		src.Who = Initiator{UserID: p.UserID, ProjectID: p.ProjectID}
	}
	return src
}

// UpdateInstance implements store.Instances.
func (s *Store) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	defer s.lock(in.UUID)()
	old, oldErr := s.Store.GetInstance(ctx, in.UUID)
	out, err := s.Store.UpdateInstance(ctx, in)
	if err == nil && oldErr == nil {
		s.n.Emit(InstanceChange(s.source(ctx), &old, &out)...)
	}
	return out, err
}

// DeleteInstance implements store.Instances.
func (s *Store) DeleteInstance(ctx context.Context, uuid string) error {
	defer s.lock(uuid)()
	old, oldErr := s.Store.GetInstance(ctx, uuid)
	err := s.Store.DeleteInstance(ctx, uuid)
	if err == nil && oldErr == nil {
		s.n.Emit(InstanceChange(s.source(ctx), &old, nil)...)
	}
	return err
}

// CreateMigration implements store.Migrations.
func (s *Store) CreateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	defer s.lock(m.InstanceUUID)()
	out, err := s.Store.CreateMigration(ctx, m)
	if err == nil {
		s.migrationChanged(ctx, nil, out)
	}
	return out, err
}

// BeginMove implements store.Migrations: once both writes committed, the
// instance's change, then the new migration's.
func (s *Store) BeginMove(ctx context.Context, in records.Instance, m records.Migration) (records.Instance, records.Migration, error) {
	defer s.lockAll([]string{in.UUID, m.InstanceUUID})()
	old, oldErr := s.Store.GetInstance(ctx, in.UUID)
	outIn, outM, err := s.Store.BeginMove(ctx, in, m)
	if err == nil {
		if oldErr == nil {
			s.n.Emit(InstanceChange(s.source(ctx), &old, &outIn)...)
		}
		s.migrationChanged(ctx, nil, outM)
	}
	return outIn, outM, err
}

// UpdateMigration implements store.Migrations.
func (s *Store) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	defer s.lock(m.InstanceUUID)()
	old, oldErr := s.Store.GetMigration(ctx, m.ID)
	out, err := s.Store.UpdateMigration(ctx, m)
	if err == nil && oldErr == nil {
		s.migrationChanged(ctx, &old, out)
	}
	return out, err
}

func (s *Store) migrationChanged(ctx context.Context, old *records.Migration, m records.Migration) {
	if old != nil && old.Status == m.Status && old.Phase == m.Phase && old.AbortRequested == m.AbortRequested &&
		old.ForceComplete == m.ForceComplete && old.Outcome == m.Outcome {
		return // progress of the copy: nothing to say
	}
	in, err := s.Store.GetInstance(ctx, m.InstanceUUID)
	if err != nil {
		return // deleted meanwhile: its delete said so
	}
	s.n.Emit(MigrationChange(s.source(ctx), old, m, in)...)
}

// PutService implements store.Hosts.
func (s *Store) PutService(ctx context.Context, svc records.Service) error {
	defer s.lock("service:" + svc.Host)()
	old, oldErr := s.Store.GetService(ctx, svc.Host)
	if err := s.Store.PutService(ctx, svc); err != nil {
		return err
	}
	switch {
	case errors.Is(oldErr, store.ErrNotFound):
		s.n.Emit(ServiceChange(s.source(ctx), nil, svc)...)
	case oldErr == nil:
		s.n.Emit(ServiceChange(s.source(ctx), &old, svc)...)
	}
	return nil
}

// PutHostRecords implements store.HostRecordBatch (host records are not
// notified): in one transaction if the wrapped store batches, else one
// record after the other (stopping at the first error).
func (s *Store) PutHostRecords(ctx context.Context, recs []records.HostRecord) error {
	if b, ok := s.Store.(store.HostRecordBatch); ok {
		return b.PutHostRecords(ctx, recs)
	}
	for _, h := range recs {
		if err := s.Store.PutHostRecord(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// GetHostRecords implements store.HostBatchReader: in one read if the
// wrapped store reads by many keys, else one host after the other.
func (s *Store) GetHostRecords(ctx context.Context, hosts []string) ([]records.HostRecord, error) {
	if b, ok := s.Store.(store.HostBatchReader); ok {
		return b.GetHostRecords(ctx, hosts)
	}
	return eachFound(ctx, hosts, s.Store.GetHostRecord)
}

// GetServices implements store.HostBatchReader: in one read if the
// wrapped store reads by many keys, else one host after the other.
func (s *Store) GetServices(ctx context.Context, hosts []string) ([]records.Service, error) {
	if b, ok := s.Store.(store.HostBatchReader); ok {
		return b.GetServices(ctx, hosts)
	}
	return eachFound(ctx, hosts, s.Store.GetService)
}

// eachFound reads each of hosts, sorted and once each, with get, leaving
// out those not found.
func eachFound[T any](ctx context.Context, hosts []string, get func(context.Context, string) (T, error)) ([]T, error) {
	out := []T{}
	for _, h := range slices.Compact(slices.Sorted(slices.Values(hosts))) {
		v, err := get(ctx, h)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// UpdateServices implements store.ServiceBatch: in one transaction if
// the wrapped store batches, else one service after the other (stopping
// at the first error).
func (s *Store) UpdateServices(ctx context.Context, hosts []string, fn func(i int, s *records.Service) error) ([]records.Service, error) {
	keys := make([]string, len(hosts))
	for i, h := range hosts {
		keys[i] = "service:" + h
	}
	defer s.lockAll(keys)()
	before := make([]records.Service, len(hosts))
	var out []records.Service
	if b, ok := s.Store.(store.ServiceBatch); ok {
		var err error
		out, err = b.UpdateServices(ctx, hosts, func(i int, svc *records.Service) error {
			before[i] = *svc
			return fn(i, svc)
		})
		if err != nil {
			return nil, err
		}
	} else {
		for i, h := range hosts {
			sv, err := s.Store.UpdateService(ctx, h, func(svc *records.Service) error {
				before[i] = *svc
				return fn(i, svc)
			})
			if err != nil {
				for j := range out {
					s.n.Emit(ServiceChange(s.source(ctx), &before[j], out[j])...)
				}
				return nil, err
			}
			out = append(out, sv)
		}
	}
	for i := range out {
		s.n.Emit(ServiceChange(s.source(ctx), &before[i], out[i])...)
	}
	return out, nil
}

// UpdateService implements store.Hosts.
func (s *Store) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	defer s.lock("service:" + host)()
	var before records.Service
	out, err := s.Store.UpdateService(ctx, host, func(svc *records.Service) error {
		before = *svc
		return fn(svc)
	})
	if err == nil {
		s.n.Emit(ServiceChange(s.source(ctx), &before, out)...)
	}
	return out, err
}

// DeleteService implements store.Hosts: a deleted compute service sends
// service.delete once the delete commits.
func (s *Store) DeleteService(ctx context.Context, host string) (records.Service, error) {
	defer s.lock("service:" + host)()
	out, err := s.Store.DeleteService(ctx, host)
	if err == nil {
		s.n.Emit(ServiceDeleted(s.source(ctx), out)...)
	}
	return out, err
}
