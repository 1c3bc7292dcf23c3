package identity

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"keel/internal/httpbody"
)

// The identity API's writes, in Keystone's shapes: enough for
// `openstack project create`, `user create/set/delete`, `user password
// set`, `role add/remove` and `token revoke`. Every change is saved to the
// directory file before it is answered.

// maxWriteBody bounds the body of a write.
const maxWriteBody = 64 << 10

// decodeWrite reads a write's JSON body, answering 400 or 413 itself.
func decodeWrite(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := httpbody.DecodeJSON(r, maxWriteBody, v); err != nil {
		if httpbody.IsTooLarge(err) {
			WriteError(w, http.StatusRequestEntityTooLarge, "Request is too large.")
		} else {
			WriteError(w, http.StatusBadRequest, "Expecting to find valid JSON in the request body.")
		}
		return false
	}
	return true
}

// decodeEntity decodes a write's body, Keystone's {"<kind>": {...}}, and
// returns the entity. A body that is not JSON, too large or without the
// entity is answered as Keystone does (400, 413) and nil returned.
func decodeEntity[T any](w http.ResponseWriter, r *http.Request, kind string) *T {
	var body map[string]json.RawMessage
	if !decodeWrite(w, r, &body) {
		return nil
	}
	raw, ok := body[kind]
	if !ok || string(raw) == "null" {
		WriteError(w, http.StatusBadRequest, fmt.Sprintf("Invalid input for field '%[1]s': '%[1]s' is a required property.", kind))
		return nil
	}
	v := new(T)
	if err := json.Unmarshal(raw, v); err != nil {
		WriteError(w, http.StatusBadRequest, "Expecting to find valid JSON in the request body.")
		return nil
	}
	return v
}

// entityOK checks a written entity's name (nil: the write leaves it as it
// is) and domain (nil: none given) and answers 400 if either is wrong.
func entityOK(w http.ResponseWriter, kind string, name, domainID *string) bool {
	err := checkDomain(domainID)
	if name != nil {
		err = cmp.Or(checkEntityName(kind, *name), err)
	}
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

// checkEntityName is Keystone's rule for names: 1 to 255 characters, no
// control characters.
func checkEntityName(kind, name string) error {
	if name == "" || utf8.RuneCountInString(name) > 255 || !utf8.ValidString(name) {
		return fmt.Errorf("Invalid input for field '%s.name': the name must have 1 to 255 characters.", kind)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("Invalid input for field '%s.name': the name may not hold control characters.", kind)
		}
	}
	return nil
}

// checkDomain accepts only the default domain (by ID), or none.
func checkDomain(id *string) error {
	if id != nil && *id != DefaultDomainID {
		return fmt.Errorf("Could not find domain: %s.", *id)
	}
	return nil
}

func (h *handler) admin(w http.ResponseWriter, me Principal, action string) bool {
	if !me.IsAdmin() {
		h.forbidden(w, action)
		return false
	}
	return true
}

// update applies fn to the directory and answers a failure; fn's errors
// that are an *apiError keep their status.
func (h *handler) update(w http.ResponseWriter, r *http.Request, fn func(*Directory) error) bool {
	err := h.iss.Update(r.Context(), fn)
	if err == nil {
		return true
	}
	var ae *apiError
	if errors.As(err, &ae) {
		WriteError(w, ae.status, ae.msg)
	} else {
		h.serverFail(w, r, err)
	}
	return false
}

// apiError is an answer an update's function chooses.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func conflict(kind, name string) error {
	return &apiError{http.StatusConflict, fmt.Sprintf("Conflict occurred attempting to store %s - Duplicate entry found with name %s.", kind, name)}
}

func notFound(kind, id string) error {
	return &apiError{http.StatusNotFound, fmt.Sprintf("Could not find %s: %s.", kind, id)}
}

// createProject is POST /v3/projects (admin).
func (h *handler) createProject(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "create_project") {
		return
	}
	b := decodeEntity[struct {
		Name        string  `json:"name"`
		DomainID    *string `json:"domain_id"`
		Description *string `json:"description"`
		Enabled     *bool   `json:"enabled"`
	}](w, r, "project")
	if b == nil || !entityOK(w, "project", &b.Name, b.DomainID) {
		return
	}
	var p Project
	if !h.update(w, r, func(d *Directory) error {
		if _, ok := d.ProjectByName(DefaultDomainID, b.Name); ok {
			return conflict("project", b.Name)
		}
		var err error
		if p, err = d.AddProject(b.Name); err != nil {
			return err
		}
		i := len(d.Projects) - 1
		if b.Description != nil {
			d.Projects[i].Description = *b.Description
		}
		if b.Enabled != nil {
			d.Projects[i].Disabled = !*b.Enabled
		}
		p = d.Projects[i]
		return nil
	}) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"project": h.projectJSON(r, p)})
}

// createUser is POST /v3/users (admin). A user created without a password
// cannot log in until one is set.
func (h *handler) createUser(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "create_user") {
		return
	}
	b := decodeEntity[struct {
		Name             string  `json:"name"`
		Password         *string `json:"password"`
		DomainID         *string `json:"domain_id"`
		DefaultProjectID string  `json:"default_project_id"`
		userAttrs
	}](w, r, "user")
	if b == nil || !entityOK(w, "user", &b.Name, b.DomainID) {
		return
	}
	var password string
	var err error
	if b.Password != nil {
		password = *b.Password
	} else if password, err = randomSecret(); err != nil {
		h.serverFail(w, r, fmt.Errorf("creating user %s without a password: %w", b.Name, err))
		return
	}
	hash, err := h.iss.hashPassword(password)
	if err != nil {
		h.serverFail(w, r, fmt.Errorf("creating user %s: %w", b.Name, err))
		return
	}
	var u User
	if !h.update(w, r, func(d *Directory) error {
		if _, ok := d.UserByName(DefaultDomainID, b.Name); ok {
			return conflict("user", b.Name)
		}
		if b.DefaultProjectID != "" {
			if _, ok := d.Project(b.DefaultProjectID); !ok {
				return notFound("project", b.DefaultProjectID)
			}
		}
		var err error
		if u, err = d.addHashedUser(b.Name, hash); err != nil {
			return err
		}
		nu := &d.Users[d.userIndex(u.ID)]
		nu.DefaultProjectID = b.DefaultProjectID
		b.apply(nu)
		u = *nu
		return nil
	}) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"user": h.userJSON(r, u)})
}

// userAttrs are the user's attributes a create or an update may set
// besides its name, password and default project.
type userAttrs struct {
	Enabled     *bool   `json:"enabled"`
	Description *string `json:"description"`
	Email       *string `json:"email"`
}

func (a userAttrs) apply(u *User) {
	if a.Enabled != nil {
		u.Disabled = !*a.Enabled
	}
	if a.Description != nil {
		u.Description = *a.Description
	}
	if a.Email != nil {
		u.Email = *a.Email
	}
}

// randomSecret is a password nobody knows.
func randomSecret() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// updateUser is PATCH /v3/users/{id} (admin): name, password, enabled,
// description, email and default_project_id. A new password revokes the
// user's tokens; a disabled user's tokens stop working.
func (h *handler) updateUser(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "update_user") {
		return
	}
	b := decodeEntity[struct {
		Name             *string `json:"name"`
		Password         *string `json:"password"`
		DefaultProjectID *string `json:"default_project_id"`
		DomainID         *string `json:"domain_id"`
		userAttrs
	}](w, r, "user")
	if b == nil || !entityOK(w, "user", b.Name, nil) {
		return
	}
	id := r.PathValue("id")
	if id == me.UserID && b.Enabled != nil && !*b.Enabled {
		WriteError(w, http.StatusForbidden, "You cannot disable the user you are logged in as.")
		return
	}
	var hash string
	if b.Password != nil {
		var err error
		if hash, err = h.iss.hashPassword(*b.Password); err != nil {
			h.serverFail(w, r, fmt.Errorf("updating user %s: %w", id, err))
			return
		}
	}
	var u User
	if !h.update(w, r, func(d *Directory) error {
		i := d.userIndex(id)
		if i < 0 {
			return notFound("user", id)
		}
		if b.DomainID != nil && *b.DomainID != d.Users[i].DomainID {
			return &apiError{http.StatusBadRequest, "Cannot change Domain ID."}
		}
		if b.Name != nil && *b.Name != d.Users[i].Name {
			if _, ok := d.UserByName(d.Users[i].DomainID, *b.Name); ok {
				return conflict("user", *b.Name)
			}
			d.Users[i].Name = *b.Name
		}
		if p := b.DefaultProjectID; p != nil {
			if _, ok := d.Project(*p); !ok && *p != "" {
				return notFound("project", *p)
			}
			d.Users[i].DefaultProjectID = *p
		}
		b.apply(&d.Users[i])
		if b.Password != nil {
			if err := d.setPasswordHash(id, hash, h.iss.now()); err != nil {
				return err
			}
		}
		u = d.Users[i]
		return nil
	}) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"user": h.userJSON(r, u)})
}

// changePassword is POST /v3/users/{id}/password: users change their own
// password, giving the old one; every token of theirs is revoked.
func (h *handler) changePassword(w http.ResponseWriter, r *http.Request, me Principal) {
	id := r.PathValue("id")
	if me.UserID != id {
		h.forbidden(w, "change_password")
		return
	}
	var body struct {
		User *struct {
			Password         *string `json:"password"`
			OriginalPassword *string `json:"original_password"`
		} `json:"user"`
	}
	if !decodeWrite(w, r, &body) {
		return
	}
	if body.User == nil || body.User.Password == nil || body.User.OriginalPassword == nil {
		WriteError(w, http.StatusBadRequest, "Invalid input for field 'user': 'password' and 'original_password' are required properties.")
		return
	}
	u, ok := h.iss.dir().User(id)
	if !ok {
		WriteError(w, http.StatusNotFound, "Could not find user: "+id+".")
		return
	}
	if good, err := h.iss.checkPassword(u.PasswordHash, *body.User.OriginalPassword); err != nil || !good {
		WriteError(w, http.StatusUnauthorized, msgAuthRequired)
		return
	}
	hash, err := h.iss.hashPassword(*body.User.Password)
	if err != nil {
		h.serverFail(w, r, fmt.Errorf("changing the password of %s: %w", id, err))
		return
	}
	if h.update(w, r, func(d *Directory) error { return d.setPasswordHash(id, hash, h.iss.now()) }) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// remove is the end of a DELETE on a directory entry: the entry of kind
// with id goes, by del, in one directory update, answered 204, or 404 in
// Keystone's shape when there is none.
func (h *handler) remove(w http.ResponseWriter, r *http.Request, kind, id string, del func(*Directory, string) bool) {
	if h.update(w, r, func(d *Directory) error {
		if !del(d, id) {
			return notFound(kind, id)
		}
		return nil
	}) {
		w.WriteHeader(http.StatusNoContent)
	}
}

// deleteUser is DELETE /v3/users/{id} (admin; not oneself).
func (h *handler) deleteUser(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "delete_user") {
		return
	}
	id := r.PathValue("id")
	if id == me.UserID {
		WriteError(w, http.StatusForbidden, "You cannot delete the user you are logged in as.")
		return
	}
	h.remove(w, r, "user", id, (*Directory).RemoveUser)
}

// roleAssignment is PUT, DELETE, GET and HEAD on
// /v3/projects/{project}/users/{user}/roles/{role} (admin).
func (h *handler) roleAssignment(w http.ResponseWriter, r *http.Request, me Principal) {
	if !h.admin(w, me, "role_assignment") {
		return
	}
	pid, uid := r.PathValue("project"), r.PathValue("user")
	d := h.iss.dir()
	rl, ok := d.RoleByID(r.PathValue("role"))
	if !ok {
		WriteError(w, http.StatusNotFound, "Could not find role: "+r.PathValue("role")+".")
		return
	}
	role := rl.Name
	if _, ok := d.Project(pid); !ok {
		WriteError(w, http.StatusNotFound, "Could not find project: "+pid+".")
		return
	}
	u, ok := d.User(uid)
	if !ok {
		WriteError(w, http.StatusNotFound, "Could not find user: "+uid+".")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		for _, g := range u.Roles[pid] {
			if g == role {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		WriteError(w, http.StatusNotFound, fmt.Sprintf("Could not find role assignment: %s on project %s for user %s.", role, pid, uid))
	case http.MethodPut:
		if h.update(w, r, func(d *Directory) error { return d.Grant(uid, pid, role) }) {
			w.WriteHeader(http.StatusNoContent)
		}
	case http.MethodDelete:
		if h.update(w, r, func(d *Directory) error {
			if !d.Ungrant(uid, pid, role) {
				return &apiError{http.StatusNotFound, fmt.Sprintf("Could not find role assignment: %s on project %s for user %s.", role, pid, uid)}
			}
			return nil
		}) {
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

// revokeToken is DELETE /v3/auth/tokens: the X-Subject-Token is revoked
// (an admin's, or the caller's own) until it would have expired.
func (h *handler) revokeToken(w http.ResponseWriter, r *http.Request) {
	subject, _, ok := h.subjectToken(w, r, "identity:revoke_token")
	if !ok {
		return
	}
	if h.update(w, r, func(d *Directory) error {
		d.Revoke(subject.AuditID, subject.ExpiresAt, h.iss.now())
		return nil
	}) {
		w.WriteHeader(http.StatusNoContent)
	}
}
