package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Compute host aggregates and server groups.

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
		w.note(store.ChangeAggregate, strconv.FormatInt(a.ID, 10))
		return w.putJSON(`UPDATE aggregates SET data = $2 WHERE id = $1`, a, a.ID)
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
	a, err := updateJSON(ctx, s, `SELECT data FROM aggregates WHERE id = $1 FOR UPDATE`, id, fn,
		func(w *wtx, a *records.Aggregate) error {
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
			w.note(store.ChangeAggregate, strconv.FormatInt(id, 10))
			return w.putJSON(`UPDATE aggregates SET name = $2, data = $3 WHERE id = $1`, a, id, a.Name)
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
	err := s.insertJSON(ctx, `INSERT INTO server_groups (uuid, data) VALUES ($1, $2) ON CONFLICT DO NOTHING`, g, g.UUID)
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
	g, err := updateJSON(ctx, s, `SELECT data FROM server_groups WHERE uuid = $1 FOR UPDATE`, uuid, fn,
		func(w *wtx, g *records.ServerGroup) error {
			g.UUID = uuid
			return w.putJSON(`UPDATE server_groups SET data = $2 WHERE uuid = $1`, g, uuid)
		})
	if err != nil {
		return records.ServerGroup{}, fmt.Errorf("updating server group %s: %w", uuid, err)
	}
	return g, nil
}

// DeleteServerGroup implements store.Store.
func (s *Store) DeleteServerGroup(ctx context.Context, uuid string) error {
	if err := s.deleteOne(ctx, `DELETE FROM server_groups WHERE uuid = $1`, uuid); err != nil {
		return fmt.Errorf("deleting server group %s: %w", uuid, err)
	}
	return nil
}
