package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"keel/internal/records"
	"keel/internal/store"
)

// CreateKeyPair implements store.Store.
func (s *Store) CreateKeyPair(_ context.Context, kp records.KeyPair) (records.KeyPair, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{kp.UserID, kp.Name}
	if _, ok := s.keyPairs[k]; ok {
		return records.KeyPair{}, fmt.Errorf("key pair %q of user %s: %w", kp.Name, kp.UserID, store.ErrExists)
	}
	s.nextKeyID++
	kp.ID = s.nextKeyID
	s.keyPairs[k] = kp
	return kp, nil
}

// GetKeyPair implements store.Store.
func (s *Store) GetKeyPair(_ context.Context, userID, name string) (records.KeyPair, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kp, ok := s.keyPairs[[2]string{userID, name}]
	if !ok {
		return records.KeyPair{}, fmt.Errorf("key pair %q of user %s: %w", name, userID, store.ErrNotFound)
	}
	return kp, nil
}

// ListKeyPairs implements store.Store.
func (s *Store) ListKeyPairs(_ context.Context, userID string) ([]records.KeyPair, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []records.KeyPair{}
	for k, kp := range s.keyPairs {
		if k[0] == userID {
			out = append(out, kp)
		}
	}
	slices.SortFunc(out, func(a, b records.KeyPair) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteKeyPair implements store.Store.
func (s *Store) DeleteKeyPair(_ context.Context, userID, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{userID, name}
	if _, ok := s.keyPairs[k]; !ok {
		return fmt.Errorf("key pair %q of user %s: %w", name, userID, store.ErrNotFound)
	}
	delete(s.keyPairs, k)
	return nil
}
