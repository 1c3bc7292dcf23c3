package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Compute host aggregates and server groups.

var (
	qAggregateNameTaken = wq(`SELECT COUNT(*) FROM aggregates WHERE name = ? AND id != ?`)
	qInsertAggregate    = wq(`INSERT INTO aggregates (name, data) VALUES (?, '{}')`)
	qGetAggregate       = wq(`SELECT data FROM aggregates WHERE id = ?`)
	qPutAggregate       = wq(`UPDATE aggregates SET name = ?, data = ? WHERE id = ?`)
	qDeleteAggregate    = wq(`DELETE FROM aggregates WHERE id = ?`)
	qInsertGroup        = wq(`INSERT INTO server_groups (uuid, data) VALUES (?, ?) ON CONFLICT DO NOTHING`)
	qGetGroup           = wq(`SELECT data FROM server_groups WHERE uuid = ?`)
	qPutGroup           = wq(`UPDATE server_groups SET data = ? WHERE uuid = ?`)
	qDeleteGroup        = wq(`DELETE FROM server_groups WHERE uuid = ?`)
)

// putAggregate writes an aggregate's row; ErrExists if another aggregate
// has its name.
func (w *wtx) putAggregate(a records.Aggregate) error {
	var taken int
	if err := w.queryRow(qAggregateNameTaken, a.Name, a.ID).Scan(&taken); err != nil {
		return err
	}
	if taken > 0 {
		return fmt.Errorf("aggregate name %q: %w", a.Name, store.ErrExists)
	}
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if _, err := w.exec(qPutAggregate, a.Name, string(data), a.ID); err != nil {
		return err
	}
	return w.note(store.ChangeAggregate, strconv.FormatInt(a.ID, 10))
}

// CreateAggregate implements store.Store.
func (s *Store) CreateAggregate(ctx context.Context, a records.Aggregate) (records.Aggregate, error) {
	if a.Name == "" {
		return records.Aggregate{}, &placement.InvalidError{Msg: "aggregate needs a name"}
	}
	err := s.write(ctx, func(w *wtx) error {
		// A taken name fails the insert on the UNIQUE column; ask first to
		// return ErrExists rather than a constraint error.
		var taken int
		if err := w.queryRow(qAggregateNameTaken, a.Name, 0).Scan(&taken); err != nil {
			return err
		}
		if taken > 0 {
			return store.ErrExists
		}
		res, err := w.exec(qInsertAggregate, a.Name)
		if err != nil {
			return err
		}
		if a.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		return w.putAggregate(a)
	})
	if err != nil {
		return records.Aggregate{}, fmt.Errorf("creating aggregate %q: %w", a.Name, err)
	}
	return a, nil
}

// GetAggregate implements store.Store.
func (s *Store) GetAggregate(ctx context.Context, id int64) (records.Aggregate, error) {
	var a records.Aggregate
	if err := s.getJSON(ctx, &a, `SELECT data FROM aggregates WHERE id = ?`, id); err != nil {
		return records.Aggregate{}, fmt.Errorf("aggregate %d: %w", id, err)
	}
	return a, nil
}

// ListAggregates implements store.Store.
func (s *Store) ListAggregates(ctx context.Context) ([]records.Aggregate, error) {
	out, err := listJSON[records.Aggregate](ctx, s, nil, `SELECT data FROM aggregates ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("listing aggregates: %w", err)
	}
	return out, nil
}

// UpdateAggregate implements store.Store.
func (s *Store) UpdateAggregate(ctx context.Context, id int64, fn func(*records.Aggregate) error) (records.Aggregate, error) {
	var a records.Aggregate
	err := s.write(ctx, func(w *wtx) error {
		if err := w.getJSON(qGetAggregate, &a, id); err != nil {
			return err
		}
		if err := fn(&a); err != nil {
			return err
		}
		a.ID = id
		return w.putAggregate(a)
	})
	if err != nil {
		return records.Aggregate{}, fmt.Errorf("updating aggregate %d: %w", id, err)
	}
	return a, nil
}

// DeleteAggregate implements store.Store.
func (s *Store) DeleteAggregate(ctx context.Context, id int64) error {
	err := s.write(ctx, func(w *wtx) error {
		if err := w.deleteOne(qDeleteAggregate, id); err != nil {
			return err
		}
		return w.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
	})
	if err != nil {
		return fmt.Errorf("deleting aggregate %d: %w", id, err)
	}
	return nil
}

// CreateServerGroup implements store.Store.
func (s *Store) CreateServerGroup(ctx context.Context, g records.ServerGroup) (records.ServerGroup, error) {
	if g.UUID == "" {
		return records.ServerGroup{}, &placement.InvalidError{Msg: "server group needs a uuid"}
	}
	if g.Members == nil {
		g.Members = []string{}
	}
	data, err := json.Marshal(g)
	if err != nil {
		return records.ServerGroup{}, fmt.Errorf("encoding server group %s: %w", g.UUID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		res, err := w.exec(qInsertGroup, g.UUID, string(data))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrExists
		}
		return nil
	})
	if err != nil {
		return records.ServerGroup{}, fmt.Errorf("creating server group %s: %w", g.UUID, err)
	}
	return g, nil
}

// GetServerGroup implements store.Store.
func (s *Store) GetServerGroup(ctx context.Context, uuid string) (records.ServerGroup, error) {
	var g records.ServerGroup
	if err := s.getJSON(ctx, &g, `SELECT data FROM server_groups WHERE uuid = ?`, uuid); err != nil {
		return records.ServerGroup{}, fmt.Errorf("server group %s: %w", uuid, err)
	}
	return g, nil
}

// ListServerGroups implements store.Store.
func (s *Store) ListServerGroups(ctx context.Context) ([]records.ServerGroup, error) {
	out, err := listJSON[records.ServerGroup](ctx, s, nil, `SELECT data FROM server_groups ORDER BY uuid`)
	if err != nil {
		return nil, fmt.Errorf("listing server groups: %w", err)
	}
	return out, nil
}

// UpdateServerGroup implements store.Store.
func (s *Store) UpdateServerGroup(ctx context.Context, uuid string, fn func(*records.ServerGroup) error) (records.ServerGroup, error) {
	var g records.ServerGroup
	err := s.write(ctx, func(w *wtx) error {
		if err := w.getJSON(qGetGroup, &g, uuid); err != nil {
			return err
		}
		if err := fn(&g); err != nil {
			return err
		}
		g.UUID = uuid
		data, err := json.Marshal(g)
		if err != nil {
			return err
		}
		_, err = w.exec(qPutGroup, string(data), uuid)
		return err
	})
	if err != nil {
		return records.ServerGroup{}, fmt.Errorf("updating server group %s: %w", uuid, err)
	}
	return g, nil
}

// DeleteServerGroup implements store.Store.
func (s *Store) DeleteServerGroup(ctx context.Context, uuid string) error {
	if err := s.write(ctx, func(w *wtx) error { return w.deleteOne(qDeleteGroup, uuid) }); err != nil {
		return fmt.Errorf("deleting server group %s: %w", uuid, err)
	}
	return nil
}

// getJSON decodes one row's JSON column inside a write transaction;
// ErrNotFound without a row.
func (w *wtx) getJSON(query string, v any, args ...any) error {
	var data string
	if err := w.queryRow(query, args...).Scan(&data); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		return err
	}
	return json.Unmarshal([]byte(data), v)
}

// deleteOne runs a DELETE that must remove one row; ErrNotFound otherwise.
func (w *wtx) deleteOne(query string, args ...any) error {
	res, err := w.exec(query, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return store.ErrNotFound
	}
	return nil
}
