package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Compute host aggregates and server groups.

func cloneAggregate(a records.Aggregate) records.Aggregate {
	a.Hosts = slices.Clone(a.Hosts)
	a.Metadata = maps.Clone(a.Metadata)
	return a
}

func cloneGroup(g records.ServerGroup) records.ServerGroup {
	g.Members = slices.Clone(g.Members)
	return g
}

func (s *Store) aggregateNameTaken(name string, except int64) bool {
	for id, o := range s.aggregates {
		if id != except && o.Name == name {
			return true
		}
	}
	return false
}

// CreateAggregate implements store.Store.
func (s *Store) CreateAggregate(_ context.Context, a records.Aggregate) (records.Aggregate, error) {
	if a.Name == "" {
		return records.Aggregate{}, &placement.InvalidError{Msg: "aggregate needs a name"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aggregateNameTaken(a.Name, 0) {
		return records.Aggregate{}, fmt.Errorf("aggregate name %q: %w", a.Name, store.ErrExists)
	}
	s.nextAggID++
	a.ID = s.nextAggID
	s.aggregates[a.ID] = cloneAggregate(a)
	s.note(store.ChangeAggregate, strconv.FormatInt(a.ID, 10))
	return cloneAggregate(a), nil
}

// GetAggregate implements store.Store.
func (s *Store) GetAggregate(_ context.Context, id int64) (records.Aggregate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.aggregates[id]
	if !ok {
		return records.Aggregate{}, fmt.Errorf("aggregate %d: %w", id, store.ErrNotFound)
	}
	return cloneAggregate(a), nil
}

// ListAggregates implements store.Store.
func (s *Store) ListAggregates(_ context.Context) ([]records.Aggregate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]records.Aggregate, 0, len(s.aggregates))
	for _, id := range slices.Sorted(maps.Keys(s.aggregates)) {
		out = append(out, cloneAggregate(s.aggregates[id]))
	}
	return out, nil
}

// UpdateAggregate implements store.Store.
func (s *Store) UpdateAggregate(_ context.Context, id int64, fn func(*records.Aggregate) error) (records.Aggregate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.aggregates[id]
	if !ok {
		return records.Aggregate{}, fmt.Errorf("aggregate %d: %w", id, store.ErrNotFound)
	}
	a := cloneAggregate(cur)
	if err := fn(&a); err != nil {
		return records.Aggregate{}, err
	}
	a.ID = id
	if s.aggregateNameTaken(a.Name, id) {
		return records.Aggregate{}, fmt.Errorf("aggregate name %q: %w", a.Name, store.ErrExists)
	}
	s.aggregates[id] = cloneAggregate(a)
	s.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
	return a, nil
}

// DeleteAggregate implements store.Store.
func (s *Store) DeleteAggregate(_ context.Context, id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.aggregates[id]; !ok {
		return fmt.Errorf("aggregate %d: %w", id, store.ErrNotFound)
	}
	delete(s.aggregates, id)
	s.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
	return nil
}

// CreateServerGroup implements store.Store.
func (s *Store) CreateServerGroup(_ context.Context, g records.ServerGroup) (records.ServerGroup, error) {
	if g.UUID == "" {
		return records.ServerGroup{}, &placement.InvalidError{Msg: "server group needs a uuid"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.groups[g.UUID]; ok {
		return records.ServerGroup{}, fmt.Errorf("server group %s: %w", g.UUID, store.ErrExists)
	}
	if g.Members == nil {
		g.Members = []string{}
	}
	s.groups[g.UUID] = cloneGroup(g)
	return cloneGroup(g), nil
}

// GetServerGroup implements store.Store.
func (s *Store) GetServerGroup(_ context.Context, uuid string) (records.ServerGroup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.groups[uuid]
	if !ok {
		return records.ServerGroup{}, fmt.Errorf("server group %s: %w", uuid, store.ErrNotFound)
	}
	return cloneGroup(g), nil
}

// ListServerGroups implements store.Store.
func (s *Store) ListServerGroups(_ context.Context) ([]records.ServerGroup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]records.ServerGroup, 0, len(s.groups))
	for _, u := range slices.Sorted(maps.Keys(s.groups)) {
		out = append(out, cloneGroup(s.groups[u]))
	}
	return out, nil
}

// UpdateServerGroup implements store.Store.
func (s *Store) UpdateServerGroup(_ context.Context, uuid string, fn func(*records.ServerGroup) error) (records.ServerGroup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.groups[uuid]
	if !ok {
		return records.ServerGroup{}, fmt.Errorf("server group %s: %w", uuid, store.ErrNotFound)
	}
	g := cloneGroup(cur)
	if err := fn(&g); err != nil {
		return records.ServerGroup{}, err
	}
	g.UUID = uuid
	s.groups[uuid] = cloneGroup(g)
	return g, nil
}

// DeleteServerGroup implements store.Store.
func (s *Store) DeleteServerGroup(_ context.Context, uuid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.groups[uuid]; !ok {
		return fmt.Errorf("server group %s: %w", uuid, store.ErrNotFound)
	}
	delete(s.groups, uuid)
	return nil
}
