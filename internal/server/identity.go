package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"keel/internal/identity"
)

// EnsureIdentity makes sure DATA_DIR/identity.json exists: on first start
// it creates the admin and demo users (projects admin and demo) with a
// generated password, kept in DATA_DIR/admin-password (mode 0600). It
// returns the admin password.
func EnsureIdentity(dataDir string) (string, error) {
	dirFile := filepath.Join(dataDir, "identity.json")
	pwFile := filepath.Join(dataDir, "admin-password")
	if _, err := os.Stat(dirFile); err == nil {
		pw, err := os.ReadFile(pwFile)
		if err != nil {
			return "", fmt.Errorf("%s exists but the admin password file %s cannot be read: %w", dirFile, pwFile, err)
		}
		return string(pw), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", err
	}
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(b)
	if err := os.WriteFile(pwFile, []byte(pw), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", pwFile, err)
	}
	if err := identity.NewDevDirectory(pw).Save(dirFile); err != nil {
		return "", fmt.Errorf("writing %s: %w", dirFile, err)
	}
	return pw, nil
}
