package memory

import (
	"context"
	"maps"
)

// GetQuotaLimits implements store.Store.
func (s *Store) GetQuotaLimits(_ context.Context, project string) (map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := maps.Clone(s.quotas[project])
	if out == nil {
		out = map[string]int64{}
	}
	return out, nil
}

// SetQuotaLimits implements store.Store.
func (s *Store) SetQuotaLimits(_ context.Context, project string, limits map[string]int64) (map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.quotas[project]
	if cur == nil {
		cur = map[string]int64{}
		s.quotas[project] = cur
	}
	maps.Copy(cur, limits)
	return maps.Clone(cur), nil
}

// DeleteQuotaLimits implements store.Store.
func (s *Store) DeleteQuotaLimits(_ context.Context, project string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.quotas, project)
	return nil
}
