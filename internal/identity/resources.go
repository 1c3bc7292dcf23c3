package identity

import (
	"fmt"
	"net/http"
)

// The read-only resources: enough for `openstack project list/show`,
// `user show`, `role list` and for clients that list a token's projects.

func (h *handler) forbidden(w http.ResponseWriter, action string) {
	WriteError(w, http.StatusForbidden, fmt.Sprintf(msgForbidden, "identity:"+action))
}

func (h *handler) collectionLinks(r *http.Request) map[string]any {
	return map[string]any{"self": h.url(r, r.URL.Path), "previous": nil, "next": nil}
}

func (h *handler) projectJSON(r *http.Request, p Project) map[string]any {
	return map[string]any{
		"id":          p.ID,
		"name":        p.Name,
		"domain_id":   p.DomainID,
		"description": p.Description,
		"enabled":     !p.Disabled,
		"parent_id":   p.DomainID,
		"is_domain":   false,
		"tags":        []string{},
		"options":     map[string]any{},
		"links":       map[string]string{"self": h.url(r, Prefix+"/v3/projects/"+p.ID)},
	}
}

func (h *handler) userJSON(r *http.Request, u User) map[string]any {
	m := map[string]any{
		"id":                  u.ID,
		"name":                u.Name,
		"domain_id":           u.DomainID,
		"enabled":             !u.Disabled,
		"password_expires_at": nil,
		"options":             map[string]any{},
		"links":               map[string]string{"self": h.url(r, Prefix+"/v3/users/"+u.ID)},
	}
	if u.DefaultProjectID != "" {
		m["default_project_id"] = u.DefaultProjectID
	}
	// Keystone shows the attributes it keeps as extras only when set.
	if u.Description != "" {
		m["description"] = u.Description
	}
	if u.Email != "" {
		m["email"] = u.Email
	}
	return m
}

// roleJSON is a role in Keystone's shape: the built-in ones are
// immutable, as keystone-manage bootstrap makes them.
func (h *handler) roleJSON(r *http.Request, role Role) map[string]any {
	var desc any
	options := map[string]any{}
	if builtinRole(role.Name) {
		options["immutable"] = true
	} else {
		desc = role.Description
	}
	return map[string]any{
		"id":          role.ID,
		"name":        role.Name,
		"domain_id":   nil,
		"description": desc,
		"options":     options,
		"links":       map[string]string{"self": h.url(r, Prefix+"/v3/roles/"+role.ID)},
	}
}

// matches applies the ?name= and ?domain_id= filters.
func matches(r *http.Request, name, domainID string) bool {
	q := r.URL.Query()
	return (!q.Has("name") || q.Get("name") == name) && (!q.Has("domain_id") || q.Get("domain_id") == domainID)
}

func (h *handler) writeProjects(w http.ResponseWriter, r *http.Request, keep func(Project) bool) {
	out := []map[string]any{}
	for _, p := range h.iss.dir().Projects {
		if keep(p) && matches(r, p.Name, p.DomainID) {
			out = append(out, h.projectJSON(r, p))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"projects": out, "links": h.collectionLinks(r)})
}

func (h *handler) hasRoleOn(userID string) func(Project) bool {
	return func(p Project) bool { return len(h.iss.dir().EffectiveRoles(userID, p.ID)) > 0 }
}

func (h *handler) authCatalog(w http.ResponseWriter, r *http.Request, _ Principal) {
	writeJSON(w, http.StatusOK, map[string]any{"catalog": h.catalog(r), "links": h.collectionLinks(r)})
}

func (h *handler) authProjects(w http.ResponseWriter, r *http.Request, me Principal) {
	h.writeProjects(w, r, h.hasRoleOn(me.UserID))
}

func (h *handler) listProjects(w http.ResponseWriter, r *http.Request, me Principal) {
	if !me.IsAdmin() {
		h.forbidden(w, "list_projects")
		return
	}
	h.writeProjects(w, r, func(Project) bool { return true })
}

func (h *handler) showProject(w http.ResponseWriter, r *http.Request, me Principal) {
	id := r.PathValue("id")
	if !me.IsAdmin() && me.ProjectID != id {
		h.forbidden(w, "get_project")
		return
	}
	p, ok := h.iss.dir().Project(id)
	if !ok {
		WriteError(w, http.StatusNotFound, "Could not find project: "+id+".")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"project": h.projectJSON(r, p)})
}

func (h *handler) listUsers(w http.ResponseWriter, r *http.Request, me Principal) {
	if !me.IsAdmin() {
		h.forbidden(w, "list_users")
		return
	}
	out := []map[string]any{}
	for _, u := range h.iss.dir().Users {
		if matches(r, u.Name, u.DomainID) {
			out = append(out, h.userJSON(r, u))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"users": out, "links": h.collectionLinks(r)})
}

// self looks up the user named in the path for an admin or for that user.
func (h *handler) self(w http.ResponseWriter, r *http.Request, me Principal, action string) (User, bool) {
	id := r.PathValue("id")
	if !me.IsAdmin() && me.UserID != id {
		h.forbidden(w, action)
		return User{}, false
	}
	u, ok := h.iss.dir().User(id)
	if !ok {
		WriteError(w, http.StatusNotFound, "Could not find user: "+id+".")
	}
	return u, ok
}

func (h *handler) showUser(w http.ResponseWriter, r *http.Request, me Principal) {
	if u, ok := h.self(w, r, me, "get_user"); ok {
		writeJSON(w, http.StatusOK, map[string]any{"user": h.userJSON(r, u)})
	}
}

func (h *handler) userProjects(w http.ResponseWriter, r *http.Request, me Principal) {
	if u, ok := h.self(w, r, me, "list_user_projects"); ok {
		h.writeProjects(w, r, h.hasRoleOn(u.ID))
	}
}

func (h *handler) listRoles(w http.ResponseWriter, r *http.Request, _ Principal) {
	q := r.URL.Query()
	out := []map[string]any{}
	for _, role := range h.iss.dir().AllRoles() {
		if !q.Has("name") || q.Get("name") == role.Name {
			out = append(out, h.roleJSON(r, role))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"roles": out, "links": h.collectionLinks(r)})
}

func (h *handler) showRole(w http.ResponseWriter, r *http.Request, _ Principal) {
	id := r.PathValue("id")
	if role, ok := h.iss.dir().RoleByID(id); ok && role.ID == id {
		writeJSON(w, http.StatusOK, map[string]any{"role": h.roleJSON(r, role)})
		return
	}
	WriteError(w, http.StatusNotFound, "Could not find role: "+id+".")
}
