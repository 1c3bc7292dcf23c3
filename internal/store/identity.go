package store

import (
	"context"
	"errors"
)

// IdentityStore keeps what every replica must see the same of the
// identity service and of the agents' bus identities: the identity
// directory (users, projects, role assignments, token revocations) as one
// versioned document, and one credential record per enrolled host.
type IdentityStore interface {
	// GetIdentity returns the identity directory document and its version
	// (1 after the first PutIdentity), or a nil doc if the version is
	// known (a cheap check for a change); ErrNotFound before any.
	GetIdentity(ctx context.Context, known int64) (doc []byte, version int64, err error)
	// PutIdentity stores doc if version is the stored version (0: none is
	// stored yet) and returns the new version; ErrStaleIdentity if another
	// write came first (read again and redo the change).
	PutIdentity(ctx context.Context, doc []byte, version int64) (int64, error)

	// GetAgentCredential returns host's record; ErrNotFound if the host
	// was never enrolled nor revoked.
	GetAgentCredential(ctx context.Context, host string) (AgentCredential, error)
	// ListAgentCredentials returns every record, sorted by host.
	ListAgentCredentials(ctx context.Context) ([]AgentCredential, error)
	// PutAgentCredential stores c, replacing host's record.
	PutAgentCredential(ctx context.Context, c AgentCredential) error
}

// ErrStaleIdentity: PutIdentity's version is not the stored one.
var ErrStaleIdentity = errors.New("the identity directory was changed by another write")

// AgentCredential is the state of one host's bus identity. Its password is
// derived from the servers' credentials and Epoch, so enrolling the host
// again (Epoch+1) makes every earlier file of it useless; Revoked refuses
// the host altogether until it is enrolled again. A host without a record
// is at epoch 0, not revoked.
type AgentCredential struct {
	Host    string `json:"host"`
	Epoch   int64  `json:"epoch"`
	Revoked bool   `json:"revoked,omitempty"`
	// UpdatedAt is when the record was written (Unix microseconds).
	UpdatedAt int64 `json:"updated_at"`
}
