package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

var (
	qInsertFlavor    = wq(`INSERT INTO flavors (id, name, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`)
	qFlavorNameTaken = wq(`SELECT COUNT(*) FROM flavors WHERE name = ? OR id = ?`)
	qDeleteFlavor    = wq(`DELETE FROM flavors WHERE id = ?`)
	qGetFlavor       = wq(`SELECT data FROM flavors WHERE id = ?`)
	qSetFlavorData   = wq(`UPDATE flavors SET data = ? WHERE id = ?`)
)

// UpdateFlavor implements store.Store.
func (s *Store) UpdateFlavor(ctx context.Context, id string, fn func(*records.Flavor) error) (records.Flavor, error) {
	var f records.Flavor
	err := s.write(ctx, func(w *wtx) error {
		var data []byte
		if err := w.queryRow(qGetFlavor, id).Scan(&data); errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		} else if err != nil {
			return err
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
		_, err = w.exec(qSetFlavorData, string(out), id)
		return err
	})
	if err != nil {
		return records.Flavor{}, fmt.Errorf("updating flavor %s: %w", id, err)
	}
	return f, nil
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
	err = s.write(ctx, func(w *wtx) error {
		var taken int
		if err := w.queryRow(qFlavorNameTaken, f.Name, f.ID).Scan(&taken); err != nil {
			return err
		}
		if taken > 0 {
			return store.ErrExists
		}
		_, err := w.exec(qInsertFlavor, f.ID, f.Name, string(data))
		return err
	})
	if err != nil {
		return records.Flavor{}, fmt.Errorf("creating flavor %s (%s): %w", f.ID, f.Name, err)
	}
	return f, nil
}

// GetFlavor implements store.Store.
func (s *Store) GetFlavor(ctx context.Context, id string) (records.Flavor, error) {
	var f records.Flavor
	if err := s.getJSON(ctx, &f, `SELECT data FROM flavors WHERE id = ?`, id); err != nil {
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
	err := s.write(ctx, func(w *wtx) error {
		res, err := w.exec(qDeleteFlavor, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting flavor %s: %w", id, err)
	}
	return nil
}
