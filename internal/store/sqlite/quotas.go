package sqlite

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"keel/internal/store"
)

var (
	qGetQuotaLimits    = wq(`SELECT data FROM quota_limits WHERE project = ?`)
	qPutQuotaLimits    = wq(`INSERT INTO quota_limits (project, data) VALUES (?, ?) ON CONFLICT (project) DO UPDATE SET data = excluded.data`)
	qDeleteQuotaLimits = wq(`DELETE FROM quota_limits WHERE project = ?`)
)

// GetQuotaLimits implements store.Store.
func (s *Store) GetQuotaLimits(ctx context.Context, project string) (map[string]int64, error) {
	out := map[string]int64{}
	if err := s.getJSON(ctx, &out, `SELECT data FROM quota_limits WHERE project = ?`, project); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("reading quota limits of %q: %w", project, err)
	}
	return out, nil
}

// SetQuotaLimits implements store.Store.
func (s *Store) SetQuotaLimits(ctx context.Context, project string, limits map[string]int64) (map[string]int64, error) {
	var out map[string]int64
	err := s.write(ctx, func(w *wtx) error {
		out = map[string]int64{}
		if err := w.getJSON(qGetQuotaLimits, &out, project); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		maps.Copy(out, limits)
		_, err := w.putJSON(qPutQuotaLimits, out, project)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("setting quota limits of %q: %w", project, err)
	}
	return out, nil
}

// DeleteQuotaLimits implements store.Store.
func (s *Store) DeleteQuotaLimits(ctx context.Context, project string) error {
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(qDeleteQuotaLimits, project)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting quota limits of %q: %w", project, err)
	}
	return nil
}
