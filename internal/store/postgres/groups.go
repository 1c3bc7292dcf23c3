package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Compute host aggregates and server groups.

// lockJSON reads one row's JSON column with FOR UPDATE inside a write
// transaction and decodes it into v; ErrNotFound without a row.
func (w *wtx) lockJSON(v any, query string, args ...any) error {
	var data []byte
	w.queue(query, args...).Query(func(rows pgx.Rows) error {
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
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}

// CreateAggregate implements store.Store.
func (s *Store) CreateAggregate(ctx context.Context, a records.Aggregate) (records.Aggregate, error) {
	if a.Name == "" {
		return records.Aggregate{}, &placement.InvalidError{Msg: "aggregate needs a name"}
	}
	err := s.write(ctx, func(w *wtx) error {
		a.ID = 0
		w.queue(`INSERT INTO aggregates (name, data) VALUES ($1, '{}') ON CONFLICT (name) DO NOTHING RETURNING id`, a.Name).
			Query(func(rows pgx.Rows) error {
				for rows.Next() {
					if err := rows.Scan(&a.ID); err != nil {
						return err
					}
				}
				return rows.Err()
			})
		if err := w.send(); err != nil {
			return err
		}
		if a.ID == 0 {
			return store.ErrExists
		}
		data, err := json.Marshal(a)
		if err != nil {
			return err
		}
		w.queue(`UPDATE aggregates SET data = $1 WHERE id = $2`, data, a.ID)
		w.note(store.ChangeAggregate, strconv.FormatInt(a.ID, 10))
		return nil
	})
	if err != nil {
		return records.Aggregate{}, fmt.Errorf("creating aggregate %q: %w", a.Name, err)
	}
	return a, nil
}

// GetAggregate implements store.Store.
func (s *Store) GetAggregate(ctx context.Context, id int64) (records.Aggregate, error) {
	var a records.Aggregate
	if err := s.getJSON(ctx, &a, `SELECT data FROM aggregates WHERE id = $1`, id); err != nil {
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
		a = records.Aggregate{}
		if err := w.lockJSON(&a, `SELECT data FROM aggregates WHERE id = $1 FOR UPDATE`, id); err != nil {
			return err
		}
		if err := fn(&a); err != nil {
			return err
		}
		a.ID = id
		var taken bool
		w.queue(`SELECT EXISTS (SELECT 1 FROM aggregates WHERE name = $1 AND id <> $2)`, a.Name, id).
			QueryRow(func(row pgx.Row) error { return row.Scan(&taken) })
		if err := w.send(); err != nil {
			return err
		}
		if taken {
			return fmt.Errorf("aggregate name %q: %w", a.Name, store.ErrExists)
		}
		data, err := json.Marshal(a)
		if err != nil {
			return err
		}
		w.queue(`UPDATE aggregates SET name = $1, data = $2 WHERE id = $3`, a.Name, data, id)
		w.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
		return nil
	})
	if err != nil {
		return records.Aggregate{}, fmt.Errorf("updating aggregate %d: %w", id, err)
	}
	return a, nil
}

// DeleteAggregate implements store.Store.
func (s *Store) DeleteAggregate(ctx context.Context, id int64) error {
	err := s.write(ctx, func(w *wtx) error {
		var n int64
		w.queue(`WITH d AS (DELETE FROM aggregates WHERE id = $1 RETURNING 1) SELECT COUNT(*) FROM d`, id).
			QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
		if err := w.send(); err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		w.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
		return nil
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
	ct, err := s.pool.Exec(ctx, `INSERT INTO server_groups (uuid, data) VALUES ($1, $2) ON CONFLICT DO NOTHING`, g.UUID, data)
	if err == nil && ct.RowsAffected() == 0 {
		err = store.ErrExists
	}
	if err != nil {
		return records.ServerGroup{}, fmt.Errorf("creating server group %s: %w", g.UUID, err)
	}
	return g, nil
}

// GetServerGroup implements store.Store.
func (s *Store) GetServerGroup(ctx context.Context, uuid string) (records.ServerGroup, error) {
	var g records.ServerGroup
	if err := s.getJSON(ctx, &g, `SELECT data FROM server_groups WHERE uuid = $1`, uuid); err != nil {
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

// UpdateServerGroup implements store.Store: the row is locked, fn applied
// and the result written in one transaction.
func (s *Store) UpdateServerGroup(ctx context.Context, uuid string, fn func(*records.ServerGroup) error) (records.ServerGroup, error) {
	var g records.ServerGroup
	err := s.write(ctx, func(w *wtx) error {
		g = records.ServerGroup{}
		if err := w.lockJSON(&g, `SELECT data FROM server_groups WHERE uuid = $1 FOR UPDATE`, uuid); err != nil {
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
		w.queue(`UPDATE server_groups SET data = $1 WHERE uuid = $2`, data, uuid)
		return nil
	})
	if err != nil {
		return records.ServerGroup{}, fmt.Errorf("updating server group %s: %w", uuid, err)
	}
	return g, nil
}

// DeleteServerGroup implements store.Store.
func (s *Store) DeleteServerGroup(ctx context.Context, uuid string) error {
	ct, err := s.pool.Exec(ctx, `DELETE FROM server_groups WHERE uuid = $1`, uuid)
	if err == nil && ct.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("deleting server group %s: %w", uuid, err)
	}
	return nil
}
