package sqlite

import (
	"context"
	"fmt"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

var (
	qInsertFlavor    = wq(`INSERT INTO flavors (id, name, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`)
	qFlavorNameTaken = wq(`SELECT COUNT(*) FROM flavors WHERE name = ? OR id = ?`)
	qDeleteFlavor    = wq(`DELETE FROM flavors WHERE id = ?`)
	qGetFlavor       = wq(`SELECT data FROM flavors WHERE id = ?`)
	qSetFlavorData   = wq(`UPDATE flavors SET data = ?2 WHERE id = ?1`)
)

// UpdateFlavor implements store.Store; fn may not change the ID or the name.
func (s *Store) UpdateFlavor(ctx context.Context, id string, fn func(*records.Flavor) error) (records.Flavor, error) {
	var name string
	f, err := updateJSON(ctx, s, qGetFlavor, id, func(f *records.Flavor) error {
		name = f.Name
		return fn(f)
	}, func(w *wtx, f *records.Flavor) error {
		f.ID, f.Name = id, name
		_, err := w.putJSON(qSetFlavorData, f, id)
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
	err := s.write(ctx, func(w *wtx) error {
		var taken int
		if err := w.queryRow(qFlavorNameTaken, f.Name, f.ID).Scan(&taken); err != nil {
			return err
		}
		if taken > 0 {
			return store.ErrExists
		}
		return w.insertJSON(qInsertFlavor, f, f.ID, f.Name)
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
	if err := s.deleteOne(ctx, qDeleteFlavor, id); err != nil {
		return fmt.Errorf("deleting flavor %s: %w", id, err)
	}
	return nil
}
