package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// PutHostRecord implements store.Store.
func (s *Store) PutHostRecord(ctx context.Context, h records.HostRecord) error {
	err := s.write(ctx, func(w *wtx) error {
		w.note(store.ChangeHost, h.Host)
		return w.putJSON(`INSERT INTO host_records (host, data) VALUES ($1, $2)
			ON CONFLICT (host) DO UPDATE SET data = excluded.data`, h, h.Host)
	})
	if err != nil {
		return fmt.Errorf("writing host record %s: %w", h.Host, err)
	}
	return nil
}

// GetHostRecord implements store.Store.
func (s *Store) GetHostRecord(ctx context.Context, host string) (records.HostRecord, error) {
	var h records.HostRecord
	if err := s.getJSON(ctx, &h, `SELECT data FROM host_records WHERE host = $1`, host); err != nil {
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

const qPutService = `INSERT INTO services (host, data) VALUES ($1, $2)
	ON CONFLICT (host) DO UPDATE SET data = excluded.data`

// PutService implements store.Store.
func (s *Store) PutService(ctx context.Context, sv records.Service) error {
	if err := s.write(ctx, func(w *wtx) error { return w.putService(sv) }); err != nil {
		return fmt.Errorf("writing service %s: %w", sv.Host, err)
	}
	return nil
}

// putService queues a service's row and notes the change.
func (w *wtx) putService(sv records.Service) error {
	w.note(store.ChangeService, sv.Host)
	return w.putJSON(qPutService, sv, sv.Host)
}

// UpdateService implements store.Store: the service row is locked (SELECT
// … FOR UPDATE), fn applied and the result written in one transaction, so
// concurrent updates of one service queue instead of undoing each other.
func (s *Store) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	sv, err := updateJSON(ctx, s, `SELECT data FROM services WHERE host = $1 FOR UPDATE`, host, fn,
		func(w *wtx, sv *records.Service) error {
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
	if err := s.getJSON(ctx, &sv, `SELECT data FROM services WHERE host = $1`, host); err != nil {
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
	err := s.insertJSON(ctx, `INSERT INTO instances (uuid, host, version, data) VALUES ($1, $2, $3, $4)
		ON CONFLICT (uuid) DO NOTHING`, in, in.UUID, in.Host, in.Version)
	if err != nil {
		return records.Instance{}, fmt.Errorf("creating instance %s: %w", in.UUID, err)
	}
	return in, nil
}

// GetInstance implements store.Store.
func (s *Store) GetInstance(ctx context.Context, uuid string) (records.Instance, error) {
	var in records.Instance
	if err := s.getJSON(ctx, &in, `SELECT data FROM instances WHERE uuid = $1`, uuid); err != nil {
		return records.Instance{}, fmt.Errorf("instance %s: %w", uuid, err)
	}
	return in, nil
}

// UpdateInstance implements store.Store with one conditional UPDATE; only a
// refused one reads the row again, to report the version it found.
func (s *Store) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	expected := in.Version
	in.Version++
	data, err := json.Marshal(in)
	if err != nil {
		return records.Instance{}, fmt.Errorf("encoding instance %s: %w", in.UUID, err)
	}
	ct, err := s.pool.Exec(ctx, `UPDATE instances SET host = $1, version = $2, data = $3 WHERE uuid = $4 AND version = $5`,
		in.Host, in.Version, data, in.UUID, expected)
	if err != nil {
		return records.Instance{}, fmt.Errorf("updating instance %s: %w", in.UUID, err)
	}
	if ct.RowsAffected() == 1 {
		return in, nil
	}
	var cur int64
	switch err := s.pool.QueryRow(ctx, `SELECT version FROM instances WHERE uuid = $1`, in.UUID).Scan(&cur); {
	case errors.Is(err, pgx.ErrNoRows):
		return records.Instance{}, fmt.Errorf("instance %s: %w", in.UUID, store.ErrNotFound)
	case err != nil:
		return records.Instance{}, fmt.Errorf("reading instance %s: %w", in.UUID, err)
	}
	return records.Instance{}, store.VersionConflict(placement.InstanceVersion, in.UUID, expected, cur)
}

// DeleteInstance implements store.Store.
func (s *Store) DeleteInstance(ctx context.Context, uuid string) error {
	if err := s.deleteOne(ctx, `DELETE FROM instances WHERE uuid = $1`, uuid); err != nil {
		return fmt.Errorf("deleting instance %s: %w", uuid, err)
	}
	return nil
}

// ListInstances implements store.Store; instances come sorted by UUID.
func (s *Store) ListInstances(ctx context.Context, host string) ([]records.Instance, error) {
	query, args := `SELECT data FROM instances ORDER BY uuid`, []any(nil)
	if host != "" {
		query, args = `SELECT data FROM instances WHERE host = $1 ORDER BY uuid`, []any{host}
	}
	out, err := listJSON[records.Instance](ctx, s, nil, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing instances on %q: %w", host, err)
	}
	return out, nil
}

// CreateMigration implements store.Store. IDs come from an identity column,
// so they increase and are never reused; the statement takes the ID first
// so the JSON copy carries it too.
func (s *Store) CreateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	m.Version = 1
	m.ID = 0
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	data, err := json.Marshal(m)
	if err != nil {
		return records.Migration{}, fmt.Errorf("encoding migration for instance %s: %w", m.InstanceUUID, err)
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO migrations
		(id, uuid, instance_uuid, source_host, dest_host, status, active, version, data)
		SELECT n.id, $1, $2, $3, $4, $5, $6, $7, jsonb_set($8::jsonb, '{id}', to_jsonb(n.id))
		FROM (SELECT nextval(pg_get_serial_sequence('migrations', 'id')) AS id) n
		RETURNING id`,
		m.UUID, m.InstanceUUID, m.SourceHost, m.DestHost, m.Status, active(m.Status), m.Version, data).Scan(&m.ID)
	if err != nil {
		return records.Migration{}, fmt.Errorf("creating migration for instance %s: %w", m.InstanceUUID, err)
	}
	return m, nil
}

func active(status string) bool { return !records.MigrationTerminal(status) }

// GetMigration implements store.Store.
func (s *Store) GetMigration(ctx context.Context, id int64) (records.Migration, error) {
	var m records.Migration
	if err := s.getJSON(ctx, &m, `SELECT data FROM migrations WHERE id = $1`, id); err != nil {
		return records.Migration{}, fmt.Errorf("migration %d: %w", id, err)
	}
	return m, nil
}

// UpdateMigration implements store.Store, as UpdateInstance does.
func (s *Store) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	expected := m.Version
	m.Version++
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	data, err := json.Marshal(m)
	if err != nil {
		return records.Migration{}, fmt.Errorf("encoding migration %d: %w", m.ID, err)
	}
	ct, err := s.pool.Exec(ctx, `UPDATE migrations SET uuid = $1, instance_uuid = $2, source_host = $3, dest_host = $4,
		status = $5, active = $6, version = $7, data = $8 WHERE id = $9 AND version = $10`,
		m.UUID, m.InstanceUUID, m.SourceHost, m.DestHost, m.Status, active(m.Status), m.Version, data, m.ID, expected)
	if err != nil {
		return records.Migration{}, fmt.Errorf("updating migration %d: %w", m.ID, err)
	}
	if ct.RowsAffected() == 1 {
		return m, nil
	}
	var cur int64
	switch err := s.pool.QueryRow(ctx, `SELECT version FROM migrations WHERE id = $1`, m.ID).Scan(&cur); {
	case errors.Is(err, pgx.ErrNoRows):
		return records.Migration{}, fmt.Errorf("migration %d: %w", m.ID, store.ErrNotFound)
	case err != nil:
		return records.Migration{}, fmt.Errorf("reading migration %d: %w", m.ID, err)
	}
	return records.Migration{}, store.VersionConflict(placement.MigrationVersion, fmt.Sprint(m.ID), expected, cur)
}

// ListMigrations implements store.Store; migrations come sorted by ID. The
// filter narrows the query on indexed columns and store.MatchMigration has
// the last word, so the semantics are the interface's.
func (s *Store) ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.UUID != "" {
		where = append(where, "uuid = "+arg(f.UUID))
	}
	if f.InstanceUUID != "" {
		where = append(where, "instance_uuid = "+arg(f.InstanceUUID))
	}
	if f.Host != "" {
		h := arg(f.Host)
		where = append(where, "(source_host = "+h+" OR dest_host = "+h+")")
	}
	if f.Status != "" {
		where = append(where, "status = "+arg(f.Status))
	}
	if f.ActiveOnly {
		where = append(where, "active")
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

// CreateFlavor implements store.Store.
func (s *Store) CreateFlavor(ctx context.Context, f records.Flavor) (records.Flavor, error) {
	if f.ID == "" || f.Name == "" {
		return records.Flavor{}, &placement.InvalidError{Msg: "flavor needs an id and a name"}
	}
	// A taken ID or name: nothing inserted.
	err := s.insertJSON(ctx, `INSERT INTO flavors (id, name, data) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, f, f.ID, f.Name)
	if err != nil {
		return records.Flavor{}, fmt.Errorf("creating flavor %s (%s): %w", f.ID, f.Name, err)
	}
	return f, nil
}

// UpdateFlavor implements store.Store; fn may not change the ID or the name.
func (s *Store) UpdateFlavor(ctx context.Context, id string, fn func(*records.Flavor) error) (records.Flavor, error) {
	var name string
	f, err := updateJSON(ctx, s, `SELECT data FROM flavors WHERE id = $1 FOR UPDATE`, id, func(f *records.Flavor) error {
		name = f.Name
		return fn(f)
	}, func(w *wtx, f *records.Flavor) error {
		f.ID, f.Name = id, name
		return w.putJSON(`UPDATE flavors SET data = $2 WHERE id = $1`, f, id)
	})
	if err != nil {
		return records.Flavor{}, fmt.Errorf("updating flavor %s: %w", id, err)
	}
	return f, nil
}

// GetFlavor implements store.Store.
func (s *Store) GetFlavor(ctx context.Context, id string) (records.Flavor, error) {
	var f records.Flavor
	if err := s.getJSON(ctx, &f, `SELECT data FROM flavors WHERE id = $1`, id); err != nil {
		return records.Flavor{}, fmt.Errorf("flavor %s: %w", id, err)
	}
	return f, nil
}

// ListFlavors implements store.Store.
func (s *Store) ListFlavors(ctx context.Context) ([]records.Flavor, error) {
	out, err := listJSON[records.Flavor](ctx, s, nil, `SELECT data FROM flavors ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("listing flavors: %w", err)
	}
	return out, nil
}

// DeleteFlavor implements store.Store.
func (s *Store) DeleteFlavor(ctx context.Context, id string) error {
	if err := s.deleteOne(ctx, `DELETE FROM flavors WHERE id = $1`, id); err != nil {
		return fmt.Errorf("deleting flavor %s: %w", id, err)
	}
	return nil
}

// CreateInstanceAction implements store.Store.
func (s *Store) CreateInstanceAction(ctx context.Context, a records.InstanceAction) error {
	err := s.insertJSON(ctx, `INSERT INTO instance_actions (instance_uuid, request_id, data) VALUES ($1, $2, $3)
		ON CONFLICT (instance_uuid, request_id) DO NOTHING`, a, a.InstanceUUID, a.RequestID)
	if err != nil {
		return fmt.Errorf("recording instance action %s of %s: %w", a.RequestID, a.InstanceUUID, err)
	}
	return nil
}

// ListInstanceActions implements store.Store.
func (s *Store) ListInstanceActions(ctx context.Context, instanceUUID string) ([]records.InstanceAction, error) {
	out, err := listJSON[records.InstanceAction](ctx, s, nil,
		`SELECT data FROM instance_actions WHERE instance_uuid = $1 ORDER BY id`, instanceUUID)
	if err != nil {
		return nil, fmt.Errorf("listing actions of instance %s: %w", instanceUUID, err)
	}
	return out, nil
}
