package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// PutHostRecord implements store.Store.
func (s *Store) PutHostRecord(ctx context.Context, h records.HostRecord) error {
	err := s.write(ctx, func(w *wtx) error {
		if _, err := w.putJSON(qPutHostRecord, h, h.Host); err != nil {
			return err
		}
		return w.note(store.ChangeHost, h.Host)
	})
	if err != nil {
		return fmt.Errorf("writing host record %s: %w", h.Host, err)
	}
	return nil
}

// GetHostRecord implements store.Store.
func (s *Store) GetHostRecord(ctx context.Context, host string) (records.HostRecord, error) {
	var h records.HostRecord
	if err := s.getJSON(ctx, &h, `SELECT data FROM host_records WHERE host = ?`, host); err != nil {
		return records.HostRecord{}, fmt.Errorf("host record %s: %w", host, err)
	}
	return h, nil
}

// ListHostRecords implements store.Store; records come sorted by host.
func (s *Store) ListHostRecords(ctx context.Context) ([]records.HostRecord, error) {
	out, err := listJSON[records.HostRecord](ctx, s, nil, `SELECT data FROM host_records ORDER BY host`)
	if err != nil {
		return nil, fmt.Errorf("listing host records: %w", err)
	}
	return out, nil
}

// PutService implements store.Store.
func (s *Store) PutService(ctx context.Context, sv records.Service) error {
	if err := s.write(ctx, func(w *wtx) error { return w.putService(sv) }); err != nil {
		return fmt.Errorf("writing service %s: %w", sv.Host, err)
	}
	return nil
}

// putService writes a service's row and notes the change.
func (w *wtx) putService(sv records.Service) error {
	if _, err := w.putJSON(qPutService, sv, sv.Host); err != nil {
		return err
	}
	return w.note(store.ChangeService, sv.Host)
}

// UpdateService implements store.Store: read, apply and write in one
// write transaction.
func (s *Store) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	sv, err := updateJSON(ctx, s, qGetService, host, fn, func(w *wtx, sv *records.Service) error {
		sv.Host = host
		return w.putService(*sv)
	})
	if err != nil {
		return records.Service{}, fmt.Errorf("updating service %s: %w", host, err)
	}
	return sv, nil
}

// GetService implements store.Store.
func (s *Store) GetService(ctx context.Context, host string) (records.Service, error) {
	var sv records.Service
	if err := s.getJSON(ctx, &sv, `SELECT data FROM services WHERE host = ?`, host); err != nil {
		return records.Service{}, fmt.Errorf("service %s: %w", host, err)
	}
	return sv, nil
}

// ListServices implements store.Store; services come sorted by host.
func (s *Store) ListServices(ctx context.Context) ([]records.Service, error) {
	out, err := listJSON[records.Service](ctx, s, nil, `SELECT data FROM services ORDER BY host`)
	if err != nil {
		return nil, fmt.Errorf("listing services: %w", err)
	}
	return out, nil
}

// CreateInstance implements store.Store.
func (s *Store) CreateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	in.Version = 1
	if err := s.insertJSON(ctx, qInsertInstance, in, in.UUID, in.Host, in.Version); err != nil {
		return records.Instance{}, fmt.Errorf("creating instance %s: %w", in.UUID, err)
	}
	return in, nil
}

// GetInstance implements store.Store.
func (s *Store) GetInstance(ctx context.Context, uuid string) (records.Instance, error) {
	var in records.Instance
	if err := s.getJSON(ctx, &in, `SELECT data FROM instances WHERE uuid = ?`, uuid); err != nil {
		return records.Instance{}, fmt.Errorf("instance %s: %w", uuid, err)
	}
	return in, nil
}

// UpdateInstance implements store.Store.
func (s *Store) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	expected := in.Version
	in.Version++
	data, err := json.Marshal(in)
	if err != nil {
		return records.Instance{}, fmt.Errorf("encoding instance %s: %w", in.UUID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		var cur int64
		if err := w.queryRow(qInstanceVersion, in.UUID).Scan(&cur); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("instance %s: %w", in.UUID, store.ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("reading instance %s: %w", in.UUID, err)
		}
		if cur != expected {
			return store.VersionConflict(placement.InstanceVersion, in.UUID, expected, cur)
		}
		if _, err := w.exec(qUpdateInstance, in.Host, in.Version, string(data), in.UUID); err != nil {
			return fmt.Errorf("updating instance %s: %w", in.UUID, err)
		}
		return nil
	})
	if err != nil {
		return records.Instance{}, err
	}
	return in, nil
}

// DeleteInstance implements store.Store.
func (s *Store) DeleteInstance(ctx context.Context, uuid string) error {
	if err := s.deleteOne(ctx, qDeleteInstance, uuid); err != nil {
		return fmt.Errorf("deleting instance %s: %w", uuid, err)
	}
	return nil
}

// ListInstances implements store.Store; instances come sorted by UUID.
func (s *Store) ListInstances(ctx context.Context, host string) ([]records.Instance, error) {
	query, args := `SELECT data FROM instances ORDER BY uuid`, []any(nil)
	if host != "" {
		query, args = `SELECT data FROM instances WHERE host = ? ORDER BY uuid`, []any{host}
	}
	out, err := listJSON[records.Instance](ctx, s, nil, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing instances on %q: %w", host, err)
	}
	return out, nil
}

// CreateMigration implements store.Store. IDs come from an AUTOINCREMENT
// column, so they increase and are never reused.
func (s *Store) CreateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	m.Version = 1
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	err := s.write(ctx, func(w *wtx) error {
		m.ID = 0
		data, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encoding: %w", err)
		}
		res, err := w.exec(qInsertMigration,
			m.UUID, m.InstanceUUID, m.SourceHost, m.DestHost, m.Status, active(m.Status), m.Version, string(data))
		if err != nil {
			return err
		}
		if m.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		// The JSON copy carries the ID too, for readers of the raw table.
		if data, err = json.Marshal(m); err != nil {
			return fmt.Errorf("encoding: %w", err)
		}
		_, err = w.exec(qSetMigrationData, string(data), m.ID)
		return err
	})
	if err != nil {
		return records.Migration{}, fmt.Errorf("creating migration for instance %s: %w", m.InstanceUUID, err)
	}
	return m, nil
}

func active(status string) int {
	if records.MigrationTerminal(status) {
		return 0
	}
	return 1
}

// GetMigration implements store.Store.
func (s *Store) GetMigration(ctx context.Context, id int64) (records.Migration, error) {
	var m records.Migration
	if err := s.getJSON(ctx, &m, `SELECT data FROM migrations WHERE id = ?`, id); err != nil {
		return records.Migration{}, fmt.Errorf("migration %d: %w", id, err)
	}
	return m, nil
}

// UpdateMigration implements store.Store.
func (s *Store) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	expected := m.Version
	m.Version++
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	data, err := json.Marshal(m)
	if err != nil {
		return records.Migration{}, fmt.Errorf("encoding migration %d: %w", m.ID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		var cur int64
		if err := w.queryRow(qMigrationVersion, m.ID).Scan(&cur); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("migration %d: %w", m.ID, store.ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("reading migration %d: %w", m.ID, err)
		}
		if cur != expected {
			return store.VersionConflict(placement.MigrationVersion, fmt.Sprint(m.ID), expected, cur)
		}
		if _, err := w.exec(qUpdateMigration,
			m.UUID, m.InstanceUUID, m.SourceHost, m.DestHost, m.Status, active(m.Status), m.Version, string(data), m.ID); err != nil {
			return fmt.Errorf("updating migration %d: %w", m.ID, err)
		}
		return nil
	})
	if err != nil {
		return records.Migration{}, err
	}
	return m, nil
}

// ListMigrations implements store.Store; migrations come sorted by ID. The
// filter narrows the query on indexed columns and store.MatchMigration has
// the last word, so the semantics are the interface's.
func (s *Store) ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error) {
	var (
		where []string
		args  []any
	)
	if f.UUID != "" {
		where, args = append(where, "uuid = ?"), append(args, f.UUID)
	}
	if f.InstanceUUID != "" {
		where, args = append(where, "instance_uuid = ?"), append(args, f.InstanceUUID)
	}
	if f.Host != "" {
		where, args = append(where, "(source_host = ? OR dest_host = ?)"), append(args, f.Host, f.Host)
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, f.Status)
	}
	if f.ActiveOnly {
		where = append(where, "active = 1")
	}
	query := `SELECT data FROM migrations`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY id"
	out, err := listJSON(ctx, s, func(m records.Migration) bool { return store.MatchMigration(m, f) }, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing migrations: %w", err)
	}
	return out, nil
}

// CreateInstanceAction implements store.Store.
func (s *Store) CreateInstanceAction(ctx context.Context, a records.InstanceAction) error {
	if err := s.insertJSON(ctx, qInsertInstanceAction, a, a.InstanceUUID, a.RequestID); err != nil {
		return fmt.Errorf("recording instance action %s of %s: %w", a.RequestID, a.InstanceUUID, err)
	}
	return nil
}

// ListInstanceActions implements store.Store.
func (s *Store) ListInstanceActions(ctx context.Context, instanceUUID string) ([]records.InstanceAction, error) {
	out, err := listJSON[records.InstanceAction](ctx, s, nil,
		`SELECT data FROM instance_actions WHERE instance_uuid = ? ORDER BY id`, instanceUUID)
	if err != nil {
		return nil, fmt.Errorf("listing actions of instance %s: %w", instanceUUID, err)
	}
	return out, nil
}
