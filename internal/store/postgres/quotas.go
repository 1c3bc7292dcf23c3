package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"keel/internal/store"
)

// GetQuotaLimits implements store.Store.
func (s *Store) GetQuotaLimits(ctx context.Context, project string) (map[string]int64, error) {
	out := map[string]int64{}
	if err := s.getJSON(ctx, &out, `SELECT data FROM quota_limits WHERE project = $1`, project); err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("reading quota limits of %q: %w", project, err)
	}
	return out, nil
}

// SetQuotaLimits implements store.Store: one statement merges the new
// limits into the row, so concurrent sets of different names both stay.
func (s *Store) SetQuotaLimits(ctx context.Context, project string, limits map[string]int64) (map[string]int64, error) {
	data, err := json.Marshal(limits)
	if err != nil {
		return nil, fmt.Errorf("setting quota limits of %q: %w", project, err)
	}
	var merged []byte
	if err := s.pool.QueryRow(ctx, `INSERT INTO quota_limits (project, data) VALUES ($1, $2)
		ON CONFLICT (project) DO UPDATE SET data = quota_limits.data || excluded.data
		RETURNING data`, project, data).Scan(&merged); err != nil {
		return nil, fmt.Errorf("setting quota limits of %q: %w", project, err)
	}
	out := map[string]int64{}
	if err := json.Unmarshal(merged, &out); err != nil {
		return nil, fmt.Errorf("setting quota limits of %q: decoding: %w", project, err)
	}
	return out, nil
}

// DeleteQuotaLimits implements store.Store.
func (s *Store) DeleteQuotaLimits(ctx context.Context, project string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM quota_limits WHERE project = $1`, project); err != nil {
		return fmt.Errorf("deleting quota limits of %q: %w", project, err)
	}
	return nil
}
