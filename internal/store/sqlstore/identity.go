package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"keel/internal/store"
)

// identityQueries are the statements of the identity directory and the
// agents' credential records (store.IdentityStore).
type identityQueries struct {
	getDoc, insertDoc, updateDoc   string
	getAgent, listAgents, putAgent string
}

func newIdentityQueries(r, w func(string) string) identityQueries {
	return identityQueries{
		// The document only if its version is not the one the reader has.
		getDoc:     r(`SELECT CASE WHEN version = $1 THEN NULL ELSE doc END, version FROM identity_directory WHERE id = 1`),
		insertDoc:  w(`INSERT INTO identity_directory (id, version, doc) VALUES (1, 1, $1) ON CONFLICT (id) DO NOTHING`),
		updateDoc:  w(`UPDATE identity_directory SET version = version + 1, doc = $1 WHERE id = 1 AND version = $2`),
		getAgent:   r(`SELECT data FROM agent_credentials WHERE host = $1`),
		listAgents: r(`SELECT data FROM agent_credentials ORDER BY host`),
		putAgent: w(`INSERT INTO agent_credentials (host, data) VALUES ($1, $2)
			ON CONFLICT (host) DO UPDATE SET data = excluded.data`),
	}
}

// GetIdentity implements store.Store.
func (r *Records) GetIdentity(ctx context.Context, known int64) ([]byte, int64, error) {
	var (
		doc     []byte
		version int64
	)
	err := r.db.QueryRow(ctx, r.q.identity.getDoc, known).Scan(&doc, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, 0, fmt.Errorf("reading the identity directory: %w", store.ErrNotFound)
	case err != nil:
		return nil, 0, fmt.Errorf("reading the identity directory: %w", err)
	}
	return doc, version, nil
}

// PutIdentity implements store.Store: one conditional statement, so two
// replicas that read the same version cannot both write.
func (r *Records) PutIdentity(ctx context.Context, doc []byte, version int64) (int64, error) {
	q, args := r.q.identity.updateDoc, []any{string(doc), version}
	if version == 0 {
		q, args = r.q.identity.insertDoc, args[:1]
	}
	n, err := r.db.Exec(ctx, q, args...)
	if err == nil && n == 0 {
		err = store.ErrStaleIdentity
	}
	if err != nil {
		return 0, fmt.Errorf("writing the identity directory at version %d: %w", version, err)
	}
	return version + 1, nil
}

// GetAgentCredential implements store.Store.
func (r *Records) GetAgentCredential(ctx context.Context, host string) (store.AgentCredential, error) {
	var c store.AgentCredential
	if err := r.getJSON(ctx, &c, r.q.identity.getAgent, host); err != nil {
		return store.AgentCredential{}, fmt.Errorf("agent credential of %s: %w", host, err)
	}
	return c, nil
}

// ListAgentCredentials implements store.Store.
func (r *Records) ListAgentCredentials(ctx context.Context) ([]store.AgentCredential, error) {
	out, err := listJSON[store.AgentCredential](ctx, r, nil, r.q.identity.listAgents)
	if err != nil {
		return nil, fmt.Errorf("listing agent credentials: %w", err)
	}
	return out, nil
}

// PutAgentCredential implements store.Store.
func (r *Records) PutAgentCredential(ctx context.Context, c store.AgentCredential) error {
	data, err := encode(c)
	if err != nil {
		return fmt.Errorf("writing agent credential of %s: %w", c.Host, err)
	}
	if _, err := r.db.Exec(ctx, r.q.identity.putAgent, c.Host, data); err != nil {
		return fmt.Errorf("writing agent credential of %s: %w", c.Host, err)
	}
	return nil
}
