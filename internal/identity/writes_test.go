package identity

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/projects"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/roles"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/users"

	"keel/internal/testenv"
)

// gopherLogin logs in with gophercloud and returns an identity v3 client.
func gopherLogin(t *testing.T, url, user, password, project string) (*gophercloud.ServiceClient, error) {
	t.Helper()
	ctx := context.Background()
	pc, err := openstack.AuthenticatedClient(ctx, gophercloud.AuthOptions{
		IdentityEndpoint: url + "/identity/v3", Username: user, Password: password,
		DomainName: "Default", TenantName: project,
	})
	if err != nil {
		return nil, err
	}
	return openstack.NewIdentityV3(pc, gophercloud.EndpointOpts{})
}

func status(err error) int {
	var e gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &e) {
		return e.Actual
	}
	if err == nil {
		return 200
	}
	return -1
}

// TestIdentityWritesWithGophercloud creates a project and a user, grants
// and takes away a role, changes passwords and revokes a token, all
// through gophercloud, and checks what each does to logins and to tokens
// issued before: a role taken away and a password changed end the old
// tokens at once, a revoked token is refused, a member can do none of the
// admin's writes.
func TestIdentityWritesWithGophercloud(t *testing.T) {
	ts := newTestServer(t)
	ctx := context.Background()
	admin, err := gopherLogin(t, ts.URL, "admin", testPassword, "admin")
	if err != nil {
		t.Fatal(err)
	}
	p, err := projects.Create(ctx, admin, projects.CreateOpts{Name: "team1"}).Extract()
	if err != nil || p.ID != ProjectID(DefaultDomainID, "team1") {
		t.Fatalf("project create: %+v, %v", p, err)
	}
	if _, err := projects.Create(ctx, admin, projects.CreateOpts{Name: "team1"}).Extract(); status(err) != http.StatusConflict {
		t.Fatalf("second project team1: %v, want 409", err)
	}
	u, err := users.Create(ctx, admin, users.CreateOpts{Name: "bob", Password: "bob-pw-1", DefaultProjectID: p.ID}).Extract()
	if err != nil || u.DefaultProjectID != p.ID {
		t.Fatalf("user create: %+v, %v", u, err)
	}
	// No role yet: bob cannot log in to team1.
	if _, err := gopherLogin(t, ts.URL, "bob", "bob-pw-1", "team1"); status(err) != http.StatusUnauthorized {
		t.Fatalf("bob without a role: %v, want 401", err)
	}
	if err := roles.Assign(ctx, admin, RoleID(RoleMember), roles.AssignOpts{UserID: u.ID, ProjectID: p.ID}).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	bob, err := gopherLogin(t, ts.URL, "bob", "bob-pw-1", "team1")
	if err != nil {
		t.Fatalf("bob with role member: %v", err)
	}
	probe := func(token string) int { return ts.do(t, "GET", "/probe", "", "X-Auth-Token", token).status }
	bobToken := bob.Token()
	if st := probe(bobToken); st != 200 {
		t.Fatalf("bob's token: %d", st)
	}
	// A member writes nothing.
	if _, err := users.Create(ctx, bob, users.CreateOpts{Name: "eve", Password: "x"}).Extract(); status(err) != http.StatusForbidden {
		t.Fatalf("member creating a user: %v, want 403", err)
	}
	if err := roles.Assign(ctx, bob, RoleID(RoleAdmin), roles.AssignOpts{UserID: u.ID, ProjectID: p.ID}).ExtractErr(); status(err) != http.StatusForbidden {
		t.Fatalf("member granting itself admin: %v, want 403", err)
	}
	// The role taken away ends the token issued with it.
	if err := roles.Unassign(ctx, admin, RoleID(RoleMember), roles.UnassignOpts{UserID: u.ID, ProjectID: p.ID}).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if st := probe(bobToken); st != http.StatusUnauthorized {
		t.Fatalf("bob's token after his role was removed: %d, want 401", st)
	}
	if err := roles.Assign(ctx, admin, RoleID(RoleMember), roles.AssignOpts{UserID: u.ID, ProjectID: p.ID}).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	// Bob changes his own password: older tokens end, the old password too.
	ts.clk.Advance(time.Second)
	if err := users.ChangePassword(ctx, bob, u.ID, users.ChangePasswordOpts{OriginalPassword: "bob-pw-1", Password: "bob-pw-2"}).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if st := probe(bobToken); st != http.StatusUnauthorized {
		t.Fatalf("bob's token after his password changed: %d, want 401", st)
	}
	if _, err := gopherLogin(t, ts.URL, "bob", "bob-pw-1", "team1"); status(err) != http.StatusUnauthorized {
		t.Fatalf("old password: %v, want 401", err)
	}
	ts.clk.Advance(time.Second)
	bob, err = gopherLogin(t, ts.URL, "bob", "bob-pw-2", "team1")
	if err != nil {
		t.Fatal(err)
	}
	// The admin resets it (PATCH): bob's new token ends too.
	ts.clk.Advance(time.Second)
	if _, err := users.Update(ctx, admin, u.ID, users.UpdateOpts{Password: "bob-pw-3"}).Extract(); err != nil {
		t.Fatal(err)
	}
	if st := probe(bob.Token()); st != http.StatusUnauthorized {
		t.Fatalf("bob's token after the admin set his password: %d, want 401", st)
	}
	ts.clk.Advance(time.Second)
	bob, err = gopherLogin(t, ts.URL, "bob", "bob-pw-3", "team1")
	if err != nil {
		t.Fatal(err)
	}
	// Revocation: bob logs out; the token is refused, a new login works.
	tok := bob.Token()
	if err := tokens.Revoke(ctx, bob, tok).Err; err != nil {
		t.Fatal(err)
	}
	if st := probe(tok); st != http.StatusUnauthorized {
		t.Fatalf("revoked token: %d, want 401", st)
	}
	if r := ts.do(t, "GET", "/identity/v3/auth/tokens", "", "X-Auth-Token", admin.Token(), "X-Subject-Token", tok); r.status != http.StatusNotFound {
		t.Fatalf("validating a revoked token: %d, want 404", r.status)
	}
	// A member cannot revoke someone else's token.
	bob, _ = gopherLogin(t, ts.URL, "bob", "bob-pw-3", "team1")
	if err := tokens.Revoke(ctx, bob, admin.Token()).Err; status(err) != http.StatusForbidden {
		t.Fatalf("member revoking admin's token: %v, want 403", err)
	}
	if err := users.Delete(ctx, admin, u.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if st := probe(bob.Token()); st != http.StatusUnauthorized {
		t.Fatalf("token of a deleted user: %d, want 401", st)
	}
}

// TestIssuerPathSharesUpdates: two issuers on one directory file (two
// processes, or replicas on a shared file) — a user one creates can log
// in at the other within a second, and the file stays loadable.
func TestIssuerPathSharesUpdates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity.json")
	if err := NewDevDirectory(testPassword).Save(path); err != nil {
		t.Fatal(err)
	}
	load := func() *Issuer {
		d, err := LoadDirectory(path)
		if err != nil {
			t.Fatal(err)
		}
		return &Issuer{Key: make([]byte, KeySize), Directory: d, Path: path}
	}
	a, b := load(), load()
	if err := a.Update(context.Background(), func(d *Directory) error { return d.AddMember("carol", "c-pw") }); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDirectory(path); err != nil {
		t.Fatalf("file after the update: %v", err)
	}
	carol := UserID(DefaultDomainID, "carol")
	testenv.Poll(t, "the other issuer sees carol", func() error {
		_, _, err := b.Issue(carol, ProjectID(DefaultDomainID, "carol"))
		return err
	})
}

// TestWriteErrorsAsKeystone: every admin write answers a body without its
// entity, a bad name, another domain or bad JSON as Keystone does, and a
// token request without a subject token or about another user's token is
// refused with the policy named.
func TestWriteErrorsAsKeystone(t *testing.T) {
	ts := newTestServer(t)
	admin, _ := ts.login(t, adminByName, projectScope("admin"))
	demo, _ := ts.login(t, demoByName, projectScope("demo"))
	demoUser := UserID(DefaultDomainID, "demo")
	for _, c := range []struct {
		method, path, body string
		status             int
		message            string
	}{
		{"POST", "/v3/projects", `{}`, 400, "Invalid input for field 'project': 'project' is a required property."},
		{"POST", "/v3/projects", `{"project": null}`, 400, "Invalid input for field 'project': 'project' is a required property."},
		{"POST", "/v3/projects", `{"project": "p"}`, 400, "Expecting to find valid JSON in the request body."},
		{"POST", "/v3/projects", `{"project": {}}`, 400, "Invalid input for field 'project.name': the name must have 1 to 255 characters."},
		{"POST", "/v3/projects", `{"project": {"name": "p", "domain_id": "other"}}`, 400, "Could not find domain: other."},
		{"POST", "/v3/projects", `{"project": {"name": "", "domain_id": "other"}}`, 400, "Invalid input for field 'project.name': the name must have 1 to 255 characters."},
		{"POST", "/v3/users", `{"users": {}}`, 400, "Invalid input for field 'user': 'user' is a required property."},
		{"POST", "/v3/users", `{"user": {"name": "a\u0001b"}}`, 400, "Invalid input for field 'user.name': the name may not hold control characters."},
		{"PATCH", "/v3/users/" + demoUser, `{"user": {"name": ""}}`, 400, "Invalid input for field 'user.name': the name must have 1 to 255 characters."},
		{"PATCH", "/v3/users/" + demoUser, `{}`, 400, "Invalid input for field 'user': 'user' is a required property."},
		{"PATCH", "/v3/projects/" + ProjectID(DefaultDomainID, "demo"), `{"project": {"name": ""}}`, 400, "Invalid input for field 'project.name': the name must have 1 to 255 characters."},
		{"POST", "/v3/roles", `{"role": {}}`, 400, "Invalid input for field 'role.name': the name must have 1 to 255 characters."},
		{"POST", "/v3/roles", `[]`, 400, "Expecting to find valid JSON in the request body."},
	} {
		r := ts.do(t, c.method, "/identity"+c.path, c.body, "X-Auth-Token", admin)
		if r.status != c.status || !strings.Contains(string(r.body), c.message) {
			t.Errorf("%s %s %s: %d %s, want %d %q", c.method, c.path, c.body, r.status, r.body, c.status, c.message)
		}
	}
	for _, method := range []string{"GET", "DELETE"} {
		if r := ts.do(t, method, "/identity/v3/auth/tokens", "", "X-Auth-Token", admin); r.status != 400 || !strings.Contains(string(r.body), "X-Subject-Token") {
			t.Errorf("%s a token without X-Subject-Token: %d %s, want 400", method, r.status, r.body)
		}
		if r := ts.do(t, method, "/identity/v3/auth/tokens", "", "X-Auth-Token", admin, "X-Subject-Token", "nope"); r.status != 404 {
			t.Errorf("%s an unknown token: %d %s, want 404", method, r.status, r.body)
		}
		if r := ts.do(t, method, "/identity/v3/auth/tokens", "", "X-Auth-Token", "nope", "X-Subject-Token", demo); r.status != 401 {
			t.Errorf("%s with a bad X-Auth-Token: %d %s, want 401", method, r.status, r.body)
		}
		policy := map[string]string{"GET": "identity:validate_token", "DELETE": "identity:revoke_token"}[method]
		if r := ts.do(t, method, "/identity/v3/auth/tokens", "", "X-Auth-Token", demo, "X-Subject-Token", admin); r.status != 403 || !strings.Contains(string(r.body), policy) {
			t.Errorf("%s another user's token as a member: %d %s, want 403 naming %s", method, r.status, r.body, policy)
		}
	}
}
