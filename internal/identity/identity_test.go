package identity

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	hashIterations = 1000 // keep logins cheap under -race
	os.Exit(m.Run())
}

const testPassword = "s3cret"

// testClock is a settable clock safe for concurrent use.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

var testStart = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)

func newTestIssuer(t *testing.T) (*Issuer, *testClock) {
	t.Helper()
	clk := &testClock{now: testStart}
	return &Issuer{
		Key:       bytes.Repeat([]byte{7}, KeySize),
		Clock:     clk.Now,
		Directory: NewDevDirectory(testPassword),
	}, clk
}

var (
	adminUser    = UserID(DefaultDomainID, "admin")
	demoUser     = UserID(DefaultDomainID, "demo")
	adminProject = ProjectID(DefaultDomainID, "admin")
	demoProject  = ProjectID(DefaultDomainID, "demo")
)

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestDerivedIDs(t *testing.T) {
	a, b := NewDevDirectory("x"), NewDevDirectory("y")
	for k := range a.Projects {
		if a.Projects[k].ID != b.Projects[k].ID || !hex32.MatchString(a.Projects[k].ID) {
			t.Errorf("project %q: IDs %q and %q, want equal 32-hex", a.Projects[k].Name, a.Projects[k].ID, b.Projects[k].ID)
		}
	}
	for k := range a.Users {
		if a.Users[k].ID != b.Users[k].ID || !hex32.MatchString(a.Users[k].ID) {
			t.Errorf("user %q: IDs %q and %q, want equal 32-hex", a.Users[k].Name, a.Users[k].ID, b.Users[k].ID)
		}
	}
	ids := map[string]bool{adminUser: true, demoUser: true, adminProject: true, demoProject: true, RoleID("admin"): true}
	if len(ids) != 5 {
		t.Errorf("derived IDs collide: %v", ids)
	}
}

func TestDevDirectoryRoles(t *testing.T) {
	d := NewDevDirectory(testPassword)
	cases := []struct {
		user, project string
		want          []string
	}{
		{adminUser, adminProject, []string{"admin", "member", "reader"}},
		{demoUser, demoProject, []string{"member", "reader"}},
		{demoUser, adminProject, nil},
		{adminUser, demoProject, nil},
		{UserID(DefaultDomainID, "alt_demo"), ProjectID(DefaultDomainID, "alt_demo"), []string{"member", "reader"}},
		{UserID(DefaultDomainID, "alt_demo"), demoProject, nil},
	}
	for _, c := range cases {
		if got := d.EffectiveRoles(c.user, c.project); !reflect.DeepEqual(got, c.want) {
			t.Errorf("EffectiveRoles(%s, %s) = %v, want %v", c.user, c.project, got, c.want)
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDirectorySaveLoad(t *testing.T) {
	d := NewDevDirectory(testPassword)
	d.Users[1].DefaultProjectID = demoProject
	path := filepath.Join(t.TempDir(), "identity.json")
	if err := d.Save(path); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(path); err != nil { // replacing works too
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	got, err := LoadDirectory(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Errorf("loaded %+v, want %+v", got, d)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestDirectoryValidate(t *testing.T) {
	cases := []struct {
		name   string
		change func(d *Directory)
		want   string
	}{
		{"duplicate project name", func(d *Directory) { d.Projects[1].Name = "admin" }, "duplicate name"},
		{"unknown role", func(d *Directory) { d.Users[0].Roles[adminProject] = []string{"owner"} }, "unknown role"},
		{"role on unknown project", func(d *Directory) { d.Users[0].Roles["nope"] = []string{"admin"} }, "unknown project"},
		{"bad hash", func(d *Directory) { d.Users[0].PasswordHash = "plain" }, "password_hash"},
		{"missing id", func(d *Directory) { d.Users[1].ID = "" }, "required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDevDirectory(testPassword)
			c.change(d)
			path := filepath.Join(t.TempDir(), "identity.json")
			if err := d.Save(path); err != nil {
				t.Fatal(err)
			}
			_, err := LoadDirectory(path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("LoadDirectory: %v, want error containing %q", err, c.want)
			}
		})
	}
}

func TestPassword(t *testing.T) {
	h, err := HashPassword("pw")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$pbkdf2-sha256$1000$") {
		t.Errorf("hash %q", h)
	}
	if ok, err := CheckPassword(h, "pw"); !ok || err != nil {
		t.Errorf("right password: %v, %v", ok, err)
	}
	if ok, err := CheckPassword(h, "pW"); ok || err != nil {
		t.Errorf("wrong password: %v, %v", ok, err)
	}
	h2, _ := HashPassword("pw")
	if h2 == h {
		t.Error("two hashes of one password are equal: salt not random")
	}
	for _, bad := range []string{"", "pw", "$pbkdf2-sha256$x$AAAA$AAAA", "$bcrypt$1$a$b", "$pbkdf2-sha256$1000$!!$AAAA"} {
		if _, err := CheckPassword(bad, "pw"); err == nil {
			t.Errorf("CheckPassword(%q) accepted a malformed hash", bad)
		}
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != KeySize || bytes.Equal(k1, make([]byte, KeySize)) {
		t.Fatalf("key %x", k1)
	}
	st, err := os.Stat(filepath.Join(dir, "token.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", st, err)
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second load: %x, %v; want %x", k2, err, k1)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left behind: %v", entries)
	}

	os.WriteFile(filepath.Join(dir, "token.key"), []byte("short"), 0o600)
	if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "5 bytes") {
		t.Errorf("short key: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "token.key"), k1, 0o600)
	os.Chmod(filepath.Join(dir, "token.key"), 0o644)
	if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key: %v", err)
	}
}

func TestLoadOrCreateKeyConcurrent(t *testing.T) {
	dir := t.TempDir()
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			var err error
			if keys[k], err = LoadOrCreateKey(dir); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if !bytes.Equal(k, keys[0]) {
			t.Fatalf("racing creators got different keys")
		}
	}
}

func TestIssueValidateRoundTrip(t *testing.T) {
	iss, _ := newTestIssuer(t)
	tok, issued, err := iss.Issue(adminUser, adminProject)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_-]+$`).MatchString(tok) {
		t.Errorf("token %q is not unpadded URL-safe base64", tok)
	}
	got, err := iss.Validate(tok)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, issued) {
		t.Errorf("Validate = %+v, want %+v", got, issued)
	}
	want := Principal{
		UserID: adminUser, UserName: "admin", UserDomainID: "default",
		ProjectID: adminProject, ProjectName: "admin", ProjectDomainID: "default",
		Roles:     []string{"admin", "member", "reader"},
		IssuedAt:  testStart.Truncate(time.Microsecond),
		ExpiresAt: testStart.Truncate(time.Microsecond).Add(time.Hour),
		AuditID:   got.AuditID,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("principal %+v, want %+v", got, want)
	}
	if len(got.AuditID) != 22 {
		t.Errorf("audit id %q, want 22 characters", got.AuditID)
	}
	if !got.IsAdmin() {
		t.Error("admin is not admin")
	}

	_, demo, err := iss.Issue(demoUser, demoProject)
	if err != nil {
		t.Fatal(err)
	}
	if demo.IsAdmin() || !demo.HasRole("member") || !demo.HasRole("reader") {
		t.Errorf("demo roles %v", demo.Roles)
	}
}

func TestIssueRefusals(t *testing.T) {
	iss, _ := newTestIssuer(t)
	cases := []struct {
		name, user, project string
		want                error
	}{
		{"unknown user", "nobody", adminProject, ErrUnknownUser},
		{"unknown project", adminUser, "nowhere", ErrUnknownProject},
		{"no role", demoUser, adminProject, ErrNoRole},
	}
	for _, c := range cases {
		if _, _, err := iss.Issue(c.user, c.project); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	iss.Key = iss.Key[:8]
	if _, _, err := iss.Issue(adminUser, adminProject); err == nil {
		t.Error("short key accepted")
	}
}

// retoken re-encodes a token's raw bytes after f changes them.
func retoken(t *testing.T, tok string, f func(raw []byte) []byte) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(f(raw))
}

func TestValidateRefusals(t *testing.T) {
	iss, clk := newTestIssuer(t)
	tok, _, err := iss.Issue(demoUser, demoProject)
	if err != nil {
		t.Fatal(err)
	}
	other := &Issuer{Key: bytes.Repeat([]byte{8}, KeySize), Clock: iss.Clock, Directory: iss.Directory}
	foreign, _, _ := other.Issue(demoUser, demoProject)
	gone := &Issuer{Key: iss.Key, Clock: iss.Clock, Directory: &Directory{Projects: iss.Directory.Projects}}

	cases := []struct {
		name   string
		iss    *Issuer
		token  string
		want   error
		before func()
	}{
		{"empty", iss, "", ErrTokenMalformed, nil},
		{"not base64", iss, "not a token!", ErrTokenMalformed, nil},
		{"padded", iss, tok + "=", ErrTokenMalformed, nil},
		{"too short", iss, "AQID", ErrTokenMalformed, nil},
		{"other version", iss, retoken(t, tok, func(b []byte) []byte { b[0] = 2; return b }), ErrTokenMalformed, nil},
		{"signature flipped", iss, retoken(t, tok, func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), ErrTokenBadSignature, nil},
		{"payload changed", iss, retoken(t, tok, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"member"`), []byte(`"admin!"`), 1)
		}), ErrTokenBadSignature, nil},
		{"signature cut", iss, retoken(t, tok, func(b []byte) []byte { return b[:len(b)-1] }), ErrTokenBadSignature, nil},
		{"other key", iss, foreign, ErrTokenBadSignature, nil},
		{"user gone", gone, tok, ErrTokenUnknownSubject, nil},
		{"expired", iss, tok, ErrTokenExpired, func() { clk.Advance(time.Hour) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				c.before()
			}
			if _, err := c.iss.Validate(c.token); !errors.Is(err, c.want) {
				t.Errorf("Validate: %v, want %v", err, c.want)
			}
		})
	}
}

func TestExpiryBoundary(t *testing.T) {
	iss, clk := newTestIssuer(t)
	iss.TTL = 10 * time.Minute
	tok, p, err := iss.Issue(demoUser, demoProject)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.ExpiresAt.Sub(p.IssuedAt); d != 10*time.Minute {
		t.Errorf("TTL %v, want 10m", d)
	}
	clk.Advance(10*time.Minute - time.Microsecond - 1)
	if _, err := iss.Validate(tok); err != nil {
		t.Errorf("just before expiry: %v", err)
	}
	clk.Advance(time.Microsecond)
	if _, err := iss.Validate(tok); !errors.Is(err, ErrTokenExpired) {
		t.Errorf("at expiry: %v, want expired", err)
	}
}

func TestFormatTime(t *testing.T) {
	cases := map[time.Time]string{
		time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC):                                 "2026-11-30T12:00:00.000000Z",
		time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC):                         "2026-11-30T12:00:00.123456Z",
		time.Date(2026, 11, 30, 13, 0, 0, 5000, time.FixedZone("CET", 3600)):           "2026-11-30T12:00:00.000005Z",
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", -5*3600)).Add(time.Hour): "2026-01-02T09:04:05.000000Z",
	}
	for in, want := range cases {
		if got := formatTime(in); got != want {
			t.Errorf("formatTime(%v) = %q, want %q", in, got, want)
		}
	}
}

// A directory that is valid JSON but holds nobody is refused, saying
// what to do (issue 10, row 8).
func TestEmptyDirectoryIsRefused(t *testing.T) {
	for _, data := range []string{`{}`, `{"users": [], "projects": []}`} {
		path := filepath.Join(t.TempDir(), "identity.json")
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadDirectory(path)
		if err == nil {
			t.Fatalf("LoadDirectory accepted %s", data)
		}
		for _, want := range []string{path, "0 users", "nobody could log in", "move it"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("LoadDirectory(%s): %q does not say %q", data, err, want)
			}
		}
	}
}
