package identity

import (
	"encoding/json"
	"log/slog"
	"net/http"

	"keel/internal/requestid"
)

// Prefix is the path the identity API is served under.
const Prefix = "/identity"

// The version keel reports: Keystone's current v3 minor version.
const (
	apiVersion        = "v3.14"
	apiVersionUpdated = "2020-04-07T00:00:00Z"
	mediaTypeV3       = "application/vnd.openstack.identity-v3+json"
)

// Handler serves the identity API at its full paths under /identity (it
// does not strip the prefix): mount it with mux.Handle("/identity/", h) and
// mux.Handle("/identity", h). base is the public base URL clients reach
// keel at, such as "http://10.0.0.5:8080", used in links, the catalog and
// WWW-Authenticate; if empty, each request's own scheme and host are used.
//
// Routes:
//
//	GET  /identity, /identity/               300, the versions list
//	GET  /identity/v3, /identity/v3/         the v3 version document
//	POST /identity/v3/auth/tokens            log in (password method): 201, X-Subject-Token
//	GET  /identity/v3/auth/tokens            validate X-Subject-Token (also HEAD); ?nocatalog
//	GET  /identity/v3/auth/catalog           the catalog
//	GET  /identity/v3/services[/{id}]        the catalog's services (admin; ?type=, ?name=)
//	GET  /identity/v3/endpoints[/{id}]       their endpoints (admin; ?service_id=, ?interface=, ?region_id=)
//	GET  /identity/v3/auth/projects          projects the caller has roles on
//	GET  /identity/v3/projects[/{id}]        list (admin; ?name=, ?domain_id=) or show
//	GET  /identity/v3/users[/{id}]           list (admin; ?name=, ?domain_id=) or show
//	GET  /identity/v3/users/{id}/projects    the user's projects (admin or self)
//	GET  /identity/v3/roles[/{id}]           the built-in roles and those created
//	GET  /identity/v3/domains[/{id}]         Default (and any other an entry names); list: admin
//	GET  /identity/v3/role_assignments       every assignment, with Keystone's filters (admin)
//	DELETE /identity/v3/auth/tokens          revoke X-Subject-Token (admin or its own user)
//	POST /identity/v3/projects               create a project (admin)
//	PATCH /identity/v3/projects/{id}         name, description, enabled (admin)
//	DELETE /identity/v3/projects/{id}        delete a project and its assignments (admin)
//	POST /identity/v3/roles                  create a role (admin)
//	DELETE /identity/v3/roles/{id}           delete a role and its assignments (admin; not a built-in one)
//	POST /identity/v3/users                  create a user (admin)
//	PATCH /identity/v3/users/{id}            name, password, enabled, description, email, default_project_id (admin)
//	DELETE /identity/v3/users/{id}           delete a user (admin)
//	POST /identity/v3/users/{id}/password    change one's own password
//	PUT|DELETE|GET|HEAD /identity/v3/projects/{p}/users/{u}/roles/{r}  grant, revoke, check (admin)
//
// A password change revokes the user's older tokens; a role taken away,
// a user or project disabled or deleted stops being honoured at once
// (roles are read at validation). A member gets 403 from every admin
// route, in Keystone's error shape.
//
// Every response carries X-Openstack-Request-Id.
func (i *Issuer) Handler(base string) http.Handler {
	h := &handler{iss: i, base: base}
	auth := func(f func(http.ResponseWriter, *http.Request, Principal)) http.Handler {
		return i.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, _ := PrincipalFrom(r.Context())
			f(w, r, p)
		}), base, WriteError)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /identity", h.versions)
	mux.HandleFunc("GET /identity/{$}", h.versions)
	mux.HandleFunc("GET /identity/v3", h.version)
	mux.HandleFunc("GET /identity/v3/{$}", h.version)
	mux.HandleFunc("POST /identity/v3/auth/tokens", h.issueToken)
	mux.HandleFunc("GET /identity/v3/auth/tokens", h.validateToken)
	mux.Handle("GET /identity/v3/auth/catalog", auth(h.authCatalog))
	mux.Handle("GET /identity/v3/auth/projects", auth(h.authProjects))
	mux.Handle("GET /identity/v3/services", auth(h.listServices))
	mux.Handle("GET /identity/v3/services/{id}", auth(h.showService))
	mux.Handle("GET /identity/v3/endpoints", auth(h.listEndpoints))
	mux.Handle("GET /identity/v3/endpoints/{id}", auth(h.showEndpoint))
	mux.Handle("GET /identity/v3/projects", auth(h.listProjects))
	mux.Handle("GET /identity/v3/projects/{id}", auth(h.showProject))
	mux.Handle("GET /identity/v3/users", auth(h.listUsers))
	mux.Handle("GET /identity/v3/users/{id}", auth(h.showUser))
	mux.Handle("GET /identity/v3/users/{id}/projects", auth(h.userProjects))
	mux.Handle("GET /identity/v3/roles", auth(h.listRoles))
	mux.Handle("GET /identity/v3/roles/{id}", auth(h.showRole))
	mux.HandleFunc("DELETE /identity/v3/auth/tokens", h.revokeToken)
	mux.Handle("POST /identity/v3/projects", auth(h.createProject))
	mux.Handle("PATCH /identity/v3/projects/{id}", auth(h.updateProject))
	mux.Handle("DELETE /identity/v3/projects/{id}", auth(h.deleteProject))
	mux.Handle("POST /identity/v3/roles", auth(h.createRole))
	mux.Handle("DELETE /identity/v3/roles/{id}", auth(h.deleteRole))
	mux.Handle("GET /identity/v3/domains", auth(h.listDomains))
	mux.Handle("GET /identity/v3/domains/{id}", auth(h.showDomain))
	mux.Handle("GET /identity/v3/role_assignments", auth(h.listRoleAssignments))
	mux.Handle("POST /identity/v3/users", auth(h.createUser))
	mux.Handle("PATCH /identity/v3/users/{id}", auth(h.updateUser))
	mux.Handle("DELETE /identity/v3/users/{id}", auth(h.deleteUser))
	mux.Handle("POST /identity/v3/users/{id}/password", auth(h.changePassword))
	for _, m := range []string{"PUT", "DELETE", "GET", "HEAD"} {
		mux.Handle(m+" /identity/v3/projects/{project}/users/{user}/roles/{role}", auth(h.roleAssignment))
	}
	mux.HandleFunc("/identity/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "The resource could not be found.")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requestid.Ensure(w)
		mux.ServeHTTP(w, r)
	})
}

type handler struct {
	iss      *Issuer
	base     string
	throttle throttle
}

func (h *handler) url(r *http.Request, path string) string { return baseURL(h.base, r) + path }

// serverFail answers 500 with Keystone's message and logs why, with the
// request's id (the one the client sees), so that every 500 has its
// cause in the server's log.
func (h *handler) serverFail(w http.ResponseWriter, r *http.Request, cause error) {
	log := h.iss.Log
	if log == nil {
		log = slog.Default()
	}
	log.Error("identity request failed", "method", r.Method, "path", r.URL.Path,
		"request_id", requestid.Ensure(w), "err", cause)
	WriteError(w, http.StatusInternalServerError, msgServerFail)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// versionDoc is one entry of Keystone's version documents.
func (h *handler) versionDoc(r *http.Request) map[string]any {
	return map[string]any{
		"id":      apiVersion,
		"status":  "stable",
		"updated": apiVersionUpdated,
		"links":   []map[string]string{{"rel": "self", "href": h.url(r, Prefix+"/v3/")}},
		"media-types": []map[string]string{
			{"base": "application/json", "type": mediaTypeV3},
		},
	}
}

// versions answers as Keystone does at its root: 300 Multiple Choices
// with the one version it has.
func (h *handler) versions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusMultipleChoices, map[string]any{
		"versions": map[string]any{"values": []any{h.versionDoc(r)}},
	})
}

func (h *handler) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"version": h.versionDoc(r)})
}
