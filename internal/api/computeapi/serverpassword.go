package computeapi

import (
	"net/http"

	"keel/internal/records"
)

// A server's password, as Nova's metadata service keeps it: a guest agent
// posts its encrypted administrator password there and the owner reads it
// with GET /servers/{id}/os-server-password. keel has no metadata service,
// so no guest ever posts one: the password reads empty, as Nova's for a
// guest that did not post one, and clearing it is accepted and changes
// nothing.

// showServerPassword is GET /servers/{id}/os-server-password: the owner
// (or an admin) reads {"password": ""}.
func (a *serversAPI) showServerPassword(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.instance(r, r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"password": ""})
	return nil
}

// clearServerPassword is DELETE /servers/{id}/os-server-password: 204,
// as Nova answers once it has dropped the stored one.
func (a *serversAPI) clearServerPassword(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.instance(r, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// networkActions are Nova's admin actions on a server's network:
// resetNetwork (removed from Nova with the XenAPI driver: 410 at every
// microversion, before the server is looked up) and injectNetworkInfo
// (admin only; 202, and Nova's compute casts it to the host's driver,
// which does nothing for keel's guests: they have no network to inject
// into).
var networkActions = map[string]bool{"resetNetwork": true, "injectNetworkInfo": true}

// injectNetworkInfo is the injectNetworkInfo action (admin): 202 for a
// server on a host, 409 for one without.
func (a *serverActionsAPI) injectNetworkInfo(w http.ResponseWriter, r *http.Request, in records.Instance) error {
	if !caller(r).Admin {
		return forbidden("os_compute_api:os-admin-actions:inject_network_info")
	}
	if in.Host == "" {
		return conflict("Instance " + in.UUID + " is not ready")
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}
