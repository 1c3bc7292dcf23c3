package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/jackc/pgx/v5"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// PutHostRecord implements store.Store.
func (s *Store) PutHostRecord(ctx context.Context, h records.HostRecord) error {
	data, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encoding host record %s: %w", h.Host, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		w.queue(`INSERT INTO host_records (host, data) VALUES ($1, $2)
			ON CONFLICT (host) DO UPDATE SET data = excluded.data`, h.Host, data)
		w.note(store.ChangeHost, h.Host)
		return nil
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
	data, err := json.Marshal(sv)
	if err != nil {
		return fmt.Errorf("encoding service %s: %w", sv.Host, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		w.queue(qPutService, sv.Host, data)
		w.note(store.ChangeService, sv.Host)
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing service %s: %w", sv.Host, err)
	}
	return nil
}

// UpdateService implements store.Store: the service row is locked (SELECT
// … FOR UPDATE), fn applied and the result written in one transaction, so
// concurrent updates of one service queue instead of undoing each other.
func (s *Store) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	var sv records.Service
	err := s.write(ctx, func(w *wtx) error {
		var data []byte
		w.queue(`SELECT data FROM services WHERE host = $1 FOR UPDATE`, host).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&data); err != nil {
					return err
				}
			}
			return rows.Err()
		})
		if err := w.send(); err != nil {
			return err
		}
		if data == nil {
			return store.ErrNotFound
		}
		sv = records.Service{}
		if err := json.Unmarshal(data, &sv); err != nil {
			return fmt.Errorf("decoding: %w", err)
		}
		if err := fn(&sv); err != nil {
			return err
		}
		sv.Host = host
		out, err := json.Marshal(sv)
		if err != nil {
			return err
		}
		w.queue(qPutService, host, out)
		w.note(store.ChangeService, host)
		return nil
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
	data, err := json.Marshal(in)
	if err != nil {
		return records.Instance{}, fmt.Errorf("encoding instance %s: %w", in.UUID, err)
	}
	ct, err := s.pool.Exec(ctx, `INSERT INTO instances (uuid, host, version, data) VALUES ($1, $2, $3, $4)
		ON CONFLICT (uuid) DO NOTHING`, in.UUID, in.Host, in.Version, data)
	if err == nil && ct.RowsAffected() == 0 {
		err = store.ErrExists
	}
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
	ct, err := s.pool.Exec(ctx, `DELETE FROM instances WHERE uuid = $1`, uuid)
	if err == nil && ct.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
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
	data, err := json.Marshal(f)
	if err != nil {
		return records.Flavor{}, fmt.Errorf("encoding flavor %s: %w", f.ID, err)
	}
	// A taken ID or name: nothing inserted.
	ct, err := s.pool.Exec(ctx, `INSERT INTO flavors (id, name, data) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, f.ID, f.Name, data)
	if err == nil && ct.RowsAffected() == 0 {
		err = store.ErrExists
	}
	if err != nil {
		return records.Flavor{}, fmt.Errorf("creating flavor %s (%s): %w", f.ID, f.Name, err)
	}
	return f, nil
}

// UpdateFlavor implements store.Store.
func (s *Store) UpdateFlavor(ctx context.Context, id string, fn func(*records.Flavor) error) (records.Flavor, error) {
	var f records.Flavor
	err := s.write(ctx, func(w *wtx) error {
		var data []byte
		w.queue(`SELECT data FROM flavors WHERE id = $1 FOR UPDATE`, id).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&data); err != nil {
					return err
				}
			}
			return rows.Err()
		})
		if err := w.send(); err != nil {
			return err
		}
		if data == nil {
			return store.ErrNotFound
		}
		var cur records.Flavor
		if err := json.Unmarshal(data, &cur); err != nil {
			return fmt.Errorf("decoding: %w", err)
		}
		f = cur
		f.ExtraSpecs = maps.Clone(cur.ExtraSpecs)
		if err := fn(&f); err != nil {
			return err
		}
		f.ID, f.Name = cur.ID, cur.Name
		out, err := json.Marshal(f)
		if err != nil {
			return err
		}
		w.queue(`UPDATE flavors SET data = $1 WHERE id = $2`, out, id)
		return nil
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
	ct, err := s.pool.Exec(ctx, `DELETE FROM flavors WHERE id = $1`, id)
	if err == nil && ct.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("deleting flavor %s: %w", id, err)
	}
	return nil
}

// getJSON reads one JSONB column into v; ErrNotFound if there is no row.
func (s *Store) getJSON(ctx context.Context, v any, query string, args ...any) error {
	var data []byte
	err := s.pool.QueryRow(ctx, query, args...).Scan(&data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}

// listJSON decodes the JSONB column of every row of a query, keeping those
// keep accepts (all if keep is nil). It never returns a nil slice without
// an error.
func listJSON[T any](ctx context.Context, s *Store, keep func(T) bool, query string, args ...any) ([]T, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("decoding: %w", err)
		}
		if keep == nil || keep(v) {
			out = append(out, v)
		}
	}
	return out, rows.Err()
}

// CreateInstanceAction implements store.Store.
func (s *Store) CreateInstanceAction(ctx context.Context, a records.InstanceAction) error {
	data, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encoding instance action %s: %w", a.RequestID, err)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO instance_actions (instance_uuid, request_id, data) VALUES ($1, $2, $3)
		ON CONFLICT (instance_uuid, request_id) DO NOTHING`, a.InstanceUUID, a.RequestID, data)
	if err != nil {
		return fmt.Errorf("recording instance action %s of %s: %w", a.RequestID, a.InstanceUUID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("recording instance action %s of %s: %w", a.RequestID, a.InstanceUUID, store.ErrExists)
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
