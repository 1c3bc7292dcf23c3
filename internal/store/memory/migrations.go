package memory

import (
	"context"
	"fmt"
	"sort"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// CreateMigration implements store.Store.
func (r *Records) CreateMigration(_ context.Context, m records.Migration) (records.Migration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.createMigration(m), nil
}

// createMigration stores m as a new migration and returns it with its ID
// and version. Called with mu held.
func (r *Records) createMigration(m records.Migration) records.Migration {
	r.nextMigID++
	m.ID, m.Version = r.nextMigID, 1
	stored := m
	stored.TriedHosts = append([]string(nil), m.TriedHosts...)
	r.migrations[m.ID] = stored
	r.markActive(m)
	return m
}

// BeginMove implements store.Store: both writes under one hold of the
// store's lock.
func (r *Records) BeginMove(_ context.Context, in records.Instance, m records.Migration) (records.Instance, records.Migration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.instances[in.UUID]
	if !ok {
		return records.Instance{}, records.Migration{}, fmt.Errorf("instance %s: %w", in.UUID, store.ErrNotFound)
	}
	if cur.version != in.Version {
		return records.Instance{}, records.Migration{}, store.VersionConflict(placement.InstanceVersion, in.UUID, in.Version, cur.version)
	}
	in.Version++
	r.instances[in.UUID] = r.packInstance(in)
	return in, r.createMigration(m), nil
}

func (r *Records) markActive(m records.Migration) {
	if records.MigrationTerminal(m.Status) {
		delete(r.activeMigs, m.ID)
	} else {
		r.activeMigs[m.ID] = true
	}
}

// GetMigration implements store.Store.
func (r *Records) GetMigration(_ context.Context, id int64) (records.Migration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.migrations[id]
	if !ok {
		return m, fmt.Errorf("migration %d: %w", id, store.ErrNotFound)
	}
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	return m, nil
}

// UpdateMigration implements store.Store.
func (r *Records) UpdateMigration(_ context.Context, m records.Migration) (records.Migration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.migrations[m.ID]
	if !ok {
		return records.Migration{}, fmt.Errorf("migration %d: %w", m.ID, store.ErrNotFound)
	}
	if cur.Version != m.Version {
		return records.Migration{}, store.VersionConflict(placement.MigrationVersion, fmt.Sprint(m.ID), m.Version, cur.Version)
	}
	m.Version++
	stored := m
	stored.TriedHosts = append([]string(nil), m.TriedHosts...)
	r.migrations[m.ID] = stored
	r.markActive(m)
	return m, nil
}

// ListMigrations implements store.Store.
func (r *Records) ListMigrations(_ context.Context, f store.MigrationFilter) ([]records.Migration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []records.Migration
	match := func(m records.Migration) {
		if store.MatchMigration(m, f) {
			m.TriedHosts = append([]string(nil), m.TriedHosts...)
			out = append(out, m)
		}
	}
	if f.ActiveOnly {
		for id := range r.activeMigs {
			match(r.migrations[id])
		}
	} else {
		for _, m := range r.migrations {
			match(m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
