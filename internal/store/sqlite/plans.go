package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Move plans.

var (
	qInsertPlan  = wq(`INSERT INTO plans (state, active, version, data) VALUES (?, ?, ?, '{}')`)
	qSetPlan     = wq(`UPDATE plans SET state = ?, active = ?, version = ?, data = ? WHERE id = ?`)
	qPlanVersion = wq(`SELECT version FROM plans WHERE id = ?`)
)

func planActive(state string) bool { return !records.PlanTerminal(state) }

// CreatePlan implements store.Store. IDs come from an AUTOINCREMENT
// column, so they are never reused.
func (s *Store) CreatePlan(ctx context.Context, p records.Plan) (records.Plan, error) {
	p.Version = 1
	err := s.write(ctx, func(w *wtx) error {
		res, err := w.exec(qInsertPlan, p.State, planActive(p.State), p.Version)
		if err != nil {
			return err
		}
		if p.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		data, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("encoding: %w", err)
		}
		_, err = w.exec(qSetPlan, p.State, planActive(p.State), p.Version, string(data), p.ID)
		return err
	})
	if err != nil {
		return records.Plan{}, fmt.Errorf("creating %s plan: %w", p.Purpose, err)
	}
	return p, nil
}

// GetPlan implements store.Store.
func (s *Store) GetPlan(ctx context.Context, id int64) (records.Plan, error) {
	var p records.Plan
	if err := s.getJSON(ctx, &p, `SELECT data FROM plans WHERE id = ?`, id); err != nil {
		return records.Plan{}, fmt.Errorf("plan %d: %w", id, err)
	}
	return p, nil
}

// UpdatePlan implements store.Store.
func (s *Store) UpdatePlan(ctx context.Context, p records.Plan) (records.Plan, error) {
	expected := p.Version
	p.Version++
	data, err := json.Marshal(p)
	if err != nil {
		return records.Plan{}, fmt.Errorf("encoding plan %d: %w", p.ID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		var cur int64
		if err := w.queryRow(qPlanVersion, p.ID).Scan(&cur); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("plan %d: %w", p.ID, store.ErrNotFound)
		} else if err != nil {
			return fmt.Errorf("reading plan %d: %w", p.ID, err)
		}
		if cur != expected {
			return store.VersionConflict(placement.PlanVersion, fmt.Sprint(p.ID), expected, cur)
		}
		if _, err := w.exec(qSetPlan, p.State, planActive(p.State), p.Version, string(data), p.ID); err != nil {
			return fmt.Errorf("updating plan %d: %w", p.ID, err)
		}
		return nil
	})
	if err != nil {
		return records.Plan{}, err
	}
	return p, nil
}

// ListPlans implements store.Store.
func (s *Store) ListPlans(ctx context.Context, activeOnly bool) ([]records.Plan, error) {
	query := `SELECT data FROM plans ORDER BY id`
	if activeOnly {
		query = `SELECT data FROM plans WHERE active = 1 ORDER BY id`
	}
	out, err := listJSON[records.Plan](ctx, s, nil, query)
	if err != nil {
		return nil, fmt.Errorf("listing plans: %w", err)
	}
	return out, nil
}
