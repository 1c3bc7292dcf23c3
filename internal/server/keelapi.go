package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"keel/internal/api/computeapi"
	"keel/internal/audit"
	"keel/internal/conductor"
	"keel/internal/httpbody"
	"keel/internal/identity"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/requestid"
	"keel/internal/scheduler"
	"keel/internal/sim/scenario"
	"keel/internal/store"
)

// keelStore is what keel's own API reads and writes directly: migrations
// (reset) and their instance actions, flavors (explain), plans, and what a
// cloud snapshot reads (GET /keel/v1/cloud).
type keelStore interface {
	snapshotStore
	store.Migrations
	store.Flavors
	store.Plans
}

// keelAPI serves keel's own admin endpoints under /keel/v1 (behind the
// same tokens as the compute API):
//
//	GET  /keel/v1/audit                 the cloud's invariant violations
//	POST /keel/v1/migrations/{id}/reset end a stuck migration
//	POST /keel/v1/schedule/explain      every host's fate for a request
//	… /keel/v1/plans                    move plans and drains (plansapi.go)
//	GET  /keel/v1/cloud                 the cloud, for keel sim export
type keelAPI struct {
	st    keelStore
	sched *scheduler.Scheduler
	// audit is where GET /keel/v1/audit reads (its Store is st), opt its
	// deadlines and now its clock.
	audit audit.Sources
	opt   audit.Options
	now   func() time.Time
	// resetter ends a stuck migration (the conductor); nil answers 501.
	resetter migrationResetter
	// plans runs drains and other move plans (the conductor); nil answers
	// 501.
	plans planRunner
	// computeOpts are the compute options GET /keel/v1/cloud reports.
	computeOpts scenario.SnapshotCompute
	// copyMiBps is the copy rate expected of one live migration (0:
	// unknown), which a plan's expected duration is computed at.
	copyMiBps float64
	log       *slog.Logger
}

// migrationResetter is the conductor's way out of a stuck migration: it
// ends the migration through its machine, reverting allocations and the
// destination, and returns the final record.
type migrationResetter interface {
	ResetMigration(ctx context.Context, id int64) (records.Migration, error)
}

// resetTimeout bounds a reset, which runs on its own context (a client
// that hangs up does not stop it halfway).
const resetTimeout = 60 * time.Second

func (k *keelAPI) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /keel/v1/audit", k.admin(k.runAudit))
	mux.HandleFunc("POST /keel/v1/migrations/{id}/reset", k.admin(k.resetMigration))
	mux.HandleFunc("POST /keel/v1/schedule/explain", k.admin(k.explain))
	k.planRoutes(mux)
	mux.HandleFunc("GET /keel/v1/cloud", k.admin(k.cloud))
}

func (k *keelAPI) admin(h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := identity.PrincipalFrom(r.Context())
		if !ok {
			computeapi.WriteError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
			return
		}
		if !p.IsAdmin() {
			computeapi.WriteError(w, http.StatusForbidden, "keel's admin API needs the admin role")
			return
		}
		h(w, r)
	}
}

func (k *keelAPI) runAudit(w http.ResponseWriter, r *http.Request) {
	rep, err := audit.Run(r.Context(), k.audit, k.now(), k.opt)
	if err != nil {
		computeapi.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"violations": rep.Violations(), "findings": rep.Findings, "unchecked": rep.Unchecked})
}

func (k *keelAPI) resetMigration(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		computeapi.WriteError(w, http.StatusBadRequest, "a migration id is a positive integer, not "+strconv.Quote(r.PathValue("id")))
		return
	}
	if k.resetter == nil {
		computeapi.WriteError(w, http.StatusNotImplemented, "this keel server's conductor cannot reset migrations")
		return
	}
	if _, err := k.st.GetMigration(r.Context(), id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			computeapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("Migration %d could not be found.", id))
			return
		}
		computeapi.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), resetTimeout)
	defer cancel()
	m, err := k.resetter.ResetMigration(ctx, id)
	if err != nil {
		// The conductor's errors name the migration already.
		switch {
		case errors.Is(err, store.ErrNotFound):
			computeapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("Migration %d could not be found.", id))
		case placement.IsConflict(err) || isInvalidState(err):
			computeapi.WriteError(w, http.StatusConflict, err.Error())
		default:
			computeapi.WriteError(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	// The reset is audited as an instance action of its instance, with
	// the migration's final state as its message.
	p, _ := identity.PrincipalFrom(r.Context())
	act := records.InstanceAction{InstanceUUID: m.InstanceUUID, RequestID: requestid.Ensure(w), Action: "reset-migration",
		UserID: p.UserID, ProjectID: p.ProjectID, StartTime: k.now(),
		Message: fmt.Sprintf("migration %d (%s → %s) reset by an operator: %s, phase %q", m.ID, m.SourceHost, m.DestHost, m.Status, m.Phase)}
	if err := k.st.CreateInstanceAction(context.WithoutCancel(r.Context()), act); err != nil {
		k.log.Error("recording the migration reset", "migration", id, "err", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"migration": m})
}

// isInvalidState reports whether err says the record is not in a state
// the request applies to (the conductor's InvalidStateError).
func isInvalidState(err error) bool {
	var e *conductor.InvalidStateError
	return errors.As(err, &e)
}

// explainRequest names the flavor (id or name) and, optionally, hosts to
// ignore or the one host to check, and the seed of a past decision's
// host_subset_size pick (its "scheduled" log line's pick_seed), so the
// explanation names the host that seed picks.
type explainRequest struct {
	Flavor      string   `json:"flavor"`
	IgnoreHosts []string `json:"ignore_hosts"`
	Host        string   `json:"host"`
	Zone        string   `json:"availability_zone"`
	PickSeed    uint64   `json:"pick_seed"`
}

func (k *keelAPI) explain(w http.ResponseWriter, r *http.Request) {
	var req explainRequest
	if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, &req); err != nil || req.Flavor == "" {
		if httpbody.IsTooLarge(err) {
			computeapi.WriteError(w, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		computeapi.WriteError(w, http.StatusBadRequest, `give {"flavor": "<id or name>"}`)
		return
	}
	f, err := findFlavor(r, k.st, req.Flavor)
	if err != nil {
		computeapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	exp, err := k.sched.Explain(r.Context(), &scheduler.Request{
		Resources: f.Resources(), ExtraSpecs: f.ExtraSpecs, IgnoreHosts: req.IgnoreHosts, RequestedHost: req.Host, Zone: req.Zone,
		PickSeed: req.PickSeed,
	})
	if err != nil {
		computeapi.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"flavor": f, "explanation": exp})
}

func findFlavor(r *http.Request, st store.Flavors, ref string) (records.Flavor, error) {
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
