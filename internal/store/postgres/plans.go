package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Move plans.

func planActive(state string) bool { return !records.PlanTerminal(state) }

// CreatePlan implements store.Store. IDs come from an identity column,
// taken first so the JSON copy carries the ID too.
func (s *Store) CreatePlan(ctx context.Context, p records.Plan) (records.Plan, error) {
	p.Version, p.ID = 1, 0
	data, err := json.Marshal(p)
	if err != nil {
		return records.Plan{}, fmt.Errorf("encoding %s plan: %w", p.Purpose, err)
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO plans (id, state, active, version, data)
		SELECT n.id, $1, $2, $3, jsonb_set($4::jsonb, '{id}', to_jsonb(n.id))
		FROM (SELECT nextval(pg_get_serial_sequence('plans', 'id')) AS id) n
		RETURNING id`, p.State, planActive(p.State), p.Version, data).Scan(&p.ID)
	if err != nil {
		return records.Plan{}, fmt.Errorf("creating %s plan: %w", p.Purpose, err)
	}
	return p, nil
}

// GetPlan implements store.Store.
func (s *Store) GetPlan(ctx context.Context, id int64) (records.Plan, error) {
	var p records.Plan
	if err := s.getJSON(ctx, &p, `SELECT data FROM plans WHERE id = $1`, id); err != nil {
		return records.Plan{}, fmt.Errorf("plan %d: %w", id, err)
	}
	return p, nil
}

// UpdatePlan implements store.Store, as UpdateMigration does.
func (s *Store) UpdatePlan(ctx context.Context, p records.Plan) (records.Plan, error) {
	expected := p.Version
	p.Version++
	data, err := json.Marshal(p)
	if err != nil {
		return records.Plan{}, fmt.Errorf("encoding plan %d: %w", p.ID, err)
	}
	ct, err := s.pool.Exec(ctx, `UPDATE plans SET state = $1, active = $2, version = $3, data = $4 WHERE id = $5 AND version = $6`,
		p.State, planActive(p.State), p.Version, data, p.ID, expected)
	if err != nil {
		return records.Plan{}, fmt.Errorf("updating plan %d: %w", p.ID, err)
	}
	if ct.RowsAffected() == 1 {
		return p, nil
	}
	var cur int64
	switch err := s.pool.QueryRow(ctx, `SELECT version FROM plans WHERE id = $1`, p.ID).Scan(&cur); {
	case errors.Is(err, pgx.ErrNoRows):
		return records.Plan{}, fmt.Errorf("plan %d: %w", p.ID, store.ErrNotFound)
	case err != nil:
		return records.Plan{}, fmt.Errorf("reading plan %d: %w", p.ID, err)
	}
	return records.Plan{}, store.VersionConflict(placement.PlanVersion, fmt.Sprint(p.ID), expected, cur)
}

// ListPlans implements store.Store.
func (s *Store) ListPlans(ctx context.Context, activeOnly bool) ([]records.Plan, error) {
	query := `SELECT data FROM plans ORDER BY id`
	if activeOnly {
		query = `SELECT data FROM plans WHERE active ORDER BY id`
	}
	out, err := listJSON[records.Plan](ctx, s, nil, query)
	if err != nil {
		return nil, fmt.Errorf("listing plans: %w", err)
	}
	return out, nil
}
