package server

import (
	"os"
	"path/filepath"
	"testing"

	"keel/internal/identity"
)

// TestFreshServerIdentity: a fresh data dir gets the admin and nobody else
// (keel server); keel dev's members come with passwords of their own, none
// of them the admin's, each in a 0600 file.
func TestFreshServerIdentity(t *testing.T) {
	dir := t.TempDir()
	adminPW, err := EnsureIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := identity.LoadDirectory(filepath.Join(dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Users) != 1 || d.Users[0].Name != "admin" || len(d.Projects) != 1 {
		t.Fatalf("keel server's first start made users %+v projects %+v; want admin alone", d.Users, d.Projects)
	}
	if _, err := os.Stat(PasswordFile(dir, "demo")); !os.IsNotExist(err) {
		t.Fatalf("demo-password exists after keel server's first start: %v", err)
	}
	pws, err := EnsureDevUsers(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pws["admin"] != adminPW || pws["demo"] == "" || pws["alt_demo"] == "" ||
		pws["demo"] == adminPW || pws["alt_demo"] == adminPW || pws["demo"] == pws["alt_demo"] {
		t.Fatalf("dev passwords %v: want three different ones, admin's unchanged", pws)
	}
	for _, u := range []string{"admin", "demo", "alt_demo"} {
		st, err := os.Stat(PasswordFile(dir, u))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s's password file: %v %v, want mode 0600", u, st.Mode(), err)
		}
	}
	d, err = identity.LoadDirectory(filepath.Join(dir, "identity.json"))
	if err != nil {
		t.Fatal(err)
	}
	for u := range pws {
		user, ok := d.UserByName(identity.DefaultDomainID, u)
		if !ok {
			t.Fatalf("no user %s", u)
		}
		for other, opw := range pws {
			good, _ := identity.CheckPassword(user.PasswordHash, opw)
			if good != (other == u) {
				t.Errorf("user %s accepts %s's password: %v", u, other, good)
			}
		}
	}
	// A second run changes nothing.
	again, err := EnsureDevUsers(dir)
	if err != nil || again["demo"] != pws["demo"] {
		t.Fatalf("second EnsureDevUsers: %v %v", again, err)
	}
}
