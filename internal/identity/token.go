package identity

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"keel/internal/store"
)

// KeySize is the length of the token signing key.
const KeySize = 32

// DefaultTTL is a token's lifetime unless Issuer.TTL says otherwise.
const DefaultTTL = time.Hour

// Why Validate refused a token. Validate wraps one of these; test with
// errors.Is.
var (
	ErrTokenMalformed    = errors.New("token is malformed")
	ErrTokenBadSignature = errors.New("token signature does not match")
	ErrTokenExpired      = errors.New("token has expired")
	// ErrTokenUnknownSubject: the token is genuine but its user or project
	// is no longer in the directory.
	ErrTokenUnknownSubject = errors.New("token's user or project no longer exists")
	// ErrTokenRevoked: the token was revoked (DELETE /v3/auth/tokens),
	// its user's password changed after it was issued, or its user no
	// longer holds a role on its project.
	ErrTokenRevoked = errors.New("token has been revoked")
)

// Why Issue refused.
var (
	ErrUnknownUser    = errors.New("no such user")
	ErrUnknownProject = errors.New("no such project")
	ErrNoRole         = errors.New("user has no role on project")
)

// tokenVersion is the first byte of every token, so the format can change.
const tokenVersion = 1

// Principal is who a token speaks for.
type Principal struct {
	UserID          string
	UserName        string
	UserDomainID    string
	ProjectID       string
	ProjectName     string
	ProjectDomainID string
	// Roles are the effective roles on the project (admin, member, reader
	// order): at issue for Issue, now for Validate.
	Roles     []string
	IssuedAt  time.Time
	ExpiresAt time.Time
	AuditID   string
}

// IsAdmin reports whether the principal holds the admin role.
func (p Principal) IsAdmin() bool { return p.HasRole(RoleAdmin) }

// HasRole reports whether the principal holds role (implied roles count).
func (p Principal) HasRole(role string) bool { return slices.Contains(p.Roles, role) }

// Issuer issues and validates tokens. Set Key and Directory; the rest has
// defaults. An Issuer is safe for concurrent use; its fields must not
// change once it serves, and the directory changes only through Update.
type Issuer struct {
	Key   []byte
	TTL   time.Duration    // DefaultTTL if zero
	Clock func() time.Time // time.Now if nil
	// Directory is the directory to start from.
	Directory *Directory
	// Path, if set, is the file Directory was loaded from: Update saves
	// there, and a change made to it by another process is picked up
	// within a second.
	Path string
	// Shared, if set, is where the directory is kept for every replica
	// (the store): Update writes there (refused and redone if another
	// replica wrote first), and another replica's change is picked up
	// within Refresh. Directory and Path are then ignored.
	Shared store.IdentityStore
	// Refresh bounds how long another replica's change (a new user, a
	// revoked token) takes to hold here: DefaultRefresh if zero.
	Refresh time.Duration
	Rand    io.Reader // source of audit IDs; crypto/rand if nil
	// Log is where the API logs the cause of every 500 it answers
	// (slog.Default if nil).
	Log *slog.Logger
	// Catalog is what the token catalog lists besides keel's own public
	// endpoints: their internal and admin URLs, other services.
	Catalog CatalogOptions

	live liveDir
}

// tokenPayload is what a token carries; times in Unix microseconds.
type tokenPayload struct {
	UserID    string   `json:"user_id"`
	ProjectID string   `json:"project_id"`
	Roles     []string `json:"roles"`
	IssuedAt  int64    `json:"issued_at"`
	ExpiresAt int64    `json:"expires_at"`
	AuditID   string   `json:"audit_id"`
}

func (i *Issuer) now() time.Time {
	if i.Clock != nil {
		return i.Clock()
	}
	return time.Now()
}

func (i *Issuer) ttl() time.Duration {
	if i.TTL > 0 {
		return i.TTL
	}
	return DefaultTTL
}

func (i *Issuer) check() error {
	if i.dir() == nil {
		return errors.New("issuer has no directory")
	}
	if len(i.Key) < KeySize {
		return fmt.Errorf("token key is %d bytes, want %d", len(i.Key), KeySize)
	}
	return nil
}

// Issue makes a token for the user scoped to the project; the user must
// hold a role there. It returns the token and the principal it carries.
func (i *Issuer) Issue(userID, projectID string) (string, Principal, error) {
	if err := i.check(); err != nil {
		return "", Principal{}, fmt.Errorf("issuing token: %w", err)
	}
	d := i.dir()
	u, ok := d.User(userID)
	if !ok {
		return "", Principal{}, fmt.Errorf("issuing token for user %s: %w", userID, ErrUnknownUser)
	}
	p, ok := d.Project(projectID)
	if !ok {
		return "", Principal{}, fmt.Errorf("issuing token for user %s: project %s: %w", u.Name, projectID, ErrUnknownProject)
	}
	roles := d.rolesOf(u, p)
	if len(roles) == 0 {
		return "", Principal{}, fmt.Errorf("issuing token for user %s on project %s: %w", u.Name, p.Name, ErrNoRole)
	}
	audit, err := i.auditID()
	if err != nil {
		return "", Principal{}, fmt.Errorf("issuing token: %w", err)
	}
	now := i.now().UTC().Truncate(time.Microsecond)
	payload := tokenPayload{
		UserID: u.ID, ProjectID: p.ID, Roles: roles,
		IssuedAt: now.UnixMicro(), ExpiresAt: now.Add(i.ttl()).UnixMicro(),
		AuditID: audit,
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return "", Principal{}, fmt.Errorf("issuing token: %w", err)
	}
	raw := append([]byte{tokenVersion}, body...)
	raw = append(raw, i.sign(raw)...)
	return base64.RawURLEncoding.EncodeToString(raw), principal(u, p, payload), nil
}

// auditID is 16 random bytes in URL-safe base64, 22 characters, as Keystone.
func (i *Issuer) auditID() (string, error) {
	r := i.Rand
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, 16)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("reading audit id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func (i *Issuer) sign(msg []byte) []byte {
	m := hmac.New(sha256.New, i.Key)
	m.Write(msg)
	return m.Sum(nil)
}

// Validate checks a token's signature and expiry and returns its
// principal. The error wraps ErrTokenMalformed, ErrTokenBadSignature,
// ErrTokenExpired or ErrTokenUnknownSubject.
func (i *Issuer) Validate(token string) (Principal, error) {
	if err := i.check(); err != nil {
		return Principal{}, fmt.Errorf("validating token: %w", err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 1+sha256.Size+2 || raw[0] != tokenVersion {
		return Principal{}, fmt.Errorf("validating token: %w", ErrTokenMalformed)
	}
	msg, mac := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if !hmac.Equal(mac, i.sign(msg)) {
		return Principal{}, fmt.Errorf("validating token: %w", ErrTokenBadSignature)
	}
	var payload tokenPayload
	dec := json.NewDecoder(bytes.NewReader(msg[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&payload); err != nil || payload.UserID == "" || payload.ProjectID == "" {
		return Principal{}, fmt.Errorf("validating token: %w", ErrTokenMalformed)
	}
	if !i.now().Before(time.UnixMicro(payload.ExpiresAt)) {
		return Principal{}, fmt.Errorf("validating token: expired at %s: %w",
			formatTime(time.UnixMicro(payload.ExpiresAt)), ErrTokenExpired)
	}
	d := i.dir()
	u, uok := d.User(payload.UserID)
	p, pok := d.Project(payload.ProjectID)
	if !uok || !pok {
		return Principal{}, fmt.Errorf("validating token for user %s, project %s: %w",
			payload.UserID, payload.ProjectID, ErrTokenUnknownSubject)
	}
	if payload.IssuedAt < u.TokensValidAfter || d.revoked(payload.AuditID) {
		return Principal{}, fmt.Errorf("validating token for user %s: %w", u.Name, ErrTokenRevoked)
	}
	// The roles are the user's roles now, as Keystone computes them at
	// validation: a role taken away ends the tokens that carried it.
	payload.Roles = d.rolesOf(u, p)
	if len(payload.Roles) == 0 {
		return Principal{}, fmt.Errorf("validating token for user %s on project %s: %w", u.Name, p.Name, ErrTokenRevoked)
	}
	return principal(u, p, payload), nil
}

func principal(u User, p Project, t tokenPayload) Principal {
	return Principal{
		UserID: u.ID, UserName: u.Name, UserDomainID: u.DomainID,
		ProjectID: p.ID, ProjectName: p.Name, ProjectDomainID: p.DomainID,
		Roles:     slices.Clone(t.Roles),
		IssuedAt:  time.UnixMicro(t.IssuedAt).UTC(),
		ExpiresAt: time.UnixMicro(t.ExpiresAt).UTC(),
		AuditID:   t.AuditID,
	}
}

// keyFile is the signing key's name inside the data directory.
const keyFile = "token.key"

// LoadOrCreateKey returns the token signing key kept in
// dataDir/token.key, creating the directory (0700) and a key of KeySize
// random bytes (0600) if there is none. A key file readable by group or
// others is refused.
func LoadOrCreateKey(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, keyFile)
	key, err := readKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating token key: %w", err)
	}
	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("creating token key: %w", err)
	}
	if err := createExclusive(path, key); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process made one first
			return readKey(path)
		}
		return nil, fmt.Errorf("creating token key: %w", err)
	}
	return key, nil
}

func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading token key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading token key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("reading token key %s: mode %v lets others read it; run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	key, err := io.ReadAll(io.LimitReader(f, KeySize+1))
	if err != nil {
		return nil, fmt.Errorf("reading token key: %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("reading token key %s: %d bytes, want %d (delete it to make a new one, which invalidates all tokens)", path, len(key), KeySize)
	}
	return key, nil
}

// createExclusive writes data to path (mode 0600) only if path does not
// exist, never leaving a partly written file there: the data goes to a
// synced temporary file which is then hard-linked into place.
func createExclusive(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	syncDir(dir)
	return nil
}
