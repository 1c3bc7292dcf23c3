package computeapi

import (
	"net/http"
	"slices"

	"keel/internal/records"
)

// instanceActions loads the actions of server id for the caller: the
// server must be visible to them, or (from 2.21) be deleted with actions
// from the caller's project, as Nova lets users see a deleted server's
// actions.
func (a *instanceActionsAPI) instanceActions(r *http.Request) ([]records.InstanceAction, error) {
	id := r.PathValue("id")
	_, err := a.instance(r, id)
	if err != nil && statusOf(err) != http.StatusNotFound {
		return nil, err
	}
	acts, lerr := a.store.ListInstanceActions(r.Context(), id)
	if lerr != nil {
		return nil, lerr
	}
	if err != nil {
		// Deleted (or never there): visible from 2.21 to an admin or the
		// project that created it.
		c := caller(r)
		if !version(r).AtLeast(21) || len(acts) == 0 || (!c.Admin && acts[0].ProjectID != c.ProjectID) {
			return nil, err
		}
	}
	return acts, nil
}

// actionView renders an action; a live migration's outcome comes from its
// migration record, so the action says how the migration ended.
func (a *instanceActionsAPI) actionView(r *http.Request, act records.InstanceAction, withEvents bool) map[string]any {
	var msg any
	if act.Message != "" {
		msg = act.Message
	}
	updated := act.StartTime
	var events []any
	if act.MigrationID != 0 {
		ev := map[string]any{"event": "compute_live_migration", "start_time": migrationTime(act.StartTime),
			"finish_time": nil, "result": nil}
		if m, err := a.store.GetMigration(r.Context(), act.MigrationID); err == nil {
			if records.MigrationTerminal(m.Status) {
				ev["finish_time"] = migrationTime(m.UpdatedAt)
				updated = m.UpdatedAt
				ev["result"] = "Success"
				if m.Status != records.MigrationCompleted {
					ev["result"] = "Error"
					if m.Error != "" {
						msg = m.Error
					}
				}
			}
			if caller(r).Admin {
				ev["traceback"] = nil
			}
			if version(r).AtLeast(62) {
				ev["hostId"] = hostID(records.Instance{ProjectID: act.ProjectID, Host: m.SourceHost})
				if caller(r).Admin {
					ev["host"] = m.SourceHost
				}
			}
		}
		events = append(events, ev)
	}
	if act.Action == "create" && act.MigrationID == 0 {
		// A create's outcome is its server's: building, active, or in
		// error with the fault as the reason (nothing once it is deleted).
		// keel does not record when a build ended, so a finished one shows
		// the server's creation time, as its launched_at does.
		if in, err := a.store.GetInstance(r.Context(), act.InstanceUUID); err == nil {
			ev := map[string]any{"event": "compute_build_and_run_instance", "start_time": migrationTime(act.StartTime),
				"finish_time": nil, "result": nil}
			switch in.VMState {
			case records.VMError:
				ev["finish_time"], ev["result"] = migrationTime(in.UpdatedAt), "Error"
				if msg == nil && in.Fault != "" {
					msg = in.Fault
				}
			case records.VMBuilding:
			default:
				ev["finish_time"], ev["result"] = migrationTime(in.CreatedAt), "Success"
			}
			if caller(r).Admin {
				ev["traceback"] = nil
			}
			if version(r).AtLeast(62) {
				ev["hostId"] = hostID(in)
				if caller(r).Admin {
					ev["host"] = in.Host
				}
			}
			events = append(events, ev)
		}
	}
	v := map[string]any{
		"action": act.Action, "instance_uuid": act.InstanceUUID, "request_id": act.RequestID,
		"user_id": act.UserID, "project_id": act.ProjectID, "start_time": migrationTime(act.StartTime), "message": msg,
	}
	if version(r).AtLeast(58) {
		v["updated_at"] = migrationTime(updated)
	}
	if withEvents {
		if events == nil {
			events = []any{}
		}
		v["events"] = events
	}
	return v
}

// listInstanceActions is GET /servers/{id}/os-instance-actions, newest
// first.
func (a *instanceActionsAPI) listInstanceActions(w http.ResponseWriter, r *http.Request) error {
	// 2.58 changes-since, 2.66 changes-before: checked as Nova checks
	// them (keel lists every action of a server: a handful).
	if _, _, err := changesWindow(r, 58, 66); err != nil {
		return err
	}
	acts, err := a.instanceActions(r)
	if err != nil {
		return err
	}
	out := make([]any, 0, len(acts))
	for _, act := range slices.Backward(acts) {
		out = append(out, a.actionView(r, act, false))
	}
	writeJSON(w, http.StatusOK, map[string]any{"instanceActions": out})
	return nil
}

// showInstanceAction is GET /servers/{id}/os-instance-actions/{request_id}.
func (a *instanceActionsAPI) showInstanceAction(w http.ResponseWriter, r *http.Request) error {
	acts, err := a.instanceActions(r)
	if err != nil {
		return err
	}
	rid := r.PathValue("rid")
	for _, act := range acts {
		if act.RequestID == rid {
			writeJSON(w, http.StatusOK, map[string]any{"instanceAction": a.actionView(r, act, true)})
			return nil
		}
	}
	return notFoundf("Action %s could not be found.", rid)
}
