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

// DeleteService implements store.Hosts: under the one lock, every check
// is made before anything is removed.
func (s *Store) DeleteService(_ context.Context, host string) (records.Service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.services[host]
	if !ok {
		return records.Service{}, fmt.Errorf("service %s: %w", host, store.ErrNotFound)
	}
	for _, in := range s.instances {
		if in.host == host {
			return records.Service{}, fmt.Errorf("deleting service %s: %w", host, store.ErrHostHasInstances)
		}
	}
	for id := range s.activeMigs {
		m := s.migrations[id]
		if (m.SourceHost == host || m.DestHost == host) && records.MigrationInProgress(m.Status) {
			return records.Service{}, fmt.Errorf("deleting service %s: %w", host, store.ErrHostHasMigrations)
		}
	}
	tree := s.hostTree(host)
	for _, u := range tree {
		if len(s.byProvider[u]) > 0 {
			return records.Service{}, fmt.Errorf("deleting service %s: %w", host, &placement.InUseError{Provider: u})
		}
	}
	for _, u := range tree { // leaves first
		delete(s.names, s.providers[u].Name)
		delete(s.providers, u)
		delete(s.usage, u)
		delete(s.byProvider, u)
		s.note(store.ChangeProvider, u)
	}
	for _, id := range slices.Sorted(maps.Keys(s.aggregates)) {
		a := s.aggregates[id]
		if i := slices.Index(a.Hosts, host); i >= 0 {
			a = cloneAggregate(a)
			a.Hosts = slices.Delete(a.Hosts, i, i+1)
			s.aggregates[id] = a
			s.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
		}
	}
	if _, ok := s.hosts[host]; ok {
		delete(s.hosts, host)
		s.note(store.ChangeHost, host)
	}
	delete(s.services, host)
	s.note(store.ChangeService, host)
	return sv, nil
}

// hostTree lists the providers of host's tree, the root named host and
// its descendants, every child before its parent.
func (s *Store) hostTree(host string) []string {
	root, ok := s.names[host]
	if !ok || s.providers[root].ParentUUID != "" {
		return nil
	}
	children := map[string][]string{}
	for u, p := range s.providers {
		if p.ParentUUID != "" {
			children[p.ParentUUID] = append(children[p.ParentUUID], u)
		}
	}
	order := []string{root}
	for i := 0; i < len(order); i++ {
		kids := children[order[i]]
		slices.Sort(kids)
		order = append(order, kids...)
	}
	slices.Reverse(order)
	return order
}
