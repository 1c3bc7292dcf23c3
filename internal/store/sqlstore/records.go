package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// PutHostRecord implements store.Store.
func (r *Records) PutHostRecord(ctx context.Context, h records.HostRecord) error {
	if err := r.db.Write(ctx, func(tx Tx) error { return r.putHostRecord(tx, h) }); err != nil {
		return fmt.Errorf("writing host record %s: %w", h.Host, err)
	}
	return nil
}

// PutHostRecords implements store.HostRecordBatch: every record in one
// write transaction.
func (r *Records) PutHostRecords(ctx context.Context, recs []records.HostRecord) error {
	err := r.db.Write(ctx, func(tx Tx) error {
		for _, h := range recs {
			if err := r.putHostRecord(tx, h); err != nil {
				return fmt.Errorf("host record %s: %w", h.Host, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing %d host records: %w", len(recs), err)
	}
	return nil
}

// putHostRecord writes a host record's row and notes the change.
func (r *Records) putHostRecord(tx Tx, h records.HostRecord) error {
	if err := putJSON(tx, r.q.putHostRecord, h, h.Host); err != nil {
		return err
	}
	return tx.Note(store.ChangeHost, h.Host)
}

// GetHostRecord implements store.Store.
func (r *Records) GetHostRecord(ctx context.Context, host string) (records.HostRecord, error) {
	var h records.HostRecord
	if err := r.getJSON(ctx, &h, r.q.getHostRecord, host); err != nil {
		return records.HostRecord{}, fmt.Errorf("host record %s: %w", host, err)
	}
	return h, nil
}

// ListHostRecords implements store.Store; records come sorted by host.
func (r *Records) ListHostRecords(ctx context.Context) ([]records.HostRecord, error) {
	out, err := listJSON[records.HostRecord](ctx, r, nil, r.q.listHostRecords)
	if err != nil {
		return nil, fmt.Errorf("listing host records: %w", err)
	}
	return out, nil
}

// GetHostRecords implements store.HostBatchReader: byKeysBatch hosts a
// query.
func (r *Records) GetHostRecords(ctx context.Context, hosts []string) ([]records.HostRecord, error) {
	out, err := listByKeys[records.HostRecord](ctx, r, r.q.getHostRecords, hosts)
	if err != nil {
		return nil, fmt.Errorf("reading %d host records: %w", len(hosts), err)
	}
	return out, nil
}

// GetServices implements store.HostBatchReader: byKeysBatch hosts a
// query.
func (r *Records) GetServices(ctx context.Context, hosts []string) ([]records.Service, error) {
	out, err := listByKeys[records.Service](ctx, r, r.q.getServices, hosts)
	if err != nil {
		return nil, fmt.Errorf("reading %d services: %w", len(hosts), err)
	}
	return out, nil
}

// listByKeys decodes the rows of keys, sorted and each once, with query:
// a statement taking byKeysBatch keys, run once per byKeysBatch of them
// (a shorter last batch repeats its last key).
func listByKeys[T any](ctx context.Context, r *Records, query string, keys []string) ([]T, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	out := make([]T, 0, len(keys))
	args := make([]any, byKeysBatch)
	for len(keys) > 0 {
		n := min(len(keys), byKeysBatch)
		for i := range args {
			args[i] = keys[min(i, n-1)]
		}
		part, err := listJSON[T](ctx, r, nil, query, args...)
		if err != nil {
			return nil, err
		}
		out = append(out, part...)
		keys = keys[n:]
	}
	return out, nil
}

// PutService implements store.Store.
func (r *Records) PutService(ctx context.Context, sv records.Service) error {
	if err := r.db.Write(ctx, func(tx Tx) error { return r.putService(tx, sv) }); err != nil {
		return fmt.Errorf("writing service %s: %w", sv.Host, err)
	}
	return nil
}

// putService writes a service's row and notes the change.
func (r *Records) putService(tx Tx, sv records.Service) error {
	if err := putJSON(tx, r.q.putService, sv, sv.Host); err != nil {
		return err
	}
	return tx.Note(store.ChangeService, sv.Host)
}

// UpdateService implements store.Store: the service row is read (and
// locked, where the dialect locks rows), fn applied and the result written
// in one write transaction, so concurrent updates of one service queue
// instead of undoing each other.
func (r *Records) UpdateService(ctx context.Context, host string, fn func(*records.Service) error) (records.Service, error) {
	sv, err := updateJSON(ctx, r, r.q.lockService, host, fn, func(tx Tx, sv *records.Service) error {
		sv.Host = host
		return r.putService(tx, *sv)
	})
	if err != nil {
		return records.Service{}, fmt.Errorf("updating service %s: %w", host, err)
	}
	return sv, nil
}

// UpdateServices implements store.ServiceBatch: each service row is read
// (and locked, where the dialect locks rows) in hosts' order, fn applied
// and the result written, all in one write transaction.
func (r *Records) UpdateServices(ctx context.Context, hosts []string, fn func(i int, s *records.Service) error) ([]records.Service, error) {
	out := make([]records.Service, len(hosts))
	err := r.db.Write(ctx, func(tx Tx) error {
		for i, host := range hosts {
			var sv records.Service
			if err := scanJSON(tx.QueryRow(r.q.lockService, host), &sv); err != nil {
				return fmt.Errorf("service %s: %w", host, err)
			}
			if err := fn(i, &sv); err != nil {
				return fmt.Errorf("service %s: %w", host, err)
			}
			sv.Host = host
			if err := r.putService(tx, sv); err != nil {
				return fmt.Errorf("service %s: %w", host, err)
			}
			out[i] = sv
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("updating %d services: %w", len(hosts), err)
	}
	return out, nil
}

// GetService implements store.Store.
func (r *Records) GetService(ctx context.Context, host string) (records.Service, error) {
	var sv records.Service
	if err := r.getJSON(ctx, &sv, r.q.getService, host); err != nil {
		return records.Service{}, fmt.Errorf("service %s: %w", host, err)
	}
	return sv, nil
}

// ListServices implements store.Store; services come sorted by host.
func (r *Records) ListServices(ctx context.Context) ([]records.Service, error) {
	out, err := listJSON[records.Service](ctx, r, nil, r.q.listServices)
	if err != nil {
		return nil, fmt.Errorf("listing services: %w", err)
	}
	return out, nil
}

// CreateInstance implements store.Store.
func (r *Records) CreateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	in.Version = 1
	if err := r.insertJSON(ctx, r.q.insertInstance, in, in.UUID, in.Host, in.Version); err != nil {
		return records.Instance{}, fmt.Errorf("creating instance %s: %w", in.UUID, err)
	}
	return in, nil
}

// GetInstance implements store.Store.
func (r *Records) GetInstance(ctx context.Context, uuid string) (records.Instance, error) {
	var in records.Instance
	if err := r.getJSON(ctx, &in, r.q.getInstance, uuid); err != nil {
		return records.Instance{}, fmt.Errorf("instance %s: %w", uuid, err)
	}
	return in, nil
}

// UpdateInstance implements store.Store with one conditional UPDATE; only a
// refused one reads the row again, to report the version it found.
func (r *Records) UpdateInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	expected := in.Version
	in.Version++
	data, err := encode(in)
	if err != nil {
		return records.Instance{}, fmt.Errorf("instance %s: %w", in.UUID, err)
	}
	err = r.updateVersioned(ctx, r.q.updateInstance, r.q.instanceVersion, in.UUID, expected, func(cur int64) error {
		return store.VersionConflict(placement.InstanceVersion, in.UUID, expected, cur)
	}, in.Host, in.Version, data)
	if err != nil {
		return records.Instance{}, versionedError("instance "+in.UUID, err)
	}
	return in, nil
}

// versionedError adds the record's name to an updateVersioned error; a
// conflict already names it.
func versionedError(what string, err error) error {
	if _, ok := errors.AsType[*placement.ConflictError](err); ok {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// DeleteInstance implements store.Store.
func (r *Records) DeleteInstance(ctx context.Context, uuid string) error {
	if err := deleteOne(r.db.Exec(ctx, r.q.deleteInstance, uuid)); err != nil {
		return fmt.Errorf("deleting instance %s: %w", uuid, err)
	}
	return nil
}

// ListInstances implements store.Store; instances come sorted by UUID.
func (r *Records) ListInstances(ctx context.Context, host string) ([]records.Instance, error) {
	query, args := r.q.listInstances, []any(nil)
	if host != "" {
		query, args = r.q.listInstancesOn, []any{host}
	}
	out, err := listJSON[records.Instance](ctx, r, nil, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing instances on %q: %w", host, err)
	}
	return out, nil
}

// ListProjectInstances implements store.Instances; instances come sorted
// by UUID.
func (r *Records) ListProjectInstances(ctx context.Context, project string) ([]records.Instance, error) {
	out, err := listJSON[records.Instance](ctx, r, nil, r.q.listProjectInstances, project)
	if err != nil {
		return nil, fmt.Errorf("listing the instances of project %s: %w", project, err)
	}
	return out, nil
}

// CreateMigration implements store.Store. IDs come from the database (an
// AUTOINCREMENT or identity column), so they increase and are never
// reused; the JSON copy carries the ID too, for readers of the raw table.
func (r *Records) CreateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	m.Version = 1
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	if err := r.db.Write(ctx, func(tx Tx) error { return r.insertMigration(tx, &m) }); err != nil {
		return records.Migration{}, fmt.Errorf("creating migration for instance %s: %w", m.InstanceUUID, err)
	}
	return m, nil
}

// insertMigration inserts m's row, setting m.ID from the database, then
// its JSON copy (which carries the ID).
func (r *Records) insertMigration(tx Tx, m *records.Migration) error {
	var err error
	m.ID, err = insertID(tx, r.q.insertMigration,
		m.UUID, m.InstanceUUID, m.SourceHost, m.DestHost, m.Status, !records.MigrationTerminal(m.Status), m.Version)
	if err != nil {
		return err
	}
	return putJSON(tx, r.q.setMigrationData, *m, m.ID)
}

// BeginMove implements store.Store: the instance's conditional UPDATE and
// the migration's INSERT in one write transaction.
func (r *Records) BeginMove(ctx context.Context, in records.Instance, m records.Migration) (records.Instance, records.Migration, error) {
	expected := in.Version
	in.Version++
	data, err := encode(in)
	if err != nil {
		return records.Instance{}, records.Migration{}, fmt.Errorf("instance %s: %w", in.UUID, err)
	}
	m.Version = 1
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	err = r.db.Write(ctx, func(tx Tx) error {
		n, err := tx.Exec(r.q.updateInstance, in.Host, in.Version, data, in.UUID, expected)
		if err != nil {
			return fmt.Errorf("instance %s: updating: %w", in.UUID, err)
		}
		if n != 1 {
			var cur int64
			switch err := tx.QueryRow(r.q.instanceVersion, in.UUID).Scan(&cur); {
			case errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("instance %s: %w", in.UUID, store.ErrNotFound)
			case err != nil:
				return fmt.Errorf("instance %s: reading the version: %w", in.UUID, err)
			}
			return store.VersionConflict(placement.InstanceVersion, in.UUID, expected, cur)
		}
		return r.insertMigration(tx, &m)
	})
	if err != nil {
		return records.Instance{}, records.Migration{}, fmt.Errorf("starting the move of instance %s: %w", in.UUID, err)
	}
	return in, m, nil
}

// GetMigration implements store.Store.
func (r *Records) GetMigration(ctx context.Context, id int64) (records.Migration, error) {
	var m records.Migration
	if err := r.getJSON(ctx, &m, r.q.getMigration, id); err != nil {
		return records.Migration{}, fmt.Errorf("migration %d: %w", id, err)
	}
	return m, nil
}

// UpdateMigration implements store.Store, as UpdateInstance does.
func (r *Records) UpdateMigration(ctx context.Context, m records.Migration) (records.Migration, error) {
	expected := m.Version
	m.Version++
	m.TriedHosts = append([]string(nil), m.TriedHosts...)
	data, err := encode(m)
	if err != nil {
		return records.Migration{}, fmt.Errorf("migration %d: %w", m.ID, err)
	}
	err = r.updateVersioned(ctx, r.q.updateMigration, r.q.migrationVersion, m.ID, expected, func(cur int64) error {
		return store.VersionConflict(placement.MigrationVersion, fmt.Sprint(m.ID), expected, cur)
	}, m.UUID, m.InstanceUUID, m.SourceHost, m.DestHost, m.Status, !records.MigrationTerminal(m.Status), m.Version, data)
	if err != nil {
		return records.Migration{}, versionedError(fmt.Sprintf("migration %d", m.ID), err)
	}
	return m, nil
}

// ListMigrations implements store.Store; migrations come sorted by ID. The
// filter narrows the query on indexed columns and store.MatchMigration has
// the last word, so the semantics are the interface's.
func (r *Records) ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error) {
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
		where = append(where, r.d.active)
	}
	query := `SELECT data FROM migrations`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY id"
	out, err := listJSON(ctx, r, func(m records.Migration) bool { return store.MatchMigration(m, f) }, r.d.Rebind(query), args...)
	if err != nil {
		return nil, fmt.Errorf("listing migrations: %w", err)
	}
	return out, nil
}

// CreateInstanceAction implements store.Store.
func (r *Records) CreateInstanceAction(ctx context.Context, a records.InstanceAction) error {
	if err := r.insertJSON(ctx, r.q.insertAction, a, a.InstanceUUID, a.RequestID); err != nil {
		return fmt.Errorf("recording instance action %s of %s: %w", a.RequestID, a.InstanceUUID, err)
	}
	return nil
}

// ListInstanceActions implements store.Store.
func (r *Records) ListInstanceActions(ctx context.Context, instanceUUID string) ([]records.InstanceAction, error) {
	out, err := listJSON[records.InstanceAction](ctx, r, nil, r.q.listActions, instanceUUID)
	if err != nil {
		return nil, fmt.Errorf("listing actions of instance %s: %w", instanceUUID, err)
	}
	return out, nil
}

// CreateFlavor implements store.Store.
func (r *Records) CreateFlavor(ctx context.Context, f records.Flavor) (records.Flavor, error) {
	if f.ID == "" || f.Name == "" {
		return records.Flavor{}, &placement.InvalidError{Msg: "flavor needs an id and a name"}
	}
	if err := r.insertJSON(ctx, r.q.insertFlavor, f, f.ID, f.Name); err != nil {
		return records.Flavor{}, fmt.Errorf("creating flavor %s (%s): %w", f.ID, f.Name, err)
	}
	return f, nil
}

// UpdateFlavor implements store.Store; fn may not change the ID or the name.
func (r *Records) UpdateFlavor(ctx context.Context, id string, fn func(*records.Flavor) error) (records.Flavor, error) {
	var name string
	f, err := updateJSON(ctx, r, r.q.lockFlavor, id, func(f *records.Flavor) error {
		name = f.Name
		return fn(f)
	}, func(tx Tx, f *records.Flavor) error {
		f.ID, f.Name = id, name
		return putJSON(tx, r.q.setFlavor, f, id)
	})
	if err != nil {
		return records.Flavor{}, fmt.Errorf("updating flavor %s: %w", id, err)
	}
	return f, nil
}

// GetFlavor implements store.Store.
func (r *Records) GetFlavor(ctx context.Context, id string) (records.Flavor, error) {
	var f records.Flavor
	if err := r.getJSON(ctx, &f, r.q.getFlavor, id); err != nil {
		return records.Flavor{}, fmt.Errorf("flavor %s: %w", id, err)
	}
	return f, nil
}

// ListFlavors implements store.Store.
func (r *Records) ListFlavors(ctx context.Context) ([]records.Flavor, error) {
	out, err := listJSON[records.Flavor](ctx, r, nil, r.q.listFlavors)
	if err != nil {
		return nil, fmt.Errorf("listing flavors: %w", err)
	}
	return out, nil
}

// DeleteFlavor implements store.Store.
func (r *Records) DeleteFlavor(ctx context.Context, id string) error {
	if err := deleteOne(r.db.Exec(ctx, r.q.deleteFlavor, id)); err != nil {
		return fmt.Errorf("deleting flavor %s: %w", id, err)
	}
	return nil
}
