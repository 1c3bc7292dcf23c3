package identity

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The rest of Keystone's admin API keel serves: project update and
// delete, roles created and deleted, the domains, and the role assignments
// listing. Enough for `openstack project set|delete`, `role create|delete`,
// `role assignment list` and for Tempest's dynamic credentials, which make
// a project and users per test class and remove them after.

// updateProject is PATCH /v3/projects/{id} (admin): name, description,
// enabled. A disabled project takes no logins and its tokens stop working.
func (h *handler) updateProject(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "update_project") {
		return
	}
	b := decodeEntity[struct {
		Name        *string `json:"name"`
		DomainID    *string `json:"domain_id"`
		Description *string `json:"description"`
		Enabled     *bool   `json:"enabled"`
		IsDomain    *bool   `json:"is_domain"`
	}](w, r, "project")
	if b == nil || !entityOK(w, "project", b.Name, nil) {
		return
	}
	id := r.PathValue("id")
	if id == me.ProjectID && b.Enabled != nil && !*b.Enabled {
		WriteError(w, http.StatusForbidden, "You cannot disable the project your token is scoped to.")
		return
	}
	var p Project
	if !h.update(w, r, func(d *Directory) error {
		i := slices.IndexFunc(d.Projects, func(p Project) bool { return p.ID == id })
		if i < 0 {
			return notFound("project", id)
		}
		cur := &d.Projects[i]
		if b.DomainID != nil && *b.DomainID != cur.DomainID {
			return &apiError{http.StatusBadRequest, "Update of `domain_id` is not allowed."}
		}
		if b.IsDomain != nil && *b.IsDomain {
			return &apiError{http.StatusBadRequest, "Update of `is_domain` is not allowed."}
		}
		if b.Name != nil && *b.Name != cur.Name {
			if _, ok := d.ProjectByName(cur.DomainID, *b.Name); ok {
				return conflict("project", *b.Name)
			}
			cur.Name = *b.Name
		}
		if b.Description != nil {
			cur.Description = *b.Description
		}
		if b.Enabled != nil {
			cur.Disabled = !*b.Enabled
		}
		p = *cur
		return nil
	}) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"project": h.projectJSON(r, p)})
}

// deleteProject is DELETE /v3/projects/{id} (admin; not the project the
// caller's token is scoped to). The role assignments on it go with it;
// the compute API's servers and quotas of the project stay, as Nova's do
// when Keystone deletes a project (an admin sees them with all_tenants).
func (h *handler) deleteProject(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "delete_project") {
		return
	}
	id := r.PathValue("id")
	if id == me.ProjectID {
		WriteError(w, http.StatusForbidden, "You cannot delete the project your token is scoped to.")
		return
	}
	h.remove(w, r, "project", id, (*Directory).RemoveProject)
}

// createRole is POST /v3/roles (admin): a global role, which tokens carry
// and keel's policies ignore.
func (h *handler) createRole(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "create_role") {
		return
	}
	b := decodeEntity[struct {
		Name        string  `json:"name"`
		Description *string `json:"description"`
		DomainID    *string `json:"domain_id"`
	}](w, r, "role")
	if b == nil || !entityOK(w, "role", &b.Name, nil) {
		return
	}
	if b.DomainID != nil {
		WriteError(w, http.StatusBadRequest, "keel has global roles only: domain_id must be null.")
		return
	}
	var role Role
	if !h.update(w, r, func(d *Directory) error {
		if _, ok := d.RoleByName(b.Name); ok {
			return conflict("role", b.Name)
		}
		var err error
		role, err = d.AddRole(b.Name, derefOr(b.Description, ""))
		return err
	}) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"role": h.roleJSON(r, role)})
}

func derefOr(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

// deleteRole is DELETE /v3/roles/{id} (admin): the role and every
// assignment of it. The built-in roles are immutable: 403.
func (h *handler) deleteRole(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "delete_role") {
		return
	}
	id := r.PathValue("id")
	if role, ok := h.iss.dir().RoleByID(id); ok && role.ID == id && builtinRole(role.Name) {
		WriteError(w, http.StatusForbidden, fmt.Sprintf(
			"Unable to delete immutable role resource: `%s`. The built-in roles admin, member and reader cannot be deleted.", id))
		return
	}
	h.remove(w, r, "role", id, (*Directory).RemoveRole)
}

// domainIDs are the domains keel knows: Default, and any other a
// directory entry names.
func (d *Directory) domainIDs() []string {
	ids := []string{DefaultDomainID}
	add := func(id string) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, p := range d.Projects {
		add(p.DomainID)
	}
	for _, u := range d.Users {
		add(u.DomainID)
	}
	slices.Sort(ids[1:])
	return ids
}

func (h *handler) domainJSON(r *http.Request, id string) map[string]any {
	desc := ""
	if id == DefaultDomainID {
		desc = "The default domain"
	}
	return map[string]any{
		"id":          id,
		"name":        DomainName(id),
		"description": desc,
		"enabled":     true,
		"tags":        []string{},
		"options":     map[string]any{},
		"links":       map[string]string{"self": h.url(r, Prefix+"/v3/domains/"+id)},
	}
}

// listDomains is GET /v3/domains (admin; ?name=, ?enabled=).
func (h *handler) listDomains(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "list_domains") {
		return
	}
	q := r.URL.Query()
	out := []map[string]any{}
	for _, id := range h.iss.dir().domainIDs() {
		if q.Has("name") && q.Get("name") != DomainName(id) {
			continue
		}
		if q.Has("enabled") && !queryTrue(q, "enabled") {
			continue // every domain is enabled
		}
		out = append(out, h.domainJSON(r, id))
	}
	writeJSON(w, http.StatusOK, map[string]any{"domains": out, "links": h.collectionLinks(r)})
}

// showDomain is GET /v3/domains/{id}: an admin, or a user whose token's
// project is in that domain (as Keystone's default policy).
func (h *handler) showDomain(w http.ResponseWriter, r *http.Request, me Principal) {
	id := r.PathValue("id")
	if !me.IsAdmin() && me.ProjectDomainID != id {
		h.forbidden(w, "get_domain")
		return
	}
	if !slices.Contains(h.iss.dir().domainIDs(), id) {
		WriteError(w, http.StatusNotFound, "Could not find domain: "+id+".")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"domain": h.domainJSON(r, id)})
}

// queryTrue is Keystone's reading of a boolean query filter: present and
// neither "0" nor "false" (any case).
func queryTrue(q url.Values, key string) bool {
	if !q.Has(key) {
		return false
	}
	v := strings.ToLower(q.Get(key))
	return v != "0" && v != "false"
}

// implied are the roles a built-in role implies, in Keystone's default
// chain: admin implies member, member implies reader.
var implied = map[string][]string{RoleAdmin: {RoleMember, RoleReader}, RoleMember: {RoleReader}}

// assignment is one row of the role assignments listing.
type assignment struct {
	user    User
	project Project
	role    Role
	prior   *Role // the role granted, when role is implied by it (effective)
}

// listRoleAssignments is GET /v3/role_assignments (admin) with Keystone's
// filters user.id, group.id, role.id, scope.project.id, scope.domain.id,
// scope.system, scope.OS-INHERIT:inherited_to, effective, include_names
// and include_subtree. keel has no groups, no domain or system
// assignments and no inherited ones: those filters match nothing.
func (h *handler) listRoleAssignments(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "list_role_assignments") {
		return
	}
	q := r.URL.Query()
	effective, names := queryTrue(q, "effective"), queryTrue(q, "include_names")
	switch {
	case queryTrue(q, "include_subtree") && !q.Has("scope.project.id"):
		WriteError(w, http.StatusBadRequest, "scope.project.id must be specified if include_subtree is also specified")
		return
	case effective && q.Has("group.id"):
		WriteError(w, http.StatusBadRequest, "Combining effective and group filter will always result in an empty list.")
		return
	case q.Has("scope.project.id") && q.Has("scope.domain.id"):
		WriteError(w, http.StatusBadRequest, "Specify a domain or project, not both")
		return
	}
	out := []map[string]any{}
	if q.Has("group.id") || q.Has("scope.domain.id") || q.Has("scope.system") || q.Has("scope.OS-INHERIT:inherited_to") {
		writeJSON(w, http.StatusOK, map[string]any{"role_assignments": out, "links": h.collectionLinks(r)})
		return
	}
	d := h.iss.dir()
	for _, a := range d.assignments(effective) {
		if (q.Has("user.id") && q.Get("user.id") != a.user.ID) ||
			(q.Has("scope.project.id") && q.Get("scope.project.id") != a.project.ID) ||
			(q.Has("role.id") && q.Get("role.id") != a.role.ID) {
			continue
		}
		out = append(out, h.assignmentJSON(r, a, names))
	}
	writeJSON(w, http.StatusOK, map[string]any{"role_assignments": out, "links": h.collectionLinks(r)})
}

// assignments lists every role assignment, by user then project (in
// directory order) then role; effective adds the roles the granted ones
// imply (each once per user and project).
func (d *Directory) assignments(effective bool) []assignment {
	var out []assignment
	for _, u := range d.Users {
		for _, p := range d.Projects {
			granted := u.Roles[p.ID]
			if len(granted) == 0 {
				continue
			}
			seen := map[string]bool{}
			var rows []assignment
			for _, name := range granted {
				if role, ok := d.RoleByName(name); ok && !seen[name] {
					seen[name] = true
					rows = append(rows, assignment{user: u, project: p, role: role})
				}
			}
			if effective {
				for _, name := range granted {
					prior, _ := d.RoleByName(name)
					for _, imp := range implied[name] {
						if !seen[imp] {
							seen[imp] = true
							role, _ := d.RoleByName(imp)
							rows = append(rows, assignment{user: u, project: p, role: role, prior: &prior})
						}
					}
				}
			}
			slices.SortStableFunc(rows, func(a, b assignment) int { return cmp.Compare(roleRank(a.role.Name), roleRank(b.role.Name)) })
			out = append(out, rows...)
		}
	}
	return out
}

// roleRank orders admin, member, reader, then the other roles.
func roleRank(name string) int {
	if i := slices.Index(roleNames, name); i >= 0 {
		return i
	}
	return len(roleNames)
}

func (h *handler) assignmentJSON(r *http.Request, a assignment, names bool) map[string]any {
	granted := a.role
	if a.prior != nil {
		granted = *a.prior
	}
	links := map[string]any{"assignment": h.url(r, fmt.Sprintf("%s/v3/projects/%s/users/%s/roles/%s", Prefix, a.project.ID, a.user.ID, granted.ID))}
	if a.prior != nil {
		links["prior_role"] = h.url(r, Prefix+"/v3/roles/"+a.prior.ID)
	}
	role := map[string]any{"id": a.role.ID}
	user := map[string]any{"id": a.user.ID}
	project := map[string]any{"id": a.project.ID}
	if names {
		role["name"] = a.role.Name
		user["name"] = a.user.Name
		user["domain"] = map[string]any{"id": a.user.DomainID, "name": DomainName(a.user.DomainID)}
		project["name"] = a.project.Name
		project["domain"] = map[string]any{"id": a.project.DomainID, "name": DomainName(a.project.DomainID)}
	}
	return map[string]any{
		"role":  role,
		"user":  user,
		"scope": map[string]any{"project": project},
		"links": links,
	}
}
