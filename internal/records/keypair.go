package records

import "time"

// Key pair types (Nova's, from microversion 2.2).
const (
	KeyPairSSH  = "ssh"
	KeyPairX509 = "x509"
)

// KeyPair is a user's key pair (Nova's os-keypairs): a public key a server
// booted with its name would receive. Names are unique per user. The
// private half of a generated pair is handed out once and never kept.
type KeyPair struct {
	ID          int64     `json:"id"` // assigned by the store
	Name        string    `json:"name"`
	UserID      string    `json:"user_id"`
	Type        string    `json:"type"`
	PublicKey   string    `json:"public_key"`
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
}
