package identity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"keel/internal/httpbody"
)

// maxAuthBody bounds a login request body.
const maxAuthBody = 64 << 10

// Keystone's own messages.
const (
	msgForbidden  = "You are not authorized to perform the requested action: %s."
	msgNoToken    = "Could not find token."
	msgServerFail = "An unexpected error prevented the server from fulfilling your request."
)

// timeLayout is Keystone's timestamp format: UTC, microseconds, "Z".
const timeLayout = "2006-01-02T15:04:05.000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// ref names a user, project or domain by ID or by name.
type ref struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Domain *ref   `json:"domain"`
}

type authRequest struct {
	Auth *struct {
		Identity *struct {
			Methods  []string `json:"methods"`
			Password *struct {
				User *struct {
					ref
					Password *string `json:"password"`
				} `json:"user"`
			} `json:"password"`
		} `json:"identity"`
		// Scope is absent, the string "unscoped", or an object naming a
		// project (domain, system and trust scopes are not offered).
		Scope json.RawMessage `json:"scope"`
	} `json:"auth"`
}

type authFailure struct {
	status int
	msg    string
	// retryAfter: the login throttle refused the attempt (429) for this
	// long.
	retryAfter time.Duration
	// cause is why the server failed (a 500): logged, never answered.
	cause error
}

func badRequest(msg string) *authFailure {
	return &authFailure{status: http.StatusBadRequest, msg: msg}
}

var (
	unauthorized = &authFailure{status: http.StatusUnauthorized, msg: msgAuthRequired}
)

// issueToken is POST /v3/auth/tokens.
func (h *handler) issueToken(w http.ResponseWriter, r *http.Request) {
	var req authRequest
	if err := httpbody.DecodeJSON(r, maxAuthBody, &req); err != nil {
		if httpbody.IsTooLarge(err) {
			WriteError(w, http.StatusRequestEntityTooLarge, "Request is too large.")
			return
		}
		WriteError(w, http.StatusBadRequest, "Expecting to find valid JSON in the request body: "+err.Error())
		return
	}
	userID, projectID, fail := h.authenticate(r, &req)
	if fail != nil && fail.retryAfter > 0 {
		tooMany(w, fail.retryAfter)
		return
	}
	if fail != nil && fail.cause != nil {
		h.serverFail(w, r, fail.cause)
		return
	}
	if fail != nil {
		if fail.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Keystone uri="`+h.url(r, Prefix)+`"`)
		}
		WriteError(w, fail.status, fail.msg)
		return
	}
	token, p, err := h.iss.Issue(userID, projectID)
	if err != nil {
		h.serverFail(w, r, err)
		return
	}
	w.Header().Set("X-Subject-Token", token)
	writeJSON(w, http.StatusCreated, map[string]any{"token": h.tokenBody(r, p, r.URL.Query().Has("nocatalog"))})
}

// authenticate checks a login request and picks its scope. The password
// check is the login throttle's to allow: the attempt is counted for the
// user the request names (resolved, whatever the spelling) and the
// client's address before the password is hashed, and given back if the
// password is right.
func (h *handler) authenticate(r *http.Request, req *authRequest) (userID, projectID string, fail *authFailure) {
	a := req.Auth
	if a == nil || a.Identity == nil {
		return "", "", badRequest("Expecting to find auth.identity in the request body.")
	}
	if len(a.Identity.Methods) == 0 {
		return "", "", badRequest("Expecting to find auth.identity.methods in the request body.")
	}
	if !slices.Equal(a.Identity.Methods, []string{"password"}) {
		return "", "", &authFailure{status: http.StatusUnauthorized, msg: "Attempted to authenticate with an unsupported method."}
	}
	pw := a.Identity.Password
	if pw == nil || pw.User == nil {
		return "", "", badRequest("Expecting to find auth.identity.password.user in the request body.")
	}
	if pw.User.ID == "" && pw.User.Name == "" {
		return "", "", badRequest("Expecting to find the user's id or name in the request body.")
	}
	if pw.User.ID == "" && (pw.User.Domain == nil || pw.User.Domain.ID == "" && pw.User.Domain.Name == "") {
		return "", "", badRequest("Expecting to find domain in user. The server could not comply with the request since it is either malformed or otherwise incorrect.")
	}
	if pw.User.Password == nil {
		return "", "", badRequest("Expecting to find the user's password in the request body.")
	}
	project, fail := h.parseScope(a.Scope)
	if fail != nil {
		return "", "", fail
	}

	d := h.iss.dir()
	u, ok := h.lookupUser(pw.User.ref)
	who := "user " + u.ID
	if !ok {
		// Nobody by that name or id: the spelling is the key.
		who = "unknown " + pw.User.ID + "\x00" + pw.User.Name
		if dom := pw.User.Domain; dom != nil {
			who += "\x00" + dom.ID + "\x00" + dom.Name
		}
	}
	try, wait := h.throttle.reserve(throttleKey(r, who), h.iss.now())
	if wait > 0 {
		return "", "", &authFailure{status: http.StatusTooManyRequests, retryAfter: wait}
	}
	if !ok {
		h.iss.burnPasswordCheck(*pw.User.Password) // same time as a wrong password
		return "", "", unauthorized
	}
	if good, err := h.iss.checkPassword(u.PasswordHash, *pw.User.Password); err != nil {
		h.throttle.release(try) // not a guess
		return "", "", &authFailure{status: http.StatusInternalServerError, msg: msgServerFail,
			cause: fmt.Errorf("checking the password of user %s: %w", u.ID, err)}
	} else if !good {
		return "", "", unauthorized
	}
	// Right: the attempt was not a guess (what follows, a scope the user
	// has no role on, is not one either).
	h.throttle.release(try)
	var p Project
	if project == nil {
		if p, ok = d.defaultProject(u); !ok {
			return "", "", unauthorized
		}
	} else if p, ok = h.lookupProject(*project); !ok {
		return "", "", unauthorized
	}
	if len(d.EffectiveRoles(u.ID, p.ID)) == 0 {
		return "", "", unauthorized
	}
	return u.ID, p.ID, nil
}

// parseScope returns the project named by scope, or nil for none.
func (h *handler) parseScope(raw json.RawMessage) (*ref, *authFailure) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `"unscoped"` {
		return nil, nil
	}
	var scope map[string]json.RawMessage
	if err := json.Unmarshal(raw, &scope); err != nil {
		return nil, badRequest("Expecting auth.scope to be an object or \"unscoped\".")
	}
	projRaw, ok := scope["project"]
	if !ok {
		if len(scope) == 0 {
			return nil, nil
		}
		return nil, &authFailure{status: http.StatusUnauthorized, msg: "keel issues project-scoped tokens only."}
	}
	var proj ref
	if err := json.Unmarshal(projRaw, &proj); err != nil {
		return nil, badRequest("Expecting auth.scope.project to be an object.")
	}
	if proj.ID == "" && proj.Name == "" {
		return nil, badRequest("Expecting to find the project's id or name in auth.scope.project.")
	}
	if proj.ID == "" && (proj.Domain == nil || proj.Domain.ID == "" && proj.Domain.Name == "") {
		return nil, badRequest("Expecting to find domain in project.")
	}
	return &proj, nil
}

func (h *handler) lookupUser(u ref) (User, bool) {
	d := h.iss.dir()
	if u.ID != "" {
		return d.User(u.ID)
	}
	dom, ok := d.domainID(u.Domain.ID, u.Domain.Name)
	if !ok {
		return User{}, false
	}
	return d.UserByName(dom, u.Name)
}

func (h *handler) lookupProject(p ref) (Project, bool) {
	d := h.iss.dir()
	if p.ID != "" {
		return d.Project(p.ID)
	}
	dom, ok := d.domainID(p.Domain.ID, p.Domain.Name)
	if !ok {
		return Project{}, false
	}
	return d.ProjectByName(dom, p.Name)
}

var (
	dummyHashOnce sync.Once
	dummyHash     string
)

// burnPasswordCheck costs what checking a real password costs, so that an
// unknown user name cannot be told from a wrong password by timing.
func (i *Issuer) burnPasswordCheck(password string) {
	dummyHashOnce.Do(func() { dummyHash, _ = HashPassword("keel-dummy") })
	i.checkPassword(dummyHash, password)
}

// subjectToken reads a request about another token: the caller's
// X-Auth-Token must be valid and belong to an admin or to the subject
// token's (X-Subject-Token) own user, else it answers Keystone's 401, 400,
// 404 or 403 (policy names the rule) and returns false.
func (h *handler) subjectToken(w http.ResponseWriter, r *http.Request, policy string) (Principal, string, bool) {
	caller, err := h.iss.Validate(r.Header.Get("X-Auth-Token"))
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Keystone uri="`+h.url(r, Prefix)+`"`)
		WriteError(w, http.StatusUnauthorized, msgAuthRequired)
		return Principal{}, "", false
	}
	token := r.Header.Get("X-Subject-Token")
	if token == "" {
		WriteError(w, http.StatusBadRequest, "Expecting to find X-Subject-Token in the request headers.")
		return Principal{}, "", false
	}
	subject, err := h.iss.Validate(token)
	if err != nil {
		WriteError(w, http.StatusNotFound, msgNoToken)
		return Principal{}, "", false
	}
	if !caller.IsAdmin() && caller.UserID != subject.UserID {
		WriteError(w, http.StatusForbidden, fmt.Sprintf(msgForbidden, policy))
		return Principal{}, "", false
	}
	return subject, token, true
}

// validateToken is GET (and HEAD) /v3/auth/tokens: the caller's
// X-Auth-Token must be valid and belong to an admin or to the subject
// token's own user.
func (h *handler) validateToken(w http.ResponseWriter, r *http.Request) {
	subject, subjectToken, ok := h.subjectToken(w, r, "identity:validate_token")
	if !ok {
		return
	}
	w.Header().Set("X-Subject-Token", subjectToken)
	writeJSON(w, http.StatusOK, map[string]any{"token": h.tokenBody(r, subject, r.URL.Query().Has("nocatalog"))})
}

// tokenBody is the "token" object of Keystone's token responses.
func (h *handler) tokenBody(r *http.Request, p Principal, noCatalog bool) map[string]any {
	roles := make([]map[string]string, len(p.Roles))
	for k, name := range p.Roles {
		roles[k] = map[string]string{"id": RoleID(name), "name": name}
	}
	t := map[string]any{
		"methods": []string{"password"},
		"user": map[string]any{
			"id":                  p.UserID,
			"name":                p.UserName,
			"domain":              domainRef(p.UserDomainID),
			"password_expires_at": nil,
		},
		"project": map[string]any{
			"id":     p.ProjectID,
			"name":   p.ProjectName,
			"domain": domainRef(p.ProjectDomainID),
		},
		"roles":      roles,
		"issued_at":  formatTime(p.IssuedAt),
		"expires_at": formatTime(p.ExpiresAt),
		"audit_ids":  []string{p.AuditID},
		"is_domain":  false,
	}
	if !noCatalog {
		t["catalog"] = h.catalog(r)
	}
	return t
}

func domainRef(id string) map[string]string {
	return map[string]string{"id": id, "name": DomainName(id)}
}
