package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"keel/internal/identity"
	"keel/internal/quota"
	"keel/internal/store"
)

// EnsureIdentity makes sure DATA_DIR/identity.json exists: on first start
// it creates the admin user (role admin on project admin) and nobody else,
// with a generated password kept in DATA_DIR/admin-password (mode 0600).
// It returns the admin password.
func EnsureIdentity(dataDir string) (string, error) {
	dirFile := filepath.Join(dataDir, "identity.json")
	pwFile := PasswordFile(dataDir, "admin")
	if _, err := os.Stat(dirFile); err == nil {
		pw, err := os.ReadFile(pwFile)
		if err != nil {
			return "", fmt.Errorf("%s exists but the admin password file %s cannot be read: %w", dirFile, pwFile, err)
		}
		return string(pw), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", err
	}
	pw, err := newPassword(pwFile)
	if err != nil {
		return "", err
	}
	d, err := identity.NewAdminDirectory(pw)
	if err != nil {
		return "", err
	}
	if err := d.Save(dirFile); err != nil {
		return "", fmt.Errorf("writing %s: %w", dirFile, err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, adminQuotaPending), nil, 0o600); err != nil {
		return "", err
	}
	return pw, nil
}

// adminQuotaPending marks a data dir whose admin project was just made:
// the server's next start gives the admin project unlimited quotas.
const adminQuotaPending = "admin-quota-pending"

// settleAdminQuota gives the admin project of a new identity its own
// unlimited quotas (-1 for every quota), once: the operator's project
// boots what tests and benchmarks need, while every other project has
// Nova's defaults. `openstack quota set … admin` changes them.
func settleAdminQuota(ctx context.Context, st store.Store, dataDir string) error {
	marker := filepath.Join(dataDir, adminQuotaPending)
	if _, err := os.Stat(marker); err != nil {
		return nil
	}
	unlimited := map[string]int64{}
	for name := range quota.Defaults {
		unlimited[name] = -1
	}
	if _, err := st.SetQuotaLimits(ctx, identity.ProjectID(identity.DefaultDomainID, "admin"), unlimited); err != nil {
		return fmt.Errorf("setting the admin project's quotas: %w", err)
	}
	return os.Remove(marker)
}

// PasswordFile is where keel keeps the generated password of a user it
// created: DATA_DIR/admin-password, DATA_DIR/demo-password, ….
func PasswordFile(dataDir, user string) string {
	return filepath.Join(dataDir, user+"-password")
}

// DevUsers are the members keel dev adds (Tempest's primary and alternate
// accounts), each in a project of its name.
var DevUsers = []string{"demo", "alt_demo"}

// EnsureDevUsers adds keel dev's members to DATA_DIR/identity.json (made
// by EnsureIdentity) if they are not there, each with a password of its
// own in DATA_DIR/<name>-password (mode 0600). It returns every dev
// user's password by name, admin included. A server must not be running
// on the data dir (it would not see the change until it reloads).
func EnsureDevUsers(dataDir string) (map[string]string, error) {
	adminPW, err := EnsureIdentity(dataDir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{"admin": adminPW}
	dirFile := filepath.Join(dataDir, "identity.json")
	d, err := identity.LoadDirectory(dirFile)
	if err != nil {
		return nil, err
	}
	changed := false
	for _, name := range DevUsers {
		pwFile := PasswordFile(dataDir, name)
		if _, ok := d.UserByName(identity.DefaultDomainID, name); ok {
			pw, err := os.ReadFile(pwFile)
			if err != nil {
				return nil, fmt.Errorf("user %s exists but its password file cannot be read: %w", name, err)
			}
			out[name] = strings.TrimSpace(string(pw))
			continue
		}
		pw, err := newPassword(pwFile)
		if err != nil {
			return nil, err
		}
		if err := d.AddMember(name, pw); err != nil {
			return nil, err
		}
		out[name], changed = pw, true
	}
	if changed {
		if err := d.Save(dirFile); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// newPassword makes a random password and writes it to path (0600).
func newPassword(path string) (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(pw), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return pw, nil
}
