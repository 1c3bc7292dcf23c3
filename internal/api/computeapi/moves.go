package computeapi

import (
	"net/http"
	"strconv"

	"keel/internal/placement"
	"keel/internal/records"
)

// moveAction answers the cold moves' server actions: migrate (admin; a
// host from 2.56), resize (the server's owner), confirmResize and
// revertResize. It reports false for any other action.
func (a *serverActionsAPI) moveAction(w http.ResponseWriter, r *http.Request, in records.Instance, body map[string]jsonRaw) (bool, error) {
	var (
		m      records.Migration
		err    error
		action string
	)
	switch {
	case body["migrate"] != nil:
		if !caller(r).Admin {
			return true, forbidden("os_compute_api:os-migrate-server:migrate")
		}
		var args struct {
			Host *string `json:"host"`
		}
		if raw := body["migrate"]; string(raw) != "null" {
			if err := unmarshalRaw(raw, &args); err != nil {
				return true, badRequest("Invalid input for migrate: " + err.Error())
			}
			if version(r).AtLeast(56) {
				if err := strictArgs(raw, &args, "migrate"); err != nil {
					return true, err
				}
			}
		}
		host := ""
		if args.Host != nil {
			if !version(r).AtLeast(56) {
				return true, badRequest("Invalid input for field/attribute migrate. Value: host. Additional properties are not allowed ('host' was unexpected)")
			}
			host = *args.Host
			if _, err := a.store.GetService(r.Context(), host); err != nil {
				if isNotFound(err) {
					return true, badRequest("Compute host " + host + " could not be found.")
				}
				return true, err
			}
		}
		action = "migrate"
		m, err = a.conductor.StartColdMigration(r.Context(), in.UUID, host)
	case body["resize"] != nil:
		var args struct {
			FlavorRef  any     `json:"flavorRef"`
			DiskConfig *string `json:"OS-DCF:diskConfig"`
		}
		if err := unmarshalRaw(body["resize"], &args); err != nil {
			return true, badRequest("Invalid input for resize: " + err.Error())
		}
		ref, ok := flavorRefString(args.FlavorRef)
		if !ok {
			return true, badRequest("Invalid input for field/attribute flavorRef. Value: None. None is not of type 'string', 'integer'")
		}
		if d := args.DiskConfig; d != nil && *d != "AUTO" && *d != "MANUAL" {
			return true, badRequest("Invalid input for field/attribute OS-DCF:diskConfig. Value: " + *d + ". '" + *d + "' is not one of ['AUTO', 'MANUAL']")
		}
		f, ferr := a.flavor(r, ref)
		if ferr != nil {
			if statusOf(ferr) == http.StatusNotFound {
				return true, badRequest("Unable to find flavor " + ref + ".")
			}
			return true, ferr
		}
		if herr := placement.HardwareSpecs(f.VCPUs, f.ExtraSpecs); herr != nil {
			return true, badRequest(herr.Error())
		}
		if qerr := a.checkResizeQuota(r.Context(), in, f); qerr != nil {
			return true, qerr
		}
		if ierr := a.checkResizeImage(in, f); ierr != nil {
			return true, ierr
		}
		var edits []func(*records.Instance)
		if d := args.DiskConfig; d != nil {
			// The resized server's disk config, as Nova takes it from the
			// resize request (the fake and QEMU guests' disks are copied
			// whole either way), saved with the resize's start: a refused
			// resize changes nothing.
			edits = append(edits, func(in *records.Instance) { in.DiskConfig = *d })
		}
		action = "resize"
		m, err = a.conductor.StartResize(r.Context(), in.UUID, f, edits...)
	case body["evacuate"] != nil:
		return true, a.evacuate(w, r, in, body["evacuate"])
	case body["confirmResize"] != nil:
		action, err = "confirmResize", a.conductor.ConfirmResize(r.Context(), in.UUID)
	case body["revertResize"] != nil:
		action, err = "revertResize", a.conductor.RevertResize(r.Context(), in.UUID)
	default:
		return false, nil
	}
	if err != nil {
		return true, err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: action, MigrationID: m.ID})
	if action == "confirmResize" {
		w.WriteHeader(http.StatusNoContent)
		return true, nil
	}
	w.WriteHeader(http.StatusAccepted)
	return true, nil
}

// flavorRefString reads a flavorRef given as a string or a number.
func flavorRefString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, x != ""
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	}
	return "", false
}

// evacuate is the admin's evacuate action: the instance of a host that is
// down is rebuilt elsewhere (host optional; force at 2.29–2.67, accepted
// and ignored as the claim is checked anyway; onSharedStorage before
// 2.14). It answers 200, with the adminPass given before 2.14.
func (a *serverActionsAPI) evacuate(w http.ResponseWriter, r *http.Request, in records.Instance, raw jsonRaw) error {
	if !caller(r).Admin {
		return forbidden("os_compute_api:os-evacuate")
	}
	var args map[string]any
	if err := unmarshalRaw(raw, &args); err != nil {
		return badRequest("Invalid input for evacuate: " + err.Error())
	}
	allowed := map[string]bool{"host": true, "adminPass": true}
	if !version(r).AtLeast(14) {
		allowed["onSharedStorage"] = true
	}
	if version(r).AtLeast(29) && !version(r).AtLeast(68) {
		allowed["force"] = true
	}
	for k := range args {
		if !allowed[k] {
			return badRequest("Invalid input for field/attribute evacuate. Additional properties are not allowed ('" + k + "' was unexpected)")
		}
	}
	host, _ := args["host"].(string)
	if host != "" {
		if _, err := a.store.GetService(r.Context(), host); err != nil {
			if isNotFound(err) {
				return notFoundf("Compute host %s could not be found.", host)
			}
			return err
		}
	}
	m, err := a.conductor.StartEvacuation(r.Context(), in.UUID, host)
	if err != nil {
		return err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: "evacuate", MigrationID: m.ID})
	if !version(r).AtLeast(14) {
		pass, _ := args["adminPass"].(string)
		writeJSON(w, http.StatusOK, map[string]any{"adminPass": pass})
		return nil
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
