package identity

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/domains"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/projects"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/roles"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/users"
)

func ptr[T any](v T) *T { return &v }

// TestProjectUpdateAndDeleteWithGophercloud: an admin renames, describes,
// disables and deletes a project through gophercloud. A disabled project
// takes no login and its member's token stops working; re-enabled, it
// works again. Deleting it takes the assignments on it and the user's
// default project with it, and a project re-created under the old name
// gets a new ID (it must not inherit the compute API's servers and quotas
// kept under the old one).
func TestProjectUpdateAndDeleteWithGophercloud(t *testing.T) {
	ts := newTestServer(t)
	ctx := context.Background()
	admin, err := gopherLogin(t, ts.URL, "admin", testPassword, "admin")
	if err != nil {
		t.Fatal(err)
	}
	p, err := projects.Create(ctx, admin, projects.CreateOpts{Name: "team1", Description: "first"}).Extract()
	if err != nil || p.Description != "first" || !p.Enabled {
		t.Fatalf("project create: %+v, %v", p, err)
	}
	u, err := users.Create(ctx, admin, users.CreateOpts{Name: "bob", Password: "bob-pw", DefaultProjectID: p.ID}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if err := roles.Assign(ctx, admin, RoleID(RoleMember), roles.AssignOpts{UserID: u.ID, ProjectID: p.ID}).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	bob, err := gopherLogin(t, ts.URL, "bob", "bob-pw", "team1")
	if err != nil {
		t.Fatal(err)
	}
	probe := func(token string) int { return ts.do(t, "GET", "/probe", "", "X-Auth-Token", token).status }

	got, err := projects.Update(ctx, admin, p.ID, projects.UpdateOpts{Name: "team2", Description: ptr("second")}).Extract()
	if err != nil || got.Name != "team2" || got.Description != "second" || got.ID != p.ID {
		t.Fatalf("project update: %+v, %v", got, err)
	}
	if _, err := projects.Update(ctx, admin, p.ID, projects.UpdateOpts{Name: "admin"}).Extract(); status(err) != http.StatusConflict {
		t.Fatalf("renaming team2 to admin: %v, want 409", err)
	}
	if _, err := projects.Update(ctx, admin, "nope", projects.UpdateOpts{Name: "x"}).Extract(); status(err) != http.StatusNotFound {
		t.Fatalf("updating an unknown project: %v, want 404", err)
	}
	if _, err := projects.Update(ctx, bob, p.ID, projects.UpdateOpts{Name: "mine"}).Extract(); status(err) != http.StatusForbidden {
		t.Fatalf("member updating its project: %v, want 403", err)
	}
	// The renamed project answers to its new name at login.
	if _, err := gopherLogin(t, ts.URL, "bob", "bob-pw", "team2"); err != nil {
		t.Fatalf("login to the renamed project: %v", err)
	}
	// Disabled: the token ends, no login; enabled again: both work.
	if _, err := projects.Update(ctx, admin, p.ID, projects.UpdateOpts{Enabled: ptr(false)}).Extract(); err != nil {
		t.Fatal(err)
	}
	if st := probe(bob.Token()); st != http.StatusUnauthorized {
		t.Fatalf("token of a disabled project: %d, want 401", st)
	}
	if _, err := gopherLogin(t, ts.URL, "bob", "bob-pw", "team2"); status(err) != http.StatusUnauthorized {
		t.Fatalf("login to a disabled project: %v, want 401", err)
	}
	if got, err := projects.Get(ctx, admin, p.ID).Extract(); err != nil || got.Enabled {
		t.Fatalf("disabled project shown: %+v, %v", got, err)
	}
	if _, err := projects.Update(ctx, admin, p.ID, projects.UpdateOpts{Enabled: ptr(true)}).Extract(); err != nil {
		t.Fatal(err)
	}
	if st := probe(bob.Token()); st != http.StatusOK {
		t.Fatalf("token of a re-enabled project: %d, want 200", st)
	}
	// The admin cannot disable or delete the project it is scoped to.
	adminProject := ProjectID(DefaultDomainID, "admin")
	if _, err := projects.Update(ctx, admin, adminProject, projects.UpdateOpts{Enabled: ptr(false)}).Extract(); status(err) != http.StatusForbidden {
		t.Fatalf("disabling one's own project: %v, want 403", err)
	}
	if err := projects.Delete(ctx, admin, adminProject).ExtractErr(); status(err) != http.StatusForbidden {
		t.Fatalf("deleting one's own project: %v, want 403", err)
	}
	if err := projects.Delete(ctx, bob, p.ID).ExtractErr(); status(err) != http.StatusForbidden {
		t.Fatalf("member deleting its project: %v, want 403", err)
	}

	if err := projects.Delete(ctx, admin, p.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := projects.Delete(ctx, admin, p.ID).ExtractErr(); status(err) != http.StatusNotFound {
		t.Fatalf("deleting it again: %v, want 404", err)
	}
	if st := probe(bob.Token()); st != http.StatusUnauthorized {
		t.Fatalf("token of a deleted project: %d, want 401", st)
	}
	if got, err := users.Get(ctx, admin, u.ID).Extract(); err != nil || got.DefaultProjectID != "" {
		t.Fatalf("bob after his default project was deleted: %+v, %v", got, err)
	}
	d := ts.iss.dir()
	if bu, _ := d.User(u.ID); len(bu.Roles) != 0 {
		t.Fatalf("bob's assignments after the project was deleted: %v", bu.Roles)
	}
	again, err := projects.Create(ctx, admin, projects.CreateOpts{Name: "team2"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if again.ID == p.ID || len(again.ID) != 32 {
		t.Fatalf("re-created team2 has ID %q (the deleted one's was %q): want a new one", again.ID, p.ID)
	}
	// Renamed away from its name, a project leaves that name free: a new
	// project of the old name gets an ID of its own.
	first, err := projects.Create(ctx, admin, projects.CreateOpts{Name: "team3"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := projects.Update(ctx, admin, first.ID, projects.UpdateOpts{Name: "team4"}).Extract(); err != nil {
		t.Fatal(err)
	}
	second, err := projects.Create(ctx, admin, projects.CreateOpts{Name: "team3"}).Extract()
	if err != nil || second.ID == first.ID {
		t.Fatalf("team3 after the first was renamed: %+v, %v (first's ID %s)", second, err, first.ID)
	}
}

// TestUserUpdateWithGophercloud: name, enabled, description and email
// through PATCH /v3/users/{id}; a disabled user's token stops working and
// it cannot log in.
func TestUserUpdateWithGophercloud(t *testing.T) {
	ts := newTestServer(t)
	ctx := context.Background()
	admin, err := gopherLogin(t, ts.URL, "admin", testPassword, "admin")
	if err != nil {
		t.Fatal(err)
	}
	demo, err := gopherLogin(t, ts.URL, "demo", testPassword, "demo")
	if err != nil {
		t.Fatal(err)
	}
	id := UserID(DefaultDomainID, "demo")
	got, err := users.Update(ctx, admin, id, users.UpdateOpts{
		Name: "demo2", Description: ptr("the demo user"), Extra: map[string]any{"email": "demo@example.org"},
	}).Extract()
	if err != nil || got.Name != "demo2" || got.Description != "the demo user" || got.Extra["email"] != "demo@example.org" {
		t.Fatalf("user update: %+v, %v", got, err)
	}
	if _, err := gopherLogin(t, ts.URL, "demo2", testPassword, "demo"); err != nil {
		t.Fatalf("login under the new name: %v", err)
	}
	if _, err := users.Update(ctx, admin, id, users.UpdateOpts{Name: "alt_demo"}).Extract(); status(err) != http.StatusConflict {
		t.Fatalf("renaming to a taken name: %v, want 409", err)
	}
	if _, err := users.Update(ctx, demo, id, users.UpdateOpts{Name: "x"}).Extract(); status(err) != http.StatusForbidden {
		t.Fatalf("member updating itself: %v, want 403", err)
	}
	if _, err := users.Update(ctx, admin, id, users.UpdateOpts{Enabled: ptr(false)}).Extract(); err != nil {
		t.Fatal(err)
	}
	if st := ts.do(t, "GET", "/probe", "", "X-Auth-Token", demo.Token()).status; st != http.StatusUnauthorized {
		t.Fatalf("a disabled user's token: %d, want 401", st)
	}
	if _, err := gopherLogin(t, ts.URL, "demo2", testPassword, "demo"); status(err) != http.StatusUnauthorized {
		t.Fatalf("a disabled user's login: %v, want 401", err)
	}
	if got, err := users.Get(ctx, admin, id).Extract(); err != nil || got.Enabled {
		t.Fatalf("disabled user shown: %+v, %v", got, err)
	}
	if _, err := users.Update(ctx, admin, UserID(DefaultDomainID, "admin"), users.UpdateOpts{Enabled: ptr(false)}).Extract(); status(err) != http.StatusForbidden {
		t.Fatalf("admin disabling itself: %v, want 403", err)
	}
	if _, err := users.Update(ctx, admin, id, users.UpdateOpts{Enabled: ptr(true)}).Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := gopherLogin(t, ts.URL, "demo2", testPassword, "demo"); err != nil {
		t.Fatalf("login after re-enabling: %v", err)
	}
}

// TestRolesAndAssignmentsWithGophercloud: a role created is listed,
// granted, carried in tokens and listed in /v3/role_assignments with each
// filter; effective adds the implied roles with a prior_role link;
// include_names adds the names; deleting the role takes its assignments;
// the built-in roles cannot be deleted.
func TestRolesAndAssignmentsWithGophercloud(t *testing.T) {
	ts := newTestServer(t)
	ctx := context.Background()
	admin, err := gopherLogin(t, ts.URL, "admin", testPassword, "admin")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := roles.Create(ctx, admin, roles.CreateOpts{Name: "observer"}).Extract()
	if err != nil || obs.Name != "observer" || obs.ID == "" {
		t.Fatalf("role create: %+v, %v", obs, err)
	}
	if _, err := roles.Create(ctx, admin, roles.CreateOpts{Name: "observer"}).Extract(); status(err) != http.StatusConflict {
		t.Fatalf("second role observer: %v, want 409", err)
	}
	if _, err := roles.Create(ctx, admin, roles.CreateOpts{Name: "member"}).Extract(); status(err) != http.StatusConflict {
		t.Fatalf("role named member: %v, want 409", err)
	}
	if got, err := roles.Get(ctx, admin, obs.ID).Extract(); err != nil || got.Name != "observer" {
		t.Fatalf("role show: %+v, %v", got, err)
	}
	demoID, demoProject := UserID(DefaultDomainID, "demo"), ProjectID(DefaultDomainID, "demo")
	if err := roles.Assign(ctx, admin, obs.ID, roles.AssignOpts{UserID: demoID, ProjectID: demoProject}).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	_, tok := ts.login(t, demoByName, projectScope("demo"))
	if names := tokenRoleNames(tok); !slices.Equal(names, []string{"member", "reader", "observer"}) {
		t.Fatalf("demo's token roles: %v", names)
	}

	list := func(opts roles.ListAssignmentsOpts) []roles.RoleAssignment {
		t.Helper()
		pages, err := roles.ListAssignments(admin, opts).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := roles.ExtractRoleAssignments(pages)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rows := func(as []roles.RoleAssignment) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.User.ID[:6]+" "+a.Scope.Project.ID[:6]+" "+a.Role.ID[:6])
		}
		return out
	}
	short := func(user, project, role string) string { return user[:6] + " " + project[:6] + " " + role[:6] }
	all := list(roles.ListAssignmentsOpts{})
	if len(all) != 4 { // admin@admin, demo member + observer, alt_demo member
		t.Fatalf("all assignments: %v", rows(all))
	}
	want := []string{short(demoID, demoProject, RoleID(RoleMember)), short(demoID, demoProject, obs.ID)}
	if got := rows(list(roles.ListAssignmentsOpts{UserID: demoID})); !slices.Equal(got, want) {
		t.Fatalf("user.id=demo: %v, want %v", got, want)
	}
	if got := rows(list(roles.ListAssignmentsOpts{ScopeProjectID: demoProject})); !slices.Equal(got, want) {
		t.Fatalf("scope.project.id=demo: %v, want %v", got, want)
	}
	if got := rows(list(roles.ListAssignmentsOpts{RoleID: obs.ID})); !slices.Equal(got, want[1:]) {
		t.Fatalf("role.id=observer: %v, want %v", got, want[1:])
	}
	if got := list(roles.ListAssignmentsOpts{ScopeDomainID: "default"}); len(got) != 0 {
		t.Fatalf("scope.domain.id (keel has no domain assignments): %v", rows(got))
	}
	// Effective: admin's grant implies member and reader.
	adminID, adminProject := UserID(DefaultDomainID, "admin"), ProjectID(DefaultDomainID, "admin")
	eff := list(roles.ListAssignmentsOpts{UserID: adminID, Effective: ptr(true)})
	want = []string{short(adminID, adminProject, RoleID(RoleAdmin)), short(adminID, adminProject, RoleID(RoleMember)), short(adminID, adminProject, RoleID(RoleReader))}
	if got := rows(eff); !slices.Equal(got, want) {
		t.Fatalf("effective for admin: %v, want %v", got, want)
	}
	// The raw answer: the implied rows link their prior role; names.
	r := ts.do(t, "GET", "/identity/v3/role_assignments?user.id="+adminID+"&effective&include_names=True", "", "X-Auth-Token", admin.Token())
	var body struct {
		RoleAssignments []struct {
			Links map[string]string `json:"links"`
			Role  map[string]any    `json:"role"`
			User  map[string]any    `json:"user"`
			Scope map[string]map[string]any
		} `json:"role_assignments"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || r.status != 200 || len(body.RoleAssignments) != 3 {
		t.Fatalf("effective with names: %d %s", r.status, r.body)
	}
	member := body.RoleAssignments[1]
	if member.Role["name"] != "member" || member.User["name"] != "admin" || member.Scope["project"]["name"] != "admin" ||
		!strings.HasSuffix(member.Links["prior_role"], "/identity/v3/roles/"+RoleID(RoleAdmin)) ||
		!strings.HasSuffix(member.Links["assignment"], "/v3/projects/"+adminProject+"/users/"+adminID+"/roles/"+RoleID(RoleAdmin)) {
		t.Fatalf("implied member row: %+v", member)
	}
	if _, ok := body.RoleAssignments[0].Links["prior_role"]; ok {
		t.Fatalf("the granted row has a prior_role: %+v", body.RoleAssignments[0])
	}
	if r := ts.do(t, "GET", "/identity/v3/role_assignments?include_subtree=true", "", "X-Auth-Token", admin.Token()); r.status != http.StatusBadRequest {
		t.Fatalf("include_subtree without a project: %d, want 400", r.status)
	}

	// The built-in roles are immutable; a created one goes with its assignments.
	if err := roles.Delete(ctx, admin, RoleID(RoleMember)).ExtractErr(); status(err) != http.StatusForbidden {
		t.Fatalf("deleting role member: %v, want 403", err)
	}
	if err := roles.Delete(ctx, admin, obs.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if err := roles.Delete(ctx, admin, obs.ID).ExtractErr(); status(err) != http.StatusNotFound {
		t.Fatalf("deleting observer again: %v, want 404", err)
	}
	if got := list(roles.ListAssignmentsOpts{UserID: demoID}); len(got) != 1 {
		t.Fatalf("demo's assignments after observer was deleted: %v", rows(got))
	}
	if _, err := roles.Get(ctx, admin, obs.ID).Extract(); status(err) != http.StatusNotFound {
		t.Fatalf("deleted role shown: %v, want 404", err)
	}
}

// TestMemberGetsKeystone403: a member calling each admin route gets 403
// in Keystone's error shape, naming the policy; it may read its own
// domain.
func TestMemberGetsKeystone403(t *testing.T) {
	ts := newTestServer(t)
	demo, _ := ts.login(t, demoByName, projectScope("demo"))
	demoProject, altUser := ProjectID(DefaultDomainID, "demo"), UserID(DefaultDomainID, "alt_demo")
	for _, c := range []struct{ method, path, body, policy string }{
		{"PATCH", "/identity/v3/projects/" + demoProject, `{"project": {"name": "x"}}`, "identity:update_project"},
		{"DELETE", "/identity/v3/projects/" + demoProject, "", "identity:delete_project"},
		{"PATCH", "/identity/v3/users/" + altUser, `{"user": {"enabled": false}}`, "identity:update_user"},
		{"DELETE", "/identity/v3/users/" + altUser, "", "identity:delete_user"},
		{"POST", "/identity/v3/roles", `{"role": {"name": "x"}}`, "identity:create_role"},
		{"DELETE", "/identity/v3/roles/" + RoleID(RoleAdmin), "", "identity:delete_role"},
		{"GET", "/identity/v3/role_assignments", "", "identity:list_role_assignments"},
		{"GET", "/identity/v3/domains", "", "identity:list_domains"},
	} {
		r := ts.do(t, c.method, c.path, c.body, "X-Auth-Token", demo)
		var e struct {
			Error struct {
				Code    int    `json:"code"`
				Title   string `json:"title"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(r.body, &e); err != nil || r.status != 403 || e.Error.Code != 403 || e.Error.Title != "Forbidden" ||
			!strings.Contains(e.Error.Message, c.policy) {
			t.Errorf("%s %s as member: %d %s, want 403 naming %s", c.method, c.path, r.status, r.body, c.policy)
		}
	}
	if r := ts.do(t, "GET", "/identity/v3/domains/default", "", "X-Auth-Token", demo); r.status != 200 {
		t.Fatalf("member reading its own domain: %d %s", r.status, r.body)
	}
	if r := ts.do(t, "GET", "/identity/v3/domains/other", "", "X-Auth-Token", demo); r.status != 403 {
		t.Fatalf("member reading another domain: %d, want 403", r.status)
	}
}

// TestDomainsWithGophercloud: the Default domain, listed and shown, found
// by name as clients look it up.
func TestDomainsWithGophercloud(t *testing.T) {
	ts := newTestServer(t)
	ctx := context.Background()
	admin, err := gopherLogin(t, ts.URL, "admin", testPassword, "admin")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := domains.List(admin, domains.ListOpts{Name: "Default"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := domains.ExtractDomains(pages)
	if err != nil || len(ds) != 1 || ds[0].ID != DefaultDomainID || !ds[0].Enabled {
		t.Fatalf("domains named Default: %+v, %v", ds, err)
	}
	pages, err = domains.List(admin, domains.ListOpts{Name: "Nope"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ds, _ := domains.ExtractDomains(pages); len(ds) != 0 {
		t.Fatalf("domains named Nope: %+v", ds)
	}
	if d, err := domains.Get(ctx, admin, DefaultDomainID).Extract(); err != nil || d.Name != DefaultDomainName {
		t.Fatalf("domain show: %+v, %v", d, err)
	}
	if _, err := domains.Get(ctx, admin, "nope").Extract(); status(err) != http.StatusNotFound {
		t.Fatalf("unknown domain: %v, want 404", err)
	}
}

// TestDirectoryRolesAndRetiredIDs: created roles and retired IDs survive
// a save and a load, and Merge carries them to another directory; a file
// granting an unknown role does not load.
func TestDirectoryRolesAndRetiredIDs(t *testing.T) {
	d := NewDevDirectory(testPassword)
	obs, err := d.AddRole("observer", "reads")
	if err != nil {
		t.Fatal(err)
	}
	demo, demoProject := UserID(DefaultDomainID, "demo"), ProjectID(DefaultDomainID, "demo")
	if err := d.Grant(demo, demoProject, "observer"); err != nil {
		t.Fatal(err)
	}
	alt := ProjectID(DefaultDomainID, "alt_demo")
	if !d.RemoveProject(alt) || d.RemoveProject(alt) {
		t.Fatal("RemoveProject: want true then false")
	}
	path := t.TempDir() + "/identity.json"
	if err := d.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := LoadDirectory(path)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := got.RoleByName("observer"); !ok || r != obs || !slices.Contains(got.Retired, alt) {
		t.Fatalf("loaded: roles %+v, retired %v", got.Roles, got.Retired)
	}
	if roles := got.EffectiveRoles(demo, demoProject); !slices.Equal(roles, []string{"member", "reader", "observer"}) {
		t.Fatalf("demo's roles after the load: %v", roles)
	}
	// A new alt_demo project does not get the retired ID.
	p, err := got.AddProject("alt_demo")
	if err != nil || p.ID == alt {
		t.Fatalf("re-created alt_demo: %+v, %v", p, err)
	}
	other, _ := NewAdminDirectory(testPassword)
	other.Merge(got)
	if _, ok := other.RoleByName("observer"); !ok || !slices.Contains(other.Retired, alt) {
		t.Fatalf("merged: roles %+v, retired %v", other.Roles, other.Retired)
	}
	if err := other.Validate(); err != nil {
		t.Fatalf("merged directory: %v", err)
	}
	if !got.RemoveRole(obs.ID) || got.RemoveRole(RoleID(RoleMember)) {
		t.Fatal("RemoveRole: want observer removed, member refused")
	}
	if roles := got.EffectiveRoles(demo, demoProject); !slices.Equal(roles, []string{"member", "reader"}) {
		t.Fatalf("demo's roles after observer was removed: %v", roles)
	}
	got.Users[1].Roles[demoProject] = []string{"ghost"}
	if err := got.Validate(); err == nil || !strings.Contains(err.Error(), `unknown role "ghost"`) {
		t.Fatalf("a grant of an unknown role: %v", err)
	}
}
