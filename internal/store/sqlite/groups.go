package sqlite

import (
	"context"
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
	qPutAggregate       = wq(`UPDATE aggregates SET name = ?1, data = ?3 WHERE id = ?2`)
	qDeleteAggregate    = wq(`DELETE FROM aggregates WHERE id = ?`)
	qInsertGroup        = wq(`INSERT INTO server_groups (uuid, data) VALUES (?, ?) ON CONFLICT DO NOTHING`)
	qGetGroup           = wq(`SELECT data FROM server_groups WHERE uuid = ?`)
	qPutGroup           = wq(`UPDATE server_groups SET data = ?2 WHERE uuid = ?1`)
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
	if _, err := w.putJSON(qPutAggregate, a, a.Name, a.ID); err != nil {
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
	a, err := updateJSON(ctx, s, qGetAggregate, id, fn, func(w *wtx, a *records.Aggregate) error {
		a.ID = id
		return w.putAggregate(*a)
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
	if err := s.insertJSON(ctx, qInsertGroup, g, g.UUID); err != nil {
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
	g, err := updateJSON(ctx, s, qGetGroup, uuid, fn, func(w *wtx, g *records.ServerGroup) error {
		g.UUID = uuid
		_, err := w.putJSON(qPutGroup, g, uuid)
		return err
	})
	if err != nil {
		return records.ServerGroup{}, fmt.Errorf("updating server group %s: %w", uuid, err)
	}
	return g, nil
}

// DeleteServerGroup implements store.Store.
func (s *Store) DeleteServerGroup(ctx context.Context, uuid string) error {
	if err := s.deleteOne(ctx, qDeleteGroup, uuid); err != nil {
		return fmt.Errorf("deleting server group %s: %w", uuid, err)
	}
	return nil
}
