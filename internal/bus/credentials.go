package bus

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// CredentialsFile is the name of the bus credentials file in the data
// directory.
const CredentialsFile = "bus-credentials.json"

// Credentials authenticate a client to the bus.
type Credentials struct {
	User     string `json:"user"`
	Password string `json:"password"`
	// DeriveAgents marks the servers' credentials of a bus that knows
	// agent identities (the embedded one, or an external NATS configured
	// with AuthorizationConfig): an agent given this file connects as its
	// own host's identity (AgentCredentials), never as the servers. Files
	// written by LoadOrCreateCredentials have it; a file without it is
	// one shared user, used as is.
	DeriveAgents bool `json:"derive_agent_identities,omitempty"`
}

// ForAgent is the identity host's agent connects with when given c: its
// derived identity if c are servers' credentials with DeriveAgents, c
// itself if c is host's own identity or a shared user without
// DeriveAgents; another host's identity is an error.
func (c Credentials) ForAgent(host string) (Credentials, error) {
	if h, ok := c.AgentHost(); ok {
		if h != host {
			return Credentials{}, fmt.Errorf("bus: these credentials are host %s's identity, not %s's", h, host)
		}
		return c, nil
	}
	if !c.DeriveAgents {
		return c, nil
	}
	return AgentCredentials(c, host)
}

// String hides the password.
func (c Credentials) String() string { return "user " + c.User + " (password hidden)" }

// LogValue hides the password from slog.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("user", c.User), slog.String("password", "<hidden>"))
}

func (c Credentials) validate() error {
	if c.User == "" || c.Password == "" {
		return errors.New("bus: credentials need a user and a password")
	}
	return nil
}

// LoadOrCreateCredentials returns the credentials stored in
// dataDir/bus-credentials.json, creating the directory (0700) and the file
// with a random user and password (mode 0600) if it does not exist yet. The
// file appears atomically: it is written to a temporary file first, and if
// two processes race only one file wins and both return its contents.
func LoadOrCreateCredentials(dataDir string) (Credentials, error) {
	path := filepath.Join(dataDir, CredentialsFile)
	c, err := ReadCredentials(path)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return Credentials{}, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return Credentials{}, fmt.Errorf("bus: %w", err)
	}
	c, err = newCredentials()
	if err != nil {
		return Credentials{}, err
	}
	if err := createAtomically(path, c); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return ReadCredentials(path)
		}
		return Credentials{}, err
	}
	return c, nil
}

// ReadCredentials reads a credentials file written by
// LoadOrCreateCredentials (an agent is given it by flag).
func ReadCredentials(path string) (Credentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("bus: read credentials: %w", err)
	}
	var c Credentials
	if err := json.Unmarshal(b, &c); err != nil {
		return Credentials{}, fmt.Errorf("bus: credentials file %s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return Credentials{}, fmt.Errorf("%w (file %s)", err, path)
	}
	return c, nil
}

func newCredentials() (Credentials, error) {
	user := make([]byte, 6)
	pass := make([]byte, 32)
	if _, err := rand.Read(user); err != nil {
		return Credentials{}, fmt.Errorf("bus: generate credentials: %w", err)
	}
	if _, err := rand.Read(pass); err != nil {
		return Credentials{}, fmt.Errorf("bus: generate credentials: %w", err)
	}
	return Credentials{
		User:         "keel-" + hex.EncodeToString(user),
		Password:     base64.RawURLEncoding.EncodeToString(pass),
		DeriveAgents: true,
	}, nil
}

// WriteCredentials writes c to path (mode 0600) atomically; it refuses to
// replace an existing file.
func WriteCredentials(path string, c Credentials) error {
	if err := c.validate(); err != nil {
		return err
	}
	return createAtomically(path, c)
}

// createAtomically writes c to a temporary file (0600) in path's directory,
// syncs it and moves it to path. It returns an error wrapping fs.ErrExist if
// path appeared meanwhile. The move is a hard link (which refuses to replace
// an existing file); on file systems without hard links it falls back to a
// rename.
func createAtomically(path string, c Credentials) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("bus: write credentials: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful link or rename: a no-op or removes the extra name
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("bus: write credentials: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("bus: write credentials: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("bus: write credentials: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bus: write credentials: %w", err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("bus: write credentials: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("bus: write credentials: %w", err)
		}
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
