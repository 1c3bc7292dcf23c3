package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// planTable keeps the move plans (under Records.mu).
type planTable struct {
	byID map[int64]records.Plan
	next int64
}

// clonePlan deep-copies a plan (its moves and hosts), so callers never
// share the stored slices.
func clonePlan(p records.Plan) records.Plan {
	p.Hosts = slices.Clone(p.Hosts)
	p.Moves = slices.Clone(p.Moves)
	return p
}

// CreatePlan implements store.Store.
func (r *Records) CreatePlan(_ context.Context, p records.Plan) (records.Plan, error) {
	if _, err := json.Marshal(p); err != nil { // as the SQL stores would refuse it
		return records.Plan{}, fmt.Errorf("encoding plan: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plans.byID == nil {
		r.plans.byID = map[int64]records.Plan{}
	}
	r.plans.next++
	p.ID, p.Version = r.plans.next, 1
	r.plans.byID[p.ID] = clonePlan(p)
	return clonePlan(p), nil
}

// GetPlan implements store.Store.
func (r *Records) GetPlan(_ context.Context, id int64) (records.Plan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.plans.byID[id]
	if !ok {
		return records.Plan{}, fmt.Errorf("plan %d: %w", id, store.ErrNotFound)
	}
	return clonePlan(p), nil
}

// UpdatePlan implements store.Store.
func (r *Records) UpdatePlan(_ context.Context, p records.Plan) (records.Plan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.plans.byID[p.ID]
	if !ok {
		return records.Plan{}, fmt.Errorf("plan %d: %w", p.ID, store.ErrNotFound)
	}
	if cur.Version != p.Version {
		return records.Plan{}, store.VersionConflict(placement.PlanVersion, fmt.Sprint(p.ID), p.Version, cur.Version)
	}
	p.Version++
	r.plans.byID[p.ID] = clonePlan(p)
	return clonePlan(p), nil
}

// ListPlans implements store.Store.
func (r *Records) ListPlans(_ context.Context, activeOnly bool) ([]records.Plan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []records.Plan{}
	for _, id := range slices.Sorted(maps.Keys(r.plans.byID)) {
		if p := r.plans.byID[id]; !activeOnly || !records.PlanTerminal(p.State) {
			out = append(out, clonePlan(p))
		}
	}
	return out, nil
}
