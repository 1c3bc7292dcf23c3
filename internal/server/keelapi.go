package server

import (
	"encoding/json"
	"net/http"

	"keel/internal/api/compute"
	"keel/internal/audit"
	"keel/internal/httpbody"
	"keel/internal/identity"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// keelAPI serves keel's own admin endpoints under /keel/v1 (behind the
// same tokens as the compute API):
//
//	GET  /keel/v1/audit              the store's invariant violations
//	POST /keel/v1/schedule/explain   every host's fate for a request
type keelAPI struct {
	st    store.Store
	sched *scheduler.Scheduler
}

func (k *keelAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /keel/v1/audit", k.admin(k.audit))
	mux.HandleFunc("POST /keel/v1/schedule/explain", k.admin(k.explain))
}

func (k *keelAPI) admin(h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := identity.PrincipalFrom(r.Context())
		if !ok {
			compute.WriteError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
			return
		}
		if !p.IsAdmin() {
			compute.WriteError(w, http.StatusForbidden, "keel's admin API needs the admin role")
			return
		}
		h(w, r)
	}
}

func (k *keelAPI) audit(w http.ResponseWriter, r *http.Request) {
	v, err := audit.Check(r.Context(), k.st)
	if err != nil {
		compute.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if v == nil {
		v = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"violations": v})
}

// explainRequest names the flavor (id or name) and, optionally, hosts to
// ignore or the one host to check.
type explainRequest struct {
	Flavor      string   `json:"flavor"`
	IgnoreHosts []string `json:"ignore_hosts"`
	Host        string   `json:"host"`
	Zone        string   `json:"availability_zone"`
}

func (k *keelAPI) explain(w http.ResponseWriter, r *http.Request) {
	var req explainRequest
	if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, &req); err != nil || req.Flavor == "" {
		if httpbody.IsTooLarge(err) {
			compute.WriteError(w, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		compute.WriteError(w, http.StatusBadRequest, `give {"flavor": "<id or name>"}`)
		return
	}
	f, err := findFlavor(r, k.st, req.Flavor)
	if err != nil {
		compute.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	exp, err := k.sched.Explain(r.Context(), &scheduler.Request{
		Resources: f.Resources(), ExtraSpecs: f.ExtraSpecs, IgnoreHosts: req.IgnoreHosts, RequestedHost: req.Host, Zone: req.Zone,
	})
	if err != nil {
		compute.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"flavor": f, "explanation": exp})
}

func findFlavor(r *http.Request, st store.Store, ref string) (records.Flavor, error) {
	if f, err := st.GetFlavor(r.Context(), ref); err == nil {
		return f, nil
	}
	fs, err := st.ListFlavors(r.Context())
	if err != nil {
		return records.Flavor{}, err
	}
	for _, f := range fs {
		if f.Name == ref {
			return f, nil
		}
	}
	return records.Flavor{}, &notFoundError{"flavor " + ref + " not found (keel dev creates m1.tiny … m1.xlarge)"}
}

type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
