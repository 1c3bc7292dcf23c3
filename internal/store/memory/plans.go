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

// planTable keeps the move plans (under Store.mu).
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
func (s *Store) CreatePlan(_ context.Context, p records.Plan) (records.Plan, error) {
	if _, err := json.Marshal(p); err != nil { // as the SQL stores would refuse it
		return records.Plan{}, fmt.Errorf("encoding plan: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plans.byID == nil {
		s.plans.byID = map[int64]records.Plan{}
	}
	s.plans.next++
	p.ID, p.Version = s.plans.next, 1
	s.plans.byID[p.ID] = clonePlan(p)
	return clonePlan(p), nil
}

// GetPlan implements store.Store.
func (s *Store) GetPlan(_ context.Context, id int64) (records.Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.plans.byID[id]
	if !ok {
		return records.Plan{}, fmt.Errorf("plan %d: %w", id, store.ErrNotFound)
	}
	return clonePlan(p), nil
}

// UpdatePlan implements store.Store.
func (s *Store) UpdatePlan(_ context.Context, p records.Plan) (records.Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.plans.byID[p.ID]
	if !ok {
		return records.Plan{}, fmt.Errorf("plan %d: %w", p.ID, store.ErrNotFound)
	}
	if cur.Version != p.Version {
		return records.Plan{}, store.VersionConflict(placement.PlanVersion, fmt.Sprint(p.ID), p.Version, cur.Version)
	}
	p.Version++
	s.plans.byID[p.ID] = clonePlan(p)
	return clonePlan(p), nil
}

// ListPlans implements store.Store.
func (s *Store) ListPlans(_ context.Context, activeOnly bool) ([]records.Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []records.Plan{}
	for _, id := range slices.Sorted(maps.Keys(s.plans.byID)) {
		if p := s.plans.byID[id]; !activeOnly || !records.PlanTerminal(p.State) {
			out = append(out, clonePlan(p))
		}
	}
	return out, nil
}
