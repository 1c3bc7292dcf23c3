package computeapi

import (
	"net/http"
	"strings"

	"keel/internal/records"
)

// resetState is the admin's os-resetState: it parses the state (active or
// error), has the conductor reset the instance and put its allocations
// right (Conductor.ResetState; a refusal there is a 409), and records a
// reset-state instance action whose message says what was corrected.
func (a *serverActionsAPI) resetState(w http.ResponseWriter, r *http.Request, in records.Instance, raw jsonRaw) error {
	if !caller(r).Admin {
		return forbidden("os_compute_api:os-admin-actions:reset_state")
	}
	var args struct {
		State string `json:"state"`
	}
	if err := unmarshalRaw(raw, &args); err != nil {
		return badRequest("Invalid input for os-resetState: " + err.Error())
	}
	state := map[string]records.VMState{"active": records.VMActive, "error": records.VMError}[args.State]
	if state == "" {
		return badRequest("Invalid input for field/attribute state. Value: " + args.State + ". '" + args.State + "' is not one of ['active', 'error']")
	}
	fixed, err := a.conductor.ResetState(r.Context(), in.UUID, state)
	if err != nil {
		if isNotFound(err) {
			return notFoundf("Instance %s could not be found.", in.UUID)
		}
		return err
	}
	msg := "state " + args.State
	if len(fixed) > 0 {
		msg += "; allocations put right: " + strings.Join(fixed, "; ")
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: "reset-state", Message: msg})
	w.WriteHeader(http.StatusAccepted)
	return nil
}
