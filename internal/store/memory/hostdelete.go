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

// DeleteService implements store.Hosts: under the one lock Records and
// Placement share, every check is made before anything is removed.
func (r *Records) DeleteService(_ context.Context, host string) (records.Service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sv, ok := r.services[host]
	if !ok {
		return records.Service{}, fmt.Errorf("service %s: %w", host, store.ErrNotFound)
	}
	for _, in := range r.instances {
		if in.host == host {
			return records.Service{}, fmt.Errorf("deleting service %s: %w", host, store.ErrHostHasInstances)
		}
	}
	for id := range r.activeMigs {
		m := r.migrations[id]
		if (m.SourceHost == host || m.DestHost == host) && records.MigrationInProgress(m.Status) {
			return records.Service{}, fmt.Errorf("deleting service %s: %w", host, store.ErrHostHasMigrations)
		}
	}
	tree := r.placement.hostTree(host)
	for _, u := range tree {
		if len(r.placement.byProvider[u]) > 0 {
			return records.Service{}, fmt.Errorf("deleting service %s: %w", host, &placement.InUseError{Provider: u})
		}
	}
	r.placement.dropProviders(tree)
	for _, id := range slices.Sorted(maps.Keys(r.aggregates)) {
		a := r.aggregates[id]
		if i := slices.Index(a.Hosts, host); i >= 0 {
			a = cloneAggregate(a)
			a.Hosts = slices.Delete(a.Hosts, i, i+1)
			r.aggregates[id] = a
			r.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
		}
	}
	if _, ok := r.hosts[host]; ok {
		delete(r.hosts, host)
		r.note(store.ChangeHost, host)
	}
	delete(r.services, host)
	r.note(store.ChangeService, host)
	return sv, nil
}

// hostTree lists the providers of host's tree, the root named host and
// its descendants, every child before its parent. Called with mu held.
func (pl *Placement) hostTree(host string) []string {
	root, ok := pl.names[host]
	if !ok || pl.providers[root].ParentUUID != "" {
		return nil
	}
	children := map[string][]string{}
	for u, p := range pl.providers {
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

// dropProviders removes the providers of tree, in its order (hostTree's,
// leaves first), noting a change for each. The caller has checked that
// none holds allocations. Called with mu held.
func (pl *Placement) dropProviders(tree []string) {
	for _, u := range tree {
		delete(pl.names, pl.providers[u].Name)
		delete(pl.providers, u)
		delete(pl.usage, u)
		delete(pl.byProvider, u)
		pl.note(store.ChangeProvider, u)
	}
}
