package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The changes the identity API makes to a directory. Each works on the
// directory it is called on; an Issuer calls them on a copy (see
// Issuer.Update) and publishes the copy.

// Ungrant removes role from the user on the project; false if the user
// did not hold it there.
func (d *Directory) Ungrant(userID, projectID, role string) bool {
	i := d.userIndex(userID)
	if i < 0 {
		return false
	}
	u := &d.Users[i]
	roles := u.Roles[projectID]
	k := slices.Index(roles, role)
	if k < 0 {
		return false
	}
	u.Roles[projectID] = slices.Delete(slices.Clone(roles), k, k+1)
	if len(u.Roles[projectID]) == 0 {
		delete(u.Roles, projectID)
	}
	return true
}

// SetPassword replaces the user's password and revokes every token issued
// to the user before now.
func (d *Directory) SetPassword(userID, password string, now time.Time) error {
	hash, err := HashPassword(password)
	if err != nil {
		return fmt.Errorf("setting password of %s: %w", userID, err)
	}
	return d.setPasswordHash(userID, hash, now)
}

// setPasswordHash is SetPassword with the password already hashed.
func (d *Directory) setPasswordHash(userID, hash string, now time.Time) error {
	i := d.userIndex(userID)
	if i < 0 {
		return fmt.Errorf("setting password of %s: %w", userID, ErrUnknownUser)
	}
	d.Users[i].PasswordHash = hash
	d.Users[i].TokensValidAfter = now.UnixMicro()
	return nil
}

// RemoveUser deletes a user; false if there was none. Its ID is retired.
func (d *Directory) RemoveUser(userID string) bool {
	i := d.userIndex(userID)
	if i < 0 {
		return false
	}
	d.Users = slices.Delete(d.Users, i, i+1)
	d.retire(userID)
	return true
}

// RemoveProject deletes a project, the role assignments on it, and the
// users' default_project_id that named it; false if there was none. Its ID
// is retired.
func (d *Directory) RemoveProject(projectID string) bool {
	i := slices.IndexFunc(d.Projects, func(p Project) bool { return p.ID == projectID })
	if i < 0 {
		return false
	}
	d.Projects = slices.Delete(d.Projects, i, i+1)
	for k := range d.Users {
		u := &d.Users[k]
		delete(u.Roles, projectID)
		if u.DefaultProjectID == projectID {
			u.DefaultProjectID = ""
		}
	}
	d.retire(projectID)
	return true
}

func (d *Directory) retire(id string) {
	if !slices.Contains(d.Retired, id) {
		d.Retired = append(d.Retired, id)
	}
}

// AddRole creates a role (not one of the built-in names).
func (d *Directory) AddRole(name, description string) (Role, error) {
	if name == "" {
		return Role{}, errors.New("adding role: empty name")
	}
	if d.knownRole(name) {
		return Role{}, fmt.Errorf("adding role %q: already exists", name)
	}
	r := Role{ID: RoleID(name), Name: name, Description: description}
	d.Roles = append(d.Roles, r)
	return r, nil
}

// RemoveRole deletes a role created through the API, and every assignment
// of it; false if d has no such role (the built-in ones cannot be
// removed).
func (d *Directory) RemoveRole(id string) bool {
	i := slices.IndexFunc(d.Roles, func(r Role) bool { return r.ID == id })
	if i < 0 {
		return false
	}
	name := d.Roles[i].Name
	d.Roles = slices.Delete(d.Roles, i, i+1)
	for k := range d.Users {
		u := &d.Users[k]
		for pid := range u.Roles {
			d.Ungrant(u.ID, pid, name)
		}
	}
	return true
}

// Revoke records a token as revoked until its expiry, and drops the
// revocations that have expired by now.
func (d *Directory) Revoke(auditID string, expiresAt, now time.Time) {
	d.Revoked = slices.DeleteFunc(d.Revoked, func(r Revocation) bool { return r.ExpiresAt <= now.UnixMicro() })
	if !d.revoked(auditID) {
		d.Revoked = append(d.Revoked, Revocation{AuditID: auditID, ExpiresAt: expiresAt.UnixMicro()})
	}
}

func (d *Directory) revoked(auditID string) bool {
	return slices.ContainsFunc(d.Revoked, func(r Revocation) bool { return r.AuditID == auditID })
}

// clone is a deep copy of d.
func (d *Directory) clone() (*Directory, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("copying the identity directory: %w", err)
	}
	var out Directory
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("copying the identity directory: %w", err)
	}
	return &out, nil
}

// Merge adds to d what of other it lacks: roles whose name d does not
// have, projects and users whose ID d does not have (a user's roles only
// on projects d then has), and every revocation and retired ID. An entry
// whose name d already gives to another ID is skipped. It returns the
// names added and skipped ("user alice", "project p1", "role r1").
func (d *Directory) Merge(other *Directory) (added, skipped []string) {
	for _, r := range other.Roles {
		if _, ok := d.RoleByName(r.Name); !ok {
			d.Roles = append(d.Roles, r)
			added = append(added, "role "+r.Name)
		}
	}
	for _, p := range other.Projects {
		_, byID := d.Project(p.ID)
		q, byName := d.ProjectByName(p.DomainID, p.Name)
		switch {
		case byID:
		case byName && q.ID != p.ID:
			skipped = append(skipped, "project "+p.Name)
		default:
			d.Projects = append(d.Projects, p)
			added = append(added, "project "+p.Name)
		}
	}
	for _, u := range other.Users {
		_, byID := d.User(u.ID)
		v, byName := d.UserByName(u.DomainID, u.Name)
		switch {
		case byID:
		case byName && v.ID != u.ID:
			skipped = append(skipped, "user "+u.Name)
		default:
			roles := map[string][]string{}
			for pid, rs := range u.Roles {
				if _, ok := d.Project(pid); ok {
					roles[pid] = slices.Clone(rs)
				}
			}
			u.Roles = roles
			if _, ok := d.Project(u.DefaultProjectID); !ok {
				u.DefaultProjectID = ""
			}
			d.Users = append(d.Users, u)
			added = append(added, "user "+u.Name)
		}
	}
	for _, r := range other.Revoked {
		if !d.revoked(r.AuditID) {
			d.Revoked = append(d.Revoked, r)
		}
	}
	for _, id := range other.Retired {
		d.retire(id)
	}
	return added, skipped
}
