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

func (r *Records) aggregateNameTaken(name string, except int64) bool {
	for id, o := range r.aggregates {
		if id != except && o.Name == name {
			return true
		}
	}
	return false
}

// CreateAggregate implements store.Store.
func (r *Records) CreateAggregate(_ context.Context, a records.Aggregate) (records.Aggregate, error) {
	if a.Name == "" {
		return records.Aggregate{}, &placement.InvalidError{Msg: "aggregate needs a name"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.aggregateNameTaken(a.Name, 0) {
		return records.Aggregate{}, fmt.Errorf("aggregate name %q: %w", a.Name, store.ErrExists)
	}
	r.nextAggID++
	a.ID = r.nextAggID
	r.aggregates[a.ID] = cloneAggregate(a)
	r.note(store.ChangeAggregate, strconv.FormatInt(a.ID, 10))
	return cloneAggregate(a), nil
}

// GetAggregate implements store.Store.
func (r *Records) GetAggregate(_ context.Context, id int64) (records.Aggregate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.aggregates[id]
	if !ok {
		return records.Aggregate{}, fmt.Errorf("aggregate %d: %w", id, store.ErrNotFound)
	}
	return cloneAggregate(a), nil
}

// ListAggregates implements store.Store.
func (r *Records) ListAggregates(_ context.Context) ([]records.Aggregate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]records.Aggregate, 0, len(r.aggregates))
	for _, id := range slices.Sorted(maps.Keys(r.aggregates)) {
		out = append(out, cloneAggregate(r.aggregates[id]))
	}
	return out, nil
}

// UpdateAggregate implements store.Store.
func (r *Records) UpdateAggregate(_ context.Context, id int64, fn func(*records.Aggregate) error) (records.Aggregate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.aggregates[id]
	if !ok {
		return records.Aggregate{}, fmt.Errorf("aggregate %d: %w", id, store.ErrNotFound)
	}
	a := cloneAggregate(cur)
	if err := fn(&a); err != nil {
		return records.Aggregate{}, err
	}
	a.ID = id
	if r.aggregateNameTaken(a.Name, id) {
		return records.Aggregate{}, fmt.Errorf("aggregate name %q: %w", a.Name, store.ErrExists)
	}
	r.aggregates[id] = cloneAggregate(a)
	r.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
	return a, nil
}

// DeleteAggregate implements store.Store.
func (r *Records) DeleteAggregate(_ context.Context, id int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.aggregates[id]; !ok {
		return fmt.Errorf("aggregate %d: %w", id, store.ErrNotFound)
	}
	delete(r.aggregates, id)
	r.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
	return nil
}

// CreateServerGroup implements store.Store.
func (r *Records) CreateServerGroup(_ context.Context, g records.ServerGroup) (records.ServerGroup, error) {
	if g.UUID == "" {
		return records.ServerGroup{}, &placement.InvalidError{Msg: "server group needs a uuid"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.groups[g.UUID]; ok {
		return records.ServerGroup{}, fmt.Errorf("server group %s: %w", g.UUID, store.ErrExists)
	}
	if g.Members == nil {
		g.Members = []string{}
	}
	r.groups[g.UUID] = cloneGroup(g)
	return cloneGroup(g), nil
}

// GetServerGroup implements store.Store.
func (r *Records) GetServerGroup(_ context.Context, uuid string) (records.ServerGroup, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.groups[uuid]
	if !ok {
		return records.ServerGroup{}, fmt.Errorf("server group %s: %w", uuid, store.ErrNotFound)
	}
	return cloneGroup(g), nil
}

// ListServerGroups implements store.Store.
func (r *Records) ListServerGroups(_ context.Context) ([]records.ServerGroup, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]records.ServerGroup, 0, len(r.groups))
	for _, u := range slices.Sorted(maps.Keys(r.groups)) {
		out = append(out, cloneGroup(r.groups[u]))
	}
	return out, nil
}

// UpdateServerGroup implements store.Store.
func (r *Records) UpdateServerGroup(_ context.Context, uuid string, fn func(*records.ServerGroup) error) (records.ServerGroup, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.groups[uuid]
	if !ok {
		return records.ServerGroup{}, fmt.Errorf("server group %s: %w", uuid, store.ErrNotFound)
	}
	g := cloneGroup(cur)
	if err := fn(&g); err != nil {
		return records.ServerGroup{}, err
	}
	g.UUID = uuid
	r.groups[uuid] = cloneGroup(g)
	return g, nil
}

// DeleteServerGroup implements store.Store.
func (r *Records) DeleteServerGroup(_ context.Context, uuid string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.groups[uuid]; !ok {
		return fmt.Errorf("server group %s: %w", uuid, store.ErrNotFound)
	}
	delete(r.groups, uuid)
	return nil
}
