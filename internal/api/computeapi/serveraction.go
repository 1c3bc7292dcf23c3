package computeapi

import (
	"net/http"

	"keel/internal/records"
)

// serverActions are the server actions keel implements; Nova's others
// (addSecurityGroup, …) are refused as unknown. restore is
// known (a 404 for a server that does not exist) though it never
// succeeds: keel deletes at once (see restoreServer).
var serverActions = func() map[string]bool {
	m := map[string]bool{"os-migrateLive": true, "migrate": true, "resize": true, "confirmResize": true,
		"revertResize": true, "evacuate": true, "os-resetState": true,
		"os-getConsoleOutput": true, "forceDelete": true, "restore": true,
		"createImage": true, "createBackup": true}
	for k := range lifecycleActions {
		m[k] = true
	}
	for k := range networkActions {
		m[k] = true
	}
	return m
}()

// serverAction handles POST /servers/{id}/action. As in Nova's dispatch,
// an action keel does not know is a 400 before the server is looked up;
// a known action on an unknown server is a 404.
func (a *serverActionsAPI) serverAction(w http.ResponseWriter, r *http.Request) error {
	var body map[string]jsonRaw
	if err := decode(r, &body); err != nil {
		return err
	}
	if err := knownAction(body, serverActions); err != nil {
		return err
	}
	if _, ok := body["resetNetwork"]; ok {
		return errGone // before the lookup, as Nova's
	}
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, ok := body["injectNetworkInfo"]; ok {
		return a.injectNetworkInfo(w, r, in)
	}
	if raw, ok := body["os-resetState"]; ok {
		return a.resetState(w, r, in, raw)
	}
	if raw, ok := body["os-getConsoleOutput"]; ok {
		return a.consoleOutput(w, r, in, raw)
	}
	if _, ok := body["forceDelete"]; ok {
		return a.forceDelete(w, r, in)
	}
	if _, ok := body["restore"]; ok {
		return a.restoreServer(r, in)
	}
	for _, act := range []string{"createImage", "createBackup"} {
		if raw, ok := body[act]; ok {
			return a.snapshot(w, r, in, act, raw)
		}
	}
	if handled, err := a.moveAction(w, r, in, body); handled {
		return err
	}
	for key, raw := range body {
		if _, ok := lifecycleActions[key]; ok && len(body) == 1 {
			return a.lifecycleAct(w, r, in, key, raw)
		}
	}
	raw := body["os-migrateLive"]
	if !caller(r).Admin {
		return forbidden("os_compute_api:os-migrate-server:migrate_live")
	}
	args, err := liveMigrateArgs(raw, version(r))
	if err != nil {
		return err
	}
	host := ""
	if args.Host != nil {
		host = *args.Host
		if _, err := a.store.GetService(r.Context(), host); err != nil {
			if isNotFound(err) {
				return badRequest("Compute host " + host + " could not be found.")
			}
			return err
		}
	}
	// From 2.34 the pre-checks are asynchronous (Nova's): the answer comes
	// once the store has the migration and its claim, and the checks'
	// outcome is reported on the migration record and the instance action.
	// Before 2.34 they were synchronous: a migration that ended in error
	// at once is a 400 with its reason.
	start := a.conductor.LiveMigrate
	if version(r).AtLeast(34) {
		start = a.conductor.StartLiveMigration
	}
	m, err := start(r.Context(), in.UUID, host)
	if err != nil {
		return err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: "live-migration", MigrationID: m.ID})
	if !version(r).AtLeast(34) && m.Status == records.MigrationError {
		return badRequest(m.Error)
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}
