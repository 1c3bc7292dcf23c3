package memory

import (
	"context"
	"maps"
)

// GetQuotaLimits implements store.Store.
func (r *Records) GetQuotaLimits(_ context.Context, project string) (map[string]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := maps.Clone(r.quotas[project])
	if out == nil {
		out = map[string]int64{}
	}
	return out, nil
}

// SetQuotaLimits implements store.Store.
func (r *Records) SetQuotaLimits(_ context.Context, project string, limits map[string]int64) (map[string]int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.quotas[project]
	if cur == nil {
		cur = map[string]int64{}
		r.quotas[project] = cur
	}
	maps.Copy(cur, limits)
	return maps.Clone(cur), nil
}

// DeleteQuotaLimits implements store.Store.
func (r *Records) DeleteQuotaLimits(_ context.Context, project string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.quotas, project)
	return nil
}
