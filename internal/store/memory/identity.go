package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"keel/internal/store"
)

// Identity is the in-memory store's identity document and agents'
// credential records, under a lock of their own. It implements
// store.IdentityStore.
type Identity struct {
	mu      sync.Mutex
	doc     []byte
	version int64
	agents  map[string]store.AgentCredential
}

// GetIdentity implements store.IdentityStore.
func (t *Identity) GetIdentity(_ context.Context, known int64) ([]byte, int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.version == 0 {
		return nil, 0, fmt.Errorf("reading the identity directory: %w", store.ErrNotFound)
	}
	if t.version == known {
		return nil, known, nil
	}
	return slices.Clone(t.doc), t.version, nil
}

// PutIdentity implements store.IdentityStore.
func (t *Identity) PutIdentity(_ context.Context, doc []byte, version int64) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if version != t.version {
		return 0, fmt.Errorf("writing the identity directory at version %d (stored: %d): %w", version, t.version, store.ErrStaleIdentity)
	}
	t.doc, t.version = slices.Clone(doc), t.version+1
	return t.version, nil
}

// GetAgentCredential implements store.IdentityStore.
func (t *Identity) GetAgentCredential(_ context.Context, host string) (store.AgentCredential, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.agents[host]
	if !ok {
		return store.AgentCredential{}, fmt.Errorf("agent credential of %s: %w", host, store.ErrNotFound)
	}
	return c, nil
}

// ListAgentCredentials implements store.IdentityStore.
func (t *Identity) ListAgentCredentials(_ context.Context) ([]store.AgentCredential, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Collect(maps.Values(t.agents))
	slices.SortFunc(out, func(a, b store.AgentCredential) int { return strings.Compare(a.Host, b.Host) })
	if out == nil {
		out = []store.AgentCredential{}
	}
	return out, nil
}

// PutAgentCredential implements store.IdentityStore.
func (t *Identity) PutAgentCredential(_ context.Context, c store.AgentCredential) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.agents == nil {
		t.agents = map[string]store.AgentCredential{}
	}
	t.agents[c.Host] = c
	return nil
}
