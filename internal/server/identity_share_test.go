package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/identity"
	"keel/internal/store"
	"keel/internal/store/memory"
)

func storedDirectory(t *testing.T, st store.IdentityStore) (*identity.Directory, int64) {
	t.Helper()
	doc, v, err := st.GetIdentity(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := identity.DecodeDirectory(doc)
	if err != nil {
		t.Fatal(err)
	}
	return d, v
}

// TestShareIdentityMigratesFiles: an existing identity.json moves into the
// store whole (users, roles, revocations) and is renamed; another
// replica's old file is set aside, not merged (a user deleted meanwhile
// stays deleted); a corrupt file stops the start and changes nothing; keel
// dev's members added after the move reach the store at the next start.
func TestShareIdentityMigratesFiles(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st := memory.New()

	a := t.TempDir()
	old := identity.NewDevDirectory("pw")
	if _, err := old.AddUser("olduser", "old-pw"); err != nil {
		t.Fatal(err)
	}
	old.Revoke("revoked-audit-id", time.Now().Add(time.Hour), time.Now())
	if err := old.Save(filepath.Join(a, IdentityFile)); err != nil {
		t.Fatal(err)
	}
	if err := shareIdentity(ctx, st, a, log); err != nil {
		t.Fatal(err)
	}
	d, v := storedDirectory(t, st)
	if len(d.Users) != 4 || len(d.Projects) != 3 || len(d.Revoked) != 1 {
		t.Fatalf("store after the move: %d users, %d projects, %d revocations; want 4, 3, 1", len(d.Users), len(d.Projects), len(d.Revoked))
	}
	if roles := d.EffectiveRoles(identity.UserID("default", "demo"), identity.ProjectID("default", "demo")); len(roles) != 2 {
		t.Fatalf("demo's roles after the move: %v", roles)
	}
	if _, err := os.Stat(filepath.Join(a, IdentityFile)); !os.IsNotExist(err) {
		t.Fatalf("identity.json still there after the move: %v", err)
	}
	if _, err := identity.LoadDirectory(filepath.Join(a, IdentityFile+migratedSuffix)); err != nil {
		t.Fatalf("the migrated copy: %v", err)
	}
	// A restart changes nothing.
	if err := shareIdentity(ctx, st, a, log); err != nil {
		t.Fatal(err)
	}
	if _, v2 := storedDirectory(t, st); v2 != v {
		t.Fatalf("a restart wrote the directory again (version %d → %d)", v, v2)
	}

	// Replica B had its own copy with the admin under another password and
	// a user of its own.
	b := t.TempDir()
	other := identity.NewDevDirectory("other-pw")
	if _, err := other.AddUser("bob", "bob-pw"); err != nil {
		t.Fatal(err)
	}
	if err := other.Save(filepath.Join(b, IdentityFile)); err != nil {
		t.Fatal(err)
	}
	// The store's directory is the truth once there is one: B's file is
	// set aside, not merged (its users may have been deleted through A —
	// here olduser is, before B starts — and must not come back).
	d, v = storedDirectory(t, st)
	if !d.RemoveUser(identity.UserID("default", "olduser")) {
		t.Fatal("olduser not in the store")
	}
	doc, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutIdentity(ctx, doc, v); err != nil {
		t.Fatal(err)
	}
	if _, err := other.AddUser("olduser", "old-pw"); err != nil {
		t.Fatal(err)
	}
	if err := other.Save(filepath.Join(b, IdentityFile)); err != nil {
		t.Fatal(err)
	}
	_, v = storedDirectory(t, st)
	if err := shareIdentity(ctx, st, b, log); err != nil {
		t.Fatal(err)
	}
	d, v2 := storedDirectory(t, st)
	if _, ok := d.UserByName("default", "olduser"); ok {
		t.Fatal("B's old file brought back a user deleted through A")
	}
	if _, ok := d.UserByName("default", "bob"); ok || v2 != v {
		t.Fatalf("B's old file was merged into the store (bob there: %v; version %d → %d)", ok, v, v2)
	}
	if _, err := os.Stat(filepath.Join(b, IdentityFile+migratedSuffix)); err != nil {
		t.Fatalf("B's file was not set aside: %v", err)
	}
	admin, _ := d.UserByName("default", "admin")
	if good, _ := identity.CheckPassword(admin.PasswordHash, "pw"); !good {
		t.Fatal("B's file changed the admin's password")
	}

	// Corrupt files are refused, the store unchanged.
	_, before := storedDirectory(t, st)
	for _, bad := range []string{"{}", "not json", `{"users":[{"id":"x"}],"projects":[]}`} {
		c := t.TempDir()
		if err := os.WriteFile(filepath.Join(c, IdentityFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		err := shareIdentity(ctx, st, c, log)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(c, IdentityFile)) {
			t.Fatalf("corrupt file %q: %v; want a refusal naming the file", bad, err)
		}
		if _, err := os.Stat(filepath.Join(c, IdentityFile)); err != nil {
			t.Fatalf("a refused file was moved: %v", err)
		}
	}
	if _, after := storedDirectory(t, st); after != before {
		t.Fatalf("refused files changed the store (version %d → %d)", before, after)
	}

	// keel dev on a data dir whose identity was moved already: its members
	// go to a new seed, merged at the next start.
	fresh := memory.New()
	dev := t.TempDir()
	if err := shareIdentity(ctx, fresh, dev, log); err != nil {
		t.Fatal(err)
	}
	if d, _ := storedDirectory(t, fresh); len(d.Users) != 1 || d.Users[0].Name != "admin" {
		t.Fatalf("a new cloud's store: %+v", d.Users)
	}
	pws, err := EnsureDevUsers(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := shareIdentity(ctx, fresh, dev, log); err != nil {
		t.Fatal(err)
	}
	d, _ = storedDirectory(t, fresh)
	demo, ok := d.UserByName("default", "demo")
	if !ok || len(d.Users) != 3 {
		t.Fatalf("dev members not in the store: %d users", len(d.Users))
	}
	if good, _ := identity.CheckPassword(demo.PasswordHash, pws["demo"]); !good {
		t.Fatal("demo's password in the store is not the one in demo-password")
	}
	if again, err := EnsureDevUsers(dev); err != nil || again["demo"] != pws["demo"] {
		t.Fatalf("keel dev's second start: %v, %v", again, err)
	}
}
