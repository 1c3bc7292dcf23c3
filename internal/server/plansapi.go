package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"keel/internal/api/computeapi"
	"keel/internal/conductor"
	"keel/internal/httpbody"
	"keel/internal/plan"
	"keel/internal/rebalance"
	"keel/internal/records"
	"keel/internal/store"
)

// Move plans under /keel/v1 (admin):
//
//	GET  /keel/v1/plans                  every plan, newest last, with progress
//	GET  /keel/v1/plans/{id}             one plan with its moves and progress
//	POST /keel/v1/plans                  {"drain": {...}}, {"evacuate": {"host": ...}}, {"rebalance": {"metric": "ram", ...}} (planned) or {"rebalance": {"moves": [...]}}
//	POST /keel/v1/plans/{id}/approve     start a recommended plan
//	POST /keel/v1/plans/{id}/cancel      {"abort": false}
//	POST /keel/v1/hosts/{host}/undrain   {"return": false}

// planRunner is what the plans API asks of the conductor's plans
// (conductor.Plans), declared here: the API needs nothing else of it.
type planRunner interface {
	Drain(ctx context.Context, req conductor.DrainRequest) (records.Plan, error)
	EvacuateAll(ctx context.Context, req conductor.EvacuateAllRequest) (records.Plan, error)
	Undrain(ctx context.Context, host string, moveBack bool) (records.Plan, error)
	CreatePlan(ctx context.Context, p records.Plan) (records.Plan, error)
	ApprovePlan(ctx context.Context, id int64) (records.Plan, error)
	CancelPlan(ctx context.Context, id int64, abort bool) (records.Plan, error)
	PlanRebalance(ctx context.Context, req conductor.RebalanceRequest) (records.Plan, rebalance.Plan, error)
	PlanCaps() plan.Caps
}

var _ planRunner = (*conductor.Plans)(nil)

func (k *keelAPI) planRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /keel/v1/plans", k.admin(k.listPlans))
	mux.HandleFunc("GET /keel/v1/plans/{id}", k.admin(k.showPlan))
	mux.HandleFunc("POST /keel/v1/plans", k.admin(k.createPlan))
	mux.HandleFunc("POST /keel/v1/plans/{id}/approve", k.admin(k.approvePlan))
	mux.HandleFunc("POST /keel/v1/plans/{id}/cancel", k.admin(k.cancelPlan))
	mux.HandleFunc("POST /keel/v1/hosts/{host}/undrain", k.admin(k.undrain))
}

// planView is a plan as the API shows it: the record, its progress and,
// until it ends, the pace of its moves left under the executor's caps.
type planView struct {
	records.Plan
	Progress plan.Summary `json:"progress"`
	Pace     *plan.Pace   `json:"pace,omitempty"`
}

func (k *keelAPI) view(p records.Plan) planView {
	v := planView{Plan: p, Progress: plan.Summarise(p, k.now())}
	if k.plans != nil && !records.PlanTerminal(p.State) {
		pace := plan.PaceOf(p, k.plans.PlanCaps(), k.copyMiBps)
		v.Pace = &pace
	}
	return v
}

func (k *keelAPI) listPlans(w http.ResponseWriter, r *http.Request) {
	ps, err := k.st.ListPlans(r.Context(), r.URL.Query().Get("active") == "1")
	if err != nil {
		computeapi.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := make([]planView, 0, len(ps))
	for _, p := range ps {
		out = append(out, k.view(p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"plans": out})
}

func (k *keelAPI) planID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		computeapi.WriteError(w, http.StatusBadRequest, "a plan id is a positive integer, not "+strconv.Quote(r.PathValue("id")))
		return 0, false
	}
	if k.plans == nil {
		computeapi.WriteError(w, http.StatusNotImplemented, "this keel server runs no plans")
		return 0, false
	}
	return id, true
}

func (k *keelAPI) showPlan(w http.ResponseWriter, r *http.Request) {
	id, ok := k.planID(w, r)
	if !ok {
		return
	}
	p, err := k.st.GetPlan(r.Context(), id)
	if err != nil {
		k.planError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"plan": k.view(p)})
}

// createPlanRequest is POST /keel/v1/plans: exactly one of drain,
// evacuate and rebalance.
type createPlanRequest struct {
	Drain *struct {
		Hosts         []string `json:"hosts"`
		Parallel      int      `json:"parallel"`
		Order         string   `json:"order"`
		ColdFallback  bool     `json:"cold_fallback"`
		StopOnFailure bool     `json:"stop_on_failure"`
		DryRun        bool     `json:"dry_run"`
	} `json:"drain"`
	// Evacuate rebuilds every instance of a host that is down elsewhere,
	// as one evacuate-all plan.
	Evacuate *struct {
		Host          string `json:"host"`
		Target        string `json:"target"`
		Parallel      int    `json:"parallel"`
		StopOnFailure bool   `json:"stop_on_failure"`
	} `json:"evacuate"`
	// Rebalance with moves stores them as a recommended plan; without,
	// the planner proposes them (metric, threshold, max_moves, seed).
	Rebalance *struct {
		Moves     []records.PlanMove  `json:"moves"`
		Options   records.PlanOptions `json:"options"`
		Reason    string              `json:"reason"`
		Metric    string              `json:"metric"`
		Threshold float64             `json:"threshold"`
		MaxMoves  int                 `json:"max_moves"`
		Seed      uint64              `json:"seed"`
		Parallel  int                 `json:"parallel"`
	} `json:"rebalance"`
}

func (k *keelAPI) createPlan(w http.ResponseWriter, r *http.Request) {
	if k.plans == nil {
		computeapi.WriteError(w, http.StatusNotImplemented, "this keel server runs no plans")
		return
	}
	var req createPlanRequest
	given := 0
	err := httpbody.DecodeJSON(r, httpbody.DefaultLimit*4, &req)
	for _, set := range []bool{req.Drain != nil, req.Evacuate != nil, req.Rebalance != nil} {
		if set {
			given++
		}
	}
	if err != nil || given != 1 {
		if httpbody.IsTooLarge(err) {
			computeapi.WriteError(w, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		computeapi.WriteError(w, http.StatusBadRequest, `give one of {"drain": {"hosts": [...]}}, {"evacuate": {"host": ...}} and {"rebalance": {"moves": [...]}}`)
		return
	}
	if e := req.Evacuate; e != nil {
		p, err := k.plans.EvacuateAll(r.Context(), conductor.EvacuateAllRequest{Host: e.Host, Target: e.Target, Parallel: e.Parallel,
			StopOnFailure: e.StopOnFailure})
		if err != nil {
			k.planError(w, err)
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"plan": k.view(p)})
		return
	}
	if d := req.Drain; d != nil {
		if d.Parallel < 0 {
			computeapi.WriteError(w, http.StatusBadRequest, "parallel must be 0 (no limit but the caps) or more")
			return
		}
		p, err := k.plans.Drain(r.Context(), conductor.DrainRequest{Hosts: d.Hosts, Parallel: d.Parallel, Order: d.Order,
			ColdFallback: d.ColdFallback, StopOnFailure: d.StopOnFailure, DryRun: d.DryRun})
		if err != nil {
			k.planError(w, err)
			return
		}
		status := http.StatusAccepted
		if d.DryRun {
			status = http.StatusOK
		}
		writeJSON(w, status, map[string]any{"plan": k.view(p)})
		return
	}
	if rb := req.Rebalance; len(rb.Moves) == 0 {
		if rb.Threshold < 0 || rb.MaxMoves < 0 || rb.Parallel < 0 {
			computeapi.WriteError(w, http.StatusBadRequest, "threshold, max_moves and parallel must not be negative")
			return
		}
		p, rp, err := k.plans.PlanRebalance(r.Context(), conductor.RebalanceRequest{Metric: rb.Metric, Threshold: rb.Threshold,
			MaxMoves: rb.MaxMoves, Seed: rb.Seed, Parallel: rb.Parallel})
		if err != nil {
			k.planError(w, err)
			return
		}
		out := map[string]any{"rebalance": rp}
		status := http.StatusOK
		if p.ID != 0 {
			out["plan"], status = k.view(p), http.StatusCreated
		}
		writeJSON(w, status, out)
		return
	}
	p, err := k.plans.CreatePlan(r.Context(), records.Plan{Purpose: records.PlanRebalance, Moves: req.Rebalance.Moves,
		Options: req.Rebalance.Options, Reason: req.Rebalance.Reason})
	if err != nil {
		k.planError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"plan": k.view(p)})
}

func (k *keelAPI) approvePlan(w http.ResponseWriter, r *http.Request) {
	id, ok := k.planID(w, r)
	if !ok {
		return
	}
	p, err := k.plans.ApprovePlan(r.Context(), id)
	if err != nil {
		k.planError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"plan": k.view(p)})
}

func (k *keelAPI) cancelPlan(w http.ResponseWriter, r *http.Request) {
	id, ok := k.planID(w, r)
	if !ok {
		return
	}
	var req struct {
		Abort bool `json:"abort"`
	}
	if r.ContentLength != 0 {
		if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, &req); err != nil {
			computeapi.WriteError(w, http.StatusBadRequest, `give {"abort": true|false} or no body`)
			return
		}
	}
	p, err := k.plans.CancelPlan(r.Context(), id, req.Abort)
	if err != nil {
		k.planError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"plan": k.view(p)})
}

func (k *keelAPI) undrain(w http.ResponseWriter, r *http.Request) {
	if k.plans == nil {
		computeapi.WriteError(w, http.StatusNotImplemented, "this keel server runs no plans")
		return
	}
	var req struct {
		Return bool `json:"return"`
	}
	if r.ContentLength != 0 {
		if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, &req); err != nil {
			computeapi.WriteError(w, http.StatusBadRequest, `give {"return": true|false} or no body`)
			return
		}
	}
	p, err := k.plans.Undrain(r.Context(), r.PathValue("host"), req.Return)
	if err != nil {
		k.planError(w, err)
		return
	}
	out := map[string]any{"host": r.PathValue("host"), "enabled": true}
	if p.ID != 0 {
		out["plan"] = k.view(p)
	}
	writeJSON(w, http.StatusOK, out)
}

// planError answers a plan request's error: 404 for a missing plan, 409
// for a refusal (a state the plan is not in, a drain that cannot fit),
// 500 otherwise.
func (k *keelAPI) planError(w http.ResponseWriter, err error) {
	var cerr *conductor.CapacityError
	var bad *conductor.BadRequestError
	switch {
	case errors.As(err, &bad):
		computeapi.WriteError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, store.ErrNotFound):
		computeapi.WriteError(w, http.StatusNotFound, err.Error())
	case errors.As(err, &cerr):
		writeJSON(w, http.StatusConflict, map[string]any{
			"conflictingRequest": map[string]any{"message": err.Error(), "code": http.StatusConflict},
			"capacity":           cerr,
		})
	case isInvalidState(err):
		computeapi.WriteError(w, http.StatusConflict, err.Error())
	default:
		computeapi.WriteError(w, http.StatusInternalServerError, fmt.Sprintf("plans: %v", err))
	}
}
