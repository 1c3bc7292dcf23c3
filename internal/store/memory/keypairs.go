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
func (r *Records) CreateKeyPair(_ context.Context, kp records.KeyPair) (records.KeyPair, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]string{kp.UserID, kp.Name}
	if _, ok := r.keyPairs[k]; ok {
		return records.KeyPair{}, fmt.Errorf("key pair %q of user %s: %w", kp.Name, kp.UserID, store.ErrExists)
	}
	r.nextKeyID++
	kp.ID = r.nextKeyID
	r.keyPairs[k] = kp
	return kp, nil
}

// GetKeyPair implements store.Store.
func (r *Records) GetKeyPair(_ context.Context, userID, name string) (records.KeyPair, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kp, ok := r.keyPairs[[2]string{userID, name}]
	if !ok {
		return records.KeyPair{}, fmt.Errorf("key pair %q of user %s: %w", name, userID, store.ErrNotFound)
	}
	return kp, nil
}

// ListKeyPairs implements store.Store.
func (r *Records) ListKeyPairs(_ context.Context, userID string) ([]records.KeyPair, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []records.KeyPair{}
	for k, kp := range r.keyPairs {
		if k[0] == userID {
			out = append(out, kp)
		}
	}
	slices.SortFunc(out, func(a, b records.KeyPair) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteKeyPair implements store.Store.
func (r *Records) DeleteKeyPair(_ context.Context, userID, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]string{userID, name}
	if _, ok := r.keyPairs[k]; !ok {
		return fmt.Errorf("key pair %q of user %s: %w", name, userID, store.ErrNotFound)
	}
	delete(r.keyPairs, k)
	return nil
}
