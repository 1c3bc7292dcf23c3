package identity

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The one domain keel knows by name, as Keystone installs it.
const (
	DefaultDomainID   = "default"
	DefaultDomainName = "Default"
)

// The roles keel understands. Admin implies member, member implies reader.
const (
	RoleAdmin  = "admin"
	RoleMember = "member"
	RoleReader = "reader"
)

// Project is a Keystone project (tenant).
type Project struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	DomainID    string `json:"domain_id"`
	Description string `json:"description,omitempty"`
	// Disabled projects take no logins, and the tokens scoped to them
	// stop working (Keystone's enabled=false).
	Disabled bool `json:"disabled,omitempty"`
}

// User is a Keystone user and its role assignments.
type User struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	PasswordHash string `json:"password_hash"`
	DomainID     string `json:"domain_id"`
	Description  string `json:"description,omitempty"`
	Email        string `json:"email,omitempty"`
	// Disabled users cannot log in, and their tokens stop working.
	Disabled bool `json:"disabled,omitempty"`
	// DefaultProjectID, if set, is the scope of an unscoped login;
	// otherwise the first project (in Directory order) the user has a role
	// on.
	DefaultProjectID string `json:"default_project_id,omitempty"`
	// Roles maps a project ID to the role names granted on it: built-in
	// roles and the directory's own (Directory.Roles).
	Roles map[string][]string `json:"roles,omitempty"`
	// TokensValidAfter (Unix microseconds) revokes every token of the user
	// issued before it: set when the password changes.
	TokensValidAfter int64 `json:"tokens_valid_after,omitempty"`
}

// Directory is the set of users and projects. It is plain data: build or
// load it, then treat it as read-only once an Issuer serves from it (the
// Issuer's updates work on a copy and publish it whole).
type Directory struct {
	Projects []Project `json:"projects"`
	Users    []User    `json:"users"`
	// Revoked are the tokens revoked before they expire (DELETE
	// /v3/auth/tokens), by audit ID; each is dropped once past ExpiresAt.
	Revoked []Revocation `json:"revoked,omitempty"`
	// Roles are the roles created through the API, besides the built-in
	// admin, member and reader. They imply nothing and keel's policies do
	// not read them; tokens carry them, as Keystone's do.
	Roles []Role `json:"roles,omitempty"`
	// Retired are the IDs of deleted projects and users: never given again,
	// so a project re-created under an old name does not inherit the
	// servers and quotas the compute API keeps under the old ID.
	Retired []string `json:"retired,omitempty"`
}

// Role is a role created through the API.
type Role struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// Revocation is one revoked token.
type Revocation struct {
	AuditID   string `json:"audit_id"`
	ExpiresAt int64  `json:"expires_at"` // Unix microseconds, the token's own expiry
}

// ProjectID is the ID a project named name in domainID gets: 32 hex digits,
// the same on every run.
func ProjectID(domainID, name string) string { return derivedID("project", domainID, name) }

// UserID is the ID a user named name in domainID gets.
func UserID(domainID, name string) string { return derivedID("user", domainID, name) }

// RoleID is the ID of the role named name.
func RoleID(name string) string { return derivedID("role", "", name) }

func derivedID(kind, domainID, name string) string {
	sum := sha256.Sum256([]byte("keel identity\x00" + kind + "\x00" + domainID + "\x00" + name))
	return hex.EncodeToString(sum[:16])
}

// NewAdminDirectory returns the directory `keel server` starts with: the
// project "admin" and the user "admin", with role admin on it and the
// given password. Nobody else: other users are added through the identity
// API (or AddMember).
func NewAdminDirectory(adminPassword string) (*Directory, error) {
	d := &Directory{}
	if err := d.addWithRole("admin", adminPassword, RoleAdmin); err != nil {
		return nil, err
	}
	return d, nil
}

// AddMember adds a project and a user of the same name, the user with role
// member on it (keel dev's demo and alt_demo).
func (d *Directory) AddMember(name, password string) error {
	return d.addWithRole(name, password, RoleMember)
}

func (d *Directory) addWithRole(name, password, role string) error {
	p, err := d.AddProject(name)
	if err != nil {
		return err
	}
	u, err := d.AddUser(name, password)
	if err != nil {
		return err
	}
	return d.Grant(u.ID, p.ID, role)
}

// NewDevDirectory returns admin (role admin on project admin) and the
// members demo and alt_demo (on projects of their names), all with one
// password: a fixture for tests. keel dev gives each user its own password.
func NewDevDirectory(password string) *Directory {
	d, err := NewAdminDirectory(password)
	if err == nil {
		err = d.AddMember("demo", password)
	}
	if err == nil {
		err = d.AddMember("alt_demo", password)
	}
	if err != nil {
		panic(err)
	}
	return d
}

// AddProject adds a project in the default domain.
func (d *Directory) AddProject(name string) (Project, error) {
	if name == "" {
		return Project{}, errors.New("adding project: empty name")
	}
	if _, ok := d.ProjectByName(DefaultDomainID, name); ok {
		return Project{}, fmt.Errorf("adding project %q: already exists", name)
	}
	p := Project{ID: d.freshID(ProjectID(DefaultDomainID, name)), Name: name, DomainID: DefaultDomainID}
	d.Projects = append(d.Projects, p)
	return p, nil
}

// AddUser adds a user in the default domain, without roles.
func (d *Directory) AddUser(name, password string) (User, error) {
	hash, err := HashPassword(password)
	if err != nil {
		return User{}, fmt.Errorf("adding user %q: %w", name, err)
	}
	return d.addHashedUser(name, hash)
}

// addHashedUser is AddUser with the password already hashed.
func (d *Directory) addHashedUser(name, hash string) (User, error) {
	if name == "" {
		return User{}, errors.New("adding user: empty name")
	}
	if _, ok := d.UserByName(DefaultDomainID, name); ok {
		return User{}, fmt.Errorf("adding user %q: already exists", name)
	}
	u := User{ID: d.freshID(UserID(DefaultDomainID, name)), Name: name, PasswordHash: hash, DomainID: DefaultDomainID}
	d.Users = append(d.Users, u)
	return u, nil
}

// freshID is the ID a new project or user gets: derived (from its name)
// unless an entry has it (one renamed since) or had it (one deleted); then
// 32 random hex digits, as Keystone's IDs.
func (d *Directory) freshID(derived string) string {
	_, proj := d.Project(derived)
	if !proj && d.userIndex(derived) < 0 && !slices.Contains(d.Retired, derived) {
		return derived
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand does not fail on the platforms Go supports.
		panic(fmt.Sprintf("reading random bytes: %v", err))
	}
	return hex.EncodeToString(b)
}

// Grant gives the user role on the project.
func (d *Directory) Grant(userID, projectID, role string) error {
	if !d.knownRole(role) {
		return fmt.Errorf("granting role %q: unknown role (want admin, member, reader or one created)", role)
	}
	if _, ok := d.Project(projectID); !ok {
		return fmt.Errorf("granting role %q: no project %s", role, projectID)
	}
	i := d.userIndex(userID)
	if i < 0 {
		return fmt.Errorf("granting role %q: no user %s", role, userID)
	}
	u := &d.Users[i]
	if u.Roles == nil {
		u.Roles = map[string][]string{}
	}
	if !slices.Contains(u.Roles[projectID], role) {
		u.Roles[projectID] = append(u.Roles[projectID], role)
	}
	return nil
}

// roleNames are the built-in roles.
var roleNames = []string{RoleAdmin, RoleMember, RoleReader}

func builtinRole(r string) bool { return r == RoleAdmin || r == RoleMember || r == RoleReader }

// knownRole reports whether r names a built-in role or one of d.Roles.
func (d *Directory) knownRole(r string) bool {
	_, ok := d.RoleByName(r)
	return ok
}

// RoleByName is the role named name: a built-in one or one of d.Roles.
func (d *Directory) RoleByName(name string) (Role, bool) {
	if builtinRole(name) {
		return Role{ID: RoleID(name), Name: name}, true
	}
	for _, r := range d.Roles {
		if r.Name == name {
			return r, true
		}
	}
	return Role{}, false
}

// RoleByID is the role with the given ID (or, as keel also accepts, name).
func (d *Directory) RoleByID(id string) (Role, bool) {
	for _, name := range roleNames {
		if RoleID(name) == id || name == id {
			return Role{ID: RoleID(name), Name: name}, true
		}
	}
	for _, r := range d.Roles {
		if r.ID == id || r.Name == id {
			return r, true
		}
	}
	return Role{}, false
}

// AllRoles are the built-in roles then d.Roles.
func (d *Directory) AllRoles() []Role {
	out := make([]Role, 0, len(roleNames)+len(d.Roles))
	for _, name := range roleNames {
		out = append(out, Role{ID: RoleID(name), Name: name})
	}
	return append(out, d.Roles...)
}

// Project returns the project with the given ID.
func (d *Directory) Project(id string) (Project, bool) {
	for _, p := range d.Projects {
		if p.ID == id {
			return p, true
		}
	}
	return Project{}, false
}

// ProjectByName returns the project named name in domainID.
func (d *Directory) ProjectByName(domainID, name string) (Project, bool) {
	for _, p := range d.Projects {
		if p.DomainID == domainID && p.Name == name {
			return p, true
		}
	}
	return Project{}, false
}

// User returns the user with the given ID.
func (d *Directory) User(id string) (User, bool) {
	if i := d.userIndex(id); i >= 0 {
		return d.Users[i], true
	}
	return User{}, false
}

func (d *Directory) userIndex(id string) int {
	return slices.IndexFunc(d.Users, func(u User) bool { return u.ID == id })
}

// UserByName returns the user named name in domainID.
func (d *Directory) UserByName(domainID, name string) (User, bool) {
	for _, u := range d.Users {
		if u.DomainID == domainID && u.Name == name {
			return u, true
		}
	}
	return User{}, false
}

// domainID resolves a domain reference by ID or name: "default"/"Default"
// (any case), or any domain ID an entry of the directory uses, which is
// also that domain's name.
func (d *Directory) domainID(id, name string) (string, bool) {
	if id != "" {
		return id, id == DefaultDomainID || d.usesDomain(id)
	}
	if strings.EqualFold(name, DefaultDomainName) {
		return DefaultDomainID, true
	}
	return name, name != "" && d.usesDomain(name)
}

func (d *Directory) usesDomain(id string) bool {
	return slices.ContainsFunc(d.Projects, func(p Project) bool { return p.DomainID == id }) ||
		slices.ContainsFunc(d.Users, func(u User) bool { return u.DomainID == id })
}

// DomainName is the display name of a domain ID.
func DomainName(id string) string {
	if id == DefaultDomainID {
		return DefaultDomainName
	}
	return id
}

// EffectiveRoles returns the roles the user holds on the project, with the
// implied ones, in the order admin, member, reader, then the roles created
// through the API as granted; nil if none, or if the user or the project
// is disabled or unknown.
func (d *Directory) EffectiveRoles(userID, projectID string) []string {
	u, ok := d.User(userID)
	if !ok {
		return nil
	}
	p, ok := d.Project(projectID)
	if !ok {
		return nil
	}
	return d.rolesOf(u, p)
}

// rolesOf is EffectiveRoles for a user and project at hand.
func (d *Directory) rolesOf(u User, p Project) []string {
	if u.Disabled || p.Disabled {
		return nil
	}
	out := expandRoles(u.Roles[p.ID])
	for _, r := range u.Roles[p.ID] {
		if !builtinRole(r) {
			out = append(out, r)
		}
	}
	return out
}

func expandRoles(granted []string) []string {
	has := func(r string) bool { return slices.Contains(granted, r) }
	var out []string
	if has(RoleAdmin) {
		out = append(out, RoleAdmin)
	}
	if has(RoleAdmin) || has(RoleMember) {
		out = append(out, RoleMember)
	}
	if len(out) > 0 || has(RoleReader) {
		out = append(out, RoleReader)
	}
	return out
}

// defaultProject is the scope of an unscoped login: the user's default
// project if they have a role on it, else the first project they do.
func (d *Directory) defaultProject(u User) (Project, bool) {
	if u.DefaultProjectID != "" {
		if p, ok := d.Project(u.DefaultProjectID); ok && len(d.rolesOf(u, p)) > 0 {
			return p, true
		}
	}
	for _, p := range d.Projects {
		if len(d.rolesOf(u, p)) > 0 {
			return p, true
		}
	}
	return Project{}, false
}

// Validate checks the directory's consistency: IDs present and unique,
// names unique within a domain, role assignments on known projects with
// known role names, parseable password hashes.
func (d *Directory) Validate() error {
	var errs []error
	roleIDs, roleNamesSeen := map[string]bool{}, map[string]bool{}
	for _, name := range roleNames {
		roleIDs[RoleID(name)], roleNamesSeen[name] = true, true
	}
	for i, r := range d.Roles {
		switch {
		case r.ID == "" || r.Name == "":
			errs = append(errs, fmt.Errorf("role %d (%q): id and name are required", i, r.Name))
		case roleIDs[r.ID]:
			errs = append(errs, fmt.Errorf("role %q: duplicate id %s", r.Name, r.ID))
		case roleNamesSeen[r.Name]:
			errs = append(errs, fmt.Errorf("role %q: duplicate name", r.Name))
		}
		roleIDs[r.ID], roleNamesSeen[r.Name] = true, true
	}
	projIDs := map[string]bool{}
	names := map[string]bool{}
	for i, p := range d.Projects {
		switch {
		case p.ID == "" || p.Name == "" || p.DomainID == "":
			errs = append(errs, fmt.Errorf("project %d (%q): id, name and domain_id are required", i, p.Name))
		case projIDs[p.ID]:
			errs = append(errs, fmt.Errorf("project %q: duplicate id %s", p.Name, p.ID))
		case names[p.DomainID+"\x00"+p.Name]:
			errs = append(errs, fmt.Errorf("project %q: duplicate name in domain %s", p.Name, p.DomainID))
		}
		projIDs[p.ID], names[p.DomainID+"\x00"+p.Name] = true, true
	}
	userIDs := map[string]bool{}
	clear(names)
	for i, u := range d.Users {
		switch {
		case u.ID == "" || u.Name == "" || u.DomainID == "":
			errs = append(errs, fmt.Errorf("user %d (%q): id, name and domain_id are required", i, u.Name))
		case userIDs[u.ID]:
			errs = append(errs, fmt.Errorf("user %q: duplicate id %s", u.Name, u.ID))
		case names[u.DomainID+"\x00"+u.Name]:
			errs = append(errs, fmt.Errorf("user %q: duplicate name in domain %s", u.Name, u.DomainID))
		}
		userIDs[u.ID], names[u.DomainID+"\x00"+u.Name] = true, true
		if _, _, _, err := parseHash(u.PasswordHash); err != nil {
			errs = append(errs, fmt.Errorf("user %q: password_hash: %w", u.Name, err))
		}
		if u.DefaultProjectID != "" && !projIDs[u.DefaultProjectID] {
			errs = append(errs, fmt.Errorf("user %q: default_project_id %s is not a project", u.Name, u.DefaultProjectID))
		}
		for pid, roles := range u.Roles {
			if !projIDs[pid] {
				errs = append(errs, fmt.Errorf("user %q: role on unknown project %s", u.Name, pid))
			}
			for _, r := range roles {
				if !roleNamesSeen[r] {
					errs = append(errs, fmt.Errorf("user %q: unknown role %q on project %s (want admin, member, reader or one of the directory's roles)", u.Name, r, pid))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// LoadDirectory reads and validates a directory saved by Save.
func LoadDirectory(path string) (*Directory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading identity directory: %w", err)
	}
	var d Directory
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("loading identity directory %s: %w", path, err)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("loading identity directory %s: %w", path, err)
	}
	// Valid JSON with nobody in it (`{}`) would start a server nobody can
	// log in to: refuse it.
	if len(d.Users) == 0 || len(d.Projects) == 0 {
		return nil, fmt.Errorf("loading identity directory %s: it has %d users and %d projects, so nobody could log in; "+
			"restore it from a copy, or move it (and admin-password next to it) away to have keel server create a new one with a new admin password",
			path, len(d.Users), len(d.Projects))
	}
	return &d, nil
}

// Save writes the directory to path atomically (a temporary file in the
// same folder, synced, then renamed over path) with mode 0600.
func (d *Directory) Save(path string) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("saving identity directory: %w", err)
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// writeFileAtomic replaces path with data, mode 0600, never leaving a
// partly written file at path.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename in dir durable; best effort.
func syncDir(dir string) {
	if df, err := os.Open(dir); err == nil {
		df.Sync()
		df.Close()
	}
}
