package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Clone loads a new view from the same store as v, under the same
// policy: a copy a dry run may claim on (its claims change only the
// copy) while v stays as it is.
func (v *View) Clone(ctx context.Context) (*View, error) {
	policy := PolicyClaim
	if v.readsRecords {
		policy = PolicyLegacy
	}
	c, err := NewView(ctx, v.src, policy)
	if err != nil {
		return nil, fmt.Errorf("copying the host view: %w", err)
	}
	return c, nil
}

// Hosts returns a copy of every host's state, sorted by name.
func (v *View) Hosts() []HostState {
	v.mu.Lock()
	defer v.mu.Unlock()
	hs := v.snapshot()
	out := make([]HostState, len(hs))
	for i, h := range hs {
		out[i] = *h
	}
	return out
}

// OnView returns a scheduler with s's configuration deciding on view
// (a copy made with Clone, for a dry run), picking with rnd.
func (s *Scheduler) OnView(view *View, rnd *rand.Rand) (*Scheduler, error) {
	return New(s.cfg, view, s.clock, rnd)
}

// Passes reports whether host passes req's filters in the view now (the
// check a plan's move makes just before it starts), and if not the
// filter that rejected it.
func (s *Scheduler) Passes(ctx context.Context, req *Request, host string) (bool, string, error) {
	v := s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.refreshLocked(ctx); err != nil {
		return false, "", err
	}
	h := v.byName[host]
	if h == nil {
		return false, "unknown host", nil
	}
	req.prepare(s.clock.Now())
	for _, f := range s.activeFilters(req) {
		if !s.passes(h, req, []stage{f}) {
			return false, f.spec.Name, nil
		}
	}
	return true, "", nil
}
