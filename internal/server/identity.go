package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"keel/internal/identity"
	"keel/internal/quota"
	"keel/internal/store"
)

// IdentityFile is the users-and-projects file in the data directory:
// the seed keel server moves into the store at its next start (the store
// is where every replica reads them from), renaming the file to
// IdentityFile+".migrated".
const IdentityFile = "identity.json"

// migratedSuffix names an identity file whose content is in the store.
const migratedSuffix = ".migrated"

// DevSeedFile holds keel dev's members made after the data dir's identity
// was moved into the store: merged in at the next start (what the store
// lacks is added), then renamed DevSeedFile+".migrated". Unlike an old identity.json, which is
// merged only into a store that has no directory yet, so that a user
// deleted through one replica is never brought back by another replica's
// old file.
const DevSeedFile = "identity-seed.json"

// EnsureIdentity makes sure the data dir has an identity: on first start
// (neither DATA_DIR/identity.json nor its migrated copy) it writes
// identity.json with the admin user (role admin on project admin) and
// nobody else, with a generated password kept in DATA_DIR/admin-password
// (mode 0600). It returns the admin password.
func EnsureIdentity(dataDir string) (string, error) {
	dirFile := filepath.Join(dataDir, IdentityFile)
	pwFile := PasswordFile(dataDir, "admin")
	for _, f := range []string{dirFile, dirFile + migratedSuffix} {
		if _, err := os.Stat(f); err == nil {
			pw, err := os.ReadFile(pwFile)
			if err != nil {
				return "", fmt.Errorf("%s exists but the admin password file %s cannot be read: %w", f, pwFile, err)
			}
			return string(pw), nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
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

// shareIdentity makes the store hold the identity directory every
// replica serves from. DATA_DIR/identity.json, if there is one (an older
// keel's users and projects, or a new cloud's admin), is moved into a
// store that has no directory yet, whole; into a store that has one it is
// not merged (its users may have been deleted there since: an old file
// must not bring them back), only named in a warning; either way it is
// then renamed identity.json.migrated. keel dev's later members
// (DevSeedFile) are merged: what the store lacks is added, nothing there
// is changed. A store without a directory gets the migrated copy back if
// there is one, else a new admin (EnsureIdentity). A file that does not
// load stops the start.
func shareIdentity(ctx context.Context, st store.IdentityStore, dataDir string, log *slog.Logger) error {
	seed := filepath.Join(dataDir, IdentityFile)
	devSeed := filepath.Join(dataDir, DevSeedFile)
	for try := 0; ; try++ {
		doc, version, err := st.GetIdentity(ctx, 0)
		var cur *identity.Directory
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return fmt.Errorf("reading users and projects from the store: %w", err)
		default:
			if cur, err = identity.DecodeDirectory(doc); err != nil {
				return fmt.Errorf("the users and projects in the store (version %d) do not load: %w", version, err)
			}
		}
		from := seed
		_, err = os.Stat(seed)
		haveSeed := err == nil
		_, err = os.Stat(devSeed)
		haveDevSeed := err == nil
		switch {
		case cur != nil && haveSeed:
			d, err := identity.LoadDirectory(seed)
			if err != nil {
				return fmt.Errorf("loading users and projects: %w", err)
			}
			// What the file has and the store lacks, named (merged into
			// a throw-away copy of the store's directory, never saved).
			if scratch, err := identity.DecodeDirectory(doc); err == nil {
				if lacking, _ := scratch.Merge(d); len(lacking) > 0 {
					log.Warn("users or projects of an old identity file not brought into the store: the store's directory is the truth (they may have been deleted there); create them again if they are wanted",
						"from", seed, "not_added", strings.Join(lacking, ", "))
				}
			}
			if err := os.Rename(seed, seed+migratedSuffix); err != nil {
				return fmt.Errorf("setting %s aside: %w", seed, err)
			}
			if !haveDevSeed {
				return nil
			}
			from = devSeed // then the dev seed
		case cur != nil && haveDevSeed:
			from = devSeed
		case cur != nil:
			return nil
		case !haveSeed:
			if _, err := os.Stat(seed + migratedSuffix); err == nil {
				from = seed + migratedSuffix
			} else if _, err := EnsureIdentity(dataDir); err != nil {
				return err
			}
		}
		d, err := identity.LoadDirectory(from)
		if err != nil {
			return fmt.Errorf("loading users and projects: %w", err)
		}
		next, added, skipped := d, []string{"all"}, []string(nil)
		if cur != nil {
			next = cur
			added, skipped = next.Merge(d)
			if err := next.Validate(); err != nil {
				return fmt.Errorf("merging %s into the store's users and projects: %w", from, err)
			}
		}
		if len(added) > 0 {
			b, err := json.Marshal(next)
			if err != nil {
				return fmt.Errorf("moving %s into the store: %w", from, err)
			}
			if _, err := st.PutIdentity(ctx, b, version); errors.Is(err, store.ErrStaleIdentity) && try < 10 {
				continue // another replica wrote first: merge into its
			} else if err != nil {
				return fmt.Errorf("moving %s into the store: %w", from, err)
			}
		}
		switch from {
		case seed:
			if err := os.Rename(seed, seed+migratedSuffix); err != nil {
				return fmt.Errorf("moving %s into the store: %w", from, err)
			}
		case devSeed:
			if err := os.Rename(devSeed, devSeed+migratedSuffix); err != nil {
				return fmt.Errorf("moving %s into the store: %w", from, err)
			}
		}
		log.Info("users and projects are in the store", "from", from, "added", strings.Join(added, ", "))
		if len(skipped) > 0 {
			log.Warn("users or projects of the file not moved: the store has others of their names", "from", from, "skipped", strings.Join(skipped, ", "))
		}
		return nil
	}
}

// adminQuotaPending marks a data dir whose admin project was just made:
// the server's next start gives the admin project unlimited quotas.
const adminQuotaPending = "admin-quota-pending"

// settleAdminQuota gives the admin project of a new identity its own
// unlimited quotas (-1 for every quota), once: the operator's project
// boots what tests and benchmarks need, while every other project has
// Nova's defaults. `openstack quota set … admin` changes them.
func settleAdminQuota(ctx context.Context, st store.Quotas, dataDir string) error {
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

// EnsureDevUsers adds keel dev's members to the data dir's identity (made
// by EnsureIdentity) if they are not there, each with a password of its
// own in DATA_DIR/<name>-password (mode 0600): to identity.json, or, once
// that was moved into the store, to a new identity.json the server's next
// start merges in. It returns every dev user's password by name, admin
// included. A server must not be running on the data dir.
func EnsureDevUsers(dataDir string) (map[string]string, error) {
	adminPW, err := EnsureIdentity(dataDir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{"admin": adminPW}
	dirFile := filepath.Join(dataDir, IdentityFile)
	seed, err := identity.LoadDirectory(dirFile)
	var known *identity.Directory
	switch {
	case err == nil:
		known = seed
	case errors.Is(err, fs.ErrNotExist):
		// Moved into the store already: new members go to the dev seed,
		// which the next start merges in.
		if known, err = identity.LoadDirectory(dirFile + migratedSuffix); err != nil {
			return nil, err
		}
		dirFile = filepath.Join(dataDir, DevSeedFile)
		if seed, err = identity.LoadDirectory(dirFile); errors.Is(err, fs.ErrNotExist) {
			seed = &identity.Directory{}
		} else if err != nil {
			return nil, err
		}
		known.Users = append(known.Users, seed.Users...)
		if moved, err := identity.LoadDirectory(dirFile + migratedSuffix); err == nil {
			known.Users = append(known.Users, moved.Users...)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	default:
		return nil, err
	}
	changed := false
	for _, name := range DevUsers {
		pwFile := PasswordFile(dataDir, name)
		if _, ok := known.UserByName(identity.DefaultDomainID, name); ok {
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
		if err := seed.AddMember(name, pw); err != nil {
			return nil, err
		}
		out[name], changed = pw, true
	}
	if changed {
		if err := seed.Save(dirFile); err != nil {
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
