package computeapi

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"keel/internal/lifecycle"
	"keel/internal/records"
)

// lifecycleAction is one server action of the lifecycle family: its
// request key, the lifecycle action it runs and the policy an owner
// needs (admin: only admins may).
type lifecycleAction struct {
	action string
	admin  bool
	policy string
}

// lifecycleActions are the action keys serverAction hands to
// lifecycleAct.
var lifecycleActions = map[string]lifecycleAction{
	"os-stop":       {lifecycle.Stop, false, "os_compute_api:servers:stop"},
	"os-start":      {lifecycle.Start, false, "os_compute_api:servers:start"},
	"reboot":        {lifecycle.Reboot, false, "os_compute_api:servers:reboot"},
	"pause":         {lifecycle.Pause, false, "os_compute_api:os-pause-server:pause"},
	"unpause":       {lifecycle.Unpause, false, "os_compute_api:os-pause-server:unpause"},
	"suspend":       {lifecycle.Suspend, false, "os_compute_api:os-suspend-server:suspend"},
	"resume":        {lifecycle.Resume, false, "os_compute_api:os-suspend-server:resume"},
	"rescue":        {lifecycle.Rescue, false, "os_compute_api:os-rescue"},
	"unrescue":      {lifecycle.Unrescue, false, "os_compute_api:os-unrescue"},
	"rebuild":       {lifecycle.Rebuild, false, "os_compute_api:servers:rebuild"},
	"shelve":        {lifecycle.Shelve, false, "os_compute_api:os-shelve:shelve"},
	"shelveOffload": {lifecycle.ShelveOffload, true, "os_compute_api:os-shelve:shelve_offload"},
	"unshelve":      {lifecycle.Unshelve, false, "os_compute_api:os-shelve:unshelve"},
	"lock":          {lifecycle.Lock, false, "os_compute_api:os-lock-server:lock"},
	"unlock":        {lifecycle.Unlock, false, "os_compute_api:os-lock-server:unlock"},
}

// lifecycleAct runs a lifecycle action (see package lifecycle): it
// decodes the action's body as Nova's schema has it, asks the conductor,
// records the instance action and answers 202 (rescue: 200 with the
// admin password; rebuild: 202 with the server). The action goes on
// after the answer; the server's task_state shows it until it ends.
func (a *serverActionsAPI) lifecycleAct(w http.ResponseWriter, r *http.Request, in records.Instance, key string, raw jsonRaw) error {
	la := lifecycleActions[key]
	c := caller(r)
	if la.admin && !c.Admin {
		return forbidden(la.policy)
	}
	req := lifecycle.Request{Action: la.action, Admin: c.Admin}
	edits, answer, err := a.lifecycleArgs(r, in, key, raw, &req)
	if err != nil {
		return err
	}
	if key == "shelve" && a.images != nil {
		// As Nova's: the shelve writes a snapshot, '<name>-shelved',
		// which the unshelve boots from and then deletes.
		im, err := a.snapshotImage(in, in.Name+"-shelved", c.UserID, false, snapshotArgs{})
		if err != nil {
			return err
		}
		req.Snapshot = &records.Snapshot{ImageID: im.ID}
	}
	saved, _, err := a.conductor.Act(r.Context(), in.UUID, req, edits...)
	if err != nil && req.Snapshot != nil {
		_ = a.images.Delete(req.Snapshot.ImageID)
	}
	if err != nil {
		// A refused unlock answers with the refusal's own message.
		if re := refusal(nil); errors.As(err, &re) && re.HTTPStatus() == http.StatusForbidden {
			return &apiError{http.StatusForbidden, re.Error()}
		}
		return err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: la.action})
	if key == "rebuild" {
		a.writeRebuilt(w, r, saved)
		return nil
	}
	if answer != nil {
		writeJSON(w, http.StatusOK, answer)
		return nil
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// lifecycleArgs decodes and checks an action's arguments as Nova's
// schemas do, filling req; edits are what the action changes on the
// record with it (an unshelve's zone, a rebuild's image and more), answer
// the body of an action that answers 200 with one (rescue's adminPass).
func (a *serverActionsAPI) lifecycleArgs(r *http.Request, in records.Instance, key string, raw jsonRaw, req *lifecycle.Request) (edits []func(*records.Instance), answer any, err error) {
	switch key {
	case "reboot":
		var args struct {
			Type *string `json:"type"`
		}
		if err := strictArgs(raw, &args, "reboot"); err != nil {
			return nil, nil, err
		}
		if args.Type == nil {
			return nil, nil, badRequest("Invalid input for field/attribute reboot. Value: " + string(raw) + ". 'type' is a required property")
		}
		t := strings.ToUpper(*args.Type)
		if t != "SOFT" && t != "HARD" || *args.Type != t && *args.Type != strings.ToLower(t) && *args.Type != t[:1]+strings.ToLower(t[1:]) {
			return nil, nil, badRequest("Invalid input for field/attribute type. Value: " + *args.Type + ". '" + *args.Type + "' is not one of ['HARD', 'Hard', 'hard', 'SOFT', 'Soft', 'soft']")
		}
		req.RebootType = t
	case "lock":
		var args struct {
			Reason *string `json:"locked_reason"`
		}
		if len(raw) > 0 && string(raw) != "null" {
			if !version(r).AtLeast(73) {
				if string(raw) != "{}" {
					return nil, nil, badRequest("Invalid input for field/attribute lock. Value: " + string(raw) + ". Additional properties are not allowed")
				}
			} else if err := strictArgs(raw, &args, "lock"); err != nil {
				return nil, nil, err
			}
		}
		if args.Reason != nil {
			if len(*args.Reason) > 255 {
				return nil, nil, badRequest("Invalid input for field/attribute locked_reason: longer than 255 characters")
			}
			req.Reason = *args.Reason
		}
	case "rescue":
		var args struct {
			AdminPass *string `json:"adminPass"`
			Image     *string `json:"rescue_image_ref"`
		}
		if err := strictArgs(raw, &args, "rescue"); err != nil {
			return nil, nil, err
		}
		rs, err := a.rescueDisk(r, in, args.Image)
		if err != nil {
			return nil, nil, err
		}
		req.Rescue = rs
		pass := newPassword()
		if args.AdminPass != nil {
			pass = *args.AdminPass
		}
		answer = map[string]any{"adminPass": pass}
	case "unshelve":
		edit, err := a.unshelveArgs(r, in, raw)
		if err != nil {
			return nil, nil, err
		}
		edits = append(edits, edit)
	case "rebuild":
		edit, err := a.rebuildArgs(r, in, raw)
		if err != nil {
			return nil, nil, err
		}
		edits = append(edits, edit)
	default:
		// os-stop, pause, …: null (or an empty object) as Nova's schema.
		if len(raw) > 0 && string(raw) != "null" && string(raw) != "{}" {
			var v map[string]any
			if json.Unmarshal(raw, &v) != nil {
				return nil, nil, badRequest("Invalid input for field/attribute " + key + ". Value: " + string(raw) + ". Expected null")
			}
		}
	}
	return edits, answer, nil
}

// writeRebuilt answers a rebuild as Nova's does: with the update's view
// (the whole server from 2.75), user_data from 2.57.
func (a *serverActionsAPI) writeRebuilt(w http.ResponseWriter, r *http.Request, saved records.Instance) {
	view := a.serverView(r, saved, viewUpdate)
	if version(r).AtLeast(57) {
		view["user_data"] = nil
	}
	delete(view, "OS-EXT-SRV-ATTR:user_data") // the rebuild's own user_data instead
	if version(r).AtLeast(54) {
		view["key_name"] = nil
		if saved.KeyName != "" {
			view["key_name"] = saved.KeyName
		}
	}
	view["adminPass"] = newPassword()
	writeJSON(w, http.StatusAccepted, map[string]any{"server": view})
}

// strictArgs decodes an action's object, refusing unknown fields with
// Nova's 400.
func strictArgs(raw jsonRaw, v any, action string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("Invalid input for field/attribute " + action + ". Value: " + string(raw) + ". " + err.Error())
	}
	return nil
}

// rebuildArgs reads rebuild's body: imageRef (required, an image that
// fits in's flavor) and what a rebuild may change besides (name,
// metadata, access addresses, disk config, description from 2.19).
func (a *serverActionsAPI) rebuildArgs(r *http.Request, in records.Instance, raw jsonRaw) (func(*records.Instance), error) {
	var sb serverBody
	if err := json.Unmarshal(raw, &sb); err != nil || sb == nil {
		return nil, badRequest("Invalid input for field/attribute rebuild. Value: " + string(raw) + ". 'imageRef' is a required property")
	}
	for k := range sb {
		switch k {
		case "imageRef", "name", "adminPass", "metadata", "accessIPv4", "accessIPv6", "OS-DCF:diskConfig", "preserve_ephemeral", "personality":
		case "description":
		case "key_name":
			if !version(r).AtLeast(54) {
				return nil, badRequest("Invalid input for field/attribute rebuild. Additional properties are not allowed ('key_name' was unexpected)")
			}
		case "trusted_image_certificates": // read below, from 2.63
		case "user_data":
		case "hostname":
			if version(r).AtLeast(90) {
				break
			}
			fallthrough
		default:
			return nil, badRequest("Invalid input for field/attribute rebuild. Additional properties are not allowed ('" + k + "' was unexpected)")
		}
	}
	ref, ok, err := sb.stringField("imageRef")
	if err != nil {
		return nil, err
	}
	if !ok || ref == "" {
		return nil, badRequest("Invalid input for field/attribute rebuild. Value: " + string(raw) + ". 'imageRef' is a required property")
	}
	image := ref[strings.LastIndex(ref, "/")+1:]
	im, ok := bootImage(r.Context(), a.image, image)
	if !ok {
		return nil, badRequest("Cannot find requested image " + ref)
	}
	if err := checkImageFits(im, in.Flavor); err != nil {
		return nil, err
	}
	var tmp records.Instance
	name, hasName, err := sb.stringField("name")
	if err != nil {
		return nil, err
	}
	if hasName {
		if err := checkName(name); err != nil {
			return nil, err
		}
	}
	var meta map[string]string
	_, hasMeta := sb["metadata"]
	if hasMeta {
		if meta, err = decodeMetadata(sb["metadata"]); err != nil {
			return nil, err
		}
	}
	if err := sb.accessIPs(&tmp); err != nil {
		return nil, err
	}
	if err := sb.diskConfig(&tmp); err != nil {
		return nil, err
	}
	if err := sb.description(version(r), &tmp); err != nil {
		return nil, err
	}
	// trusted_image_certificates (2.63): the list replaces the server's,
	// null takes them away.
	if err := sb.trustedCerts(version(r), "rebuild", &tmp); err != nil {
		return nil, err
	}
	_, hasCerts := sb["trusted_image_certificates"]
	// key_name (2.54): the caller's key pair replaces the server's, null
	// takes it away.
	rawKey, hasKey := sb["key_name"]
	var kp records.KeyPair
	if hasKey && string(rawKey) != "null" {
		var k string
		if err := json.Unmarshal(rawKey, &k); err != nil {
			return nil, badRequest("Invalid input for field/attribute key_name. Value: " + string(rawKey) + ". It is not of type 'string', 'null'")
		}
		if kp, err = a.store.GetKeyPair(r.Context(), caller(r).UserID, k); isNotFound(err) {
			return nil, badRequest("Invalid key_name provided.")
		} else if err != nil {
			return nil, err
		}
	}
	hostname, hasHostname, err := sb.hostnameField()
	if err != nil {
		return nil, err
	}
	_, hasV4 := sb["accessIPv4"]
	_, hasV6 := sb["accessIPv6"]
	_, hasDesc := sb["description"]
	return func(in *records.Instance) {
		in.ImageRef = image
		if hasName {
			in.Name = name
		}
		if hasHostname {
			in.Hostname = hostname
		}
		if hasMeta {
			in.Metadata = meta
		}
		if hasV4 {
			in.AccessIPv4 = tmp.AccessIPv4
		}
		if hasV6 {
			in.AccessIPv6 = tmp.AccessIPv6
		}
		if tmp.DiskConfig != "" {
			in.DiskConfig = tmp.DiskConfig
		}
		if hasDesc {
			in.Description = tmp.Description
		}
		if hasKey {
			in.KeyName, in.KeyData = kp.Name, kp.PublicKey
		}
		if hasCerts {
			in.TrustedCerts = tmp.TrustedCerts
		}
	}, nil
}

// newPassword is a random admin password (keel's guests take none; Nova
// answers with one).
func newPassword() string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// lifecycleStatus is Nova's server status for the lifecycle states
// (serverStatus covers the others).
func lifecycleStatus(in records.Instance) (string, bool) {
	switch in.VMState {
	case records.VMStopped:
		if in.TaskState == records.TaskRebuilding {
			return "REBUILD", true
		}
		if in.TaskState == records.TaskRebootingHard {
			return "HARD_REBOOT", true
		}
		if in.TaskState == records.TaskResizePrep {
			return "RESIZE", true // a stopped server's cold move
		}
		return "SHUTOFF", true
	case records.VMPaused:
		if in.TaskState == records.TaskMigrating {
			return "MIGRATING", true
		}
		if in.TaskState == records.TaskRebootingHard {
			return "HARD_REBOOT", true
		}
		return "PAUSED", true
	case records.VMSuspended:
		if in.TaskState == records.TaskRebootingHard {
			return "HARD_REBOOT", true
		}
		return "SUSPENDED", true
	case records.VMRescued:
		return "RESCUE", true
	case records.VMShelved:
		return "SHELVED", true
	case records.VMShelvedOffloaded:
		return "SHELVED_OFFLOADED", true
	case records.VMError:
		if in.TaskState == records.TaskRebuilding {
			return "REBUILD", true
		}
	case records.VMActive:
		switch in.TaskState {
		case records.TaskRebooting:
			return "REBOOT", true
		case records.TaskRebootingHard:
			return "HARD_REBOOT", true
		case records.TaskRebuilding:
			return "REBUILD", true
		}
	}
	return "", false
}

// checkLocked refuses a non-admin's request on a locked server (Nova's
// InstanceIsLocked, 409).
func checkLocked(r *http.Request, in records.Instance) error {
	if err := lifecycle.CheckLock(in, caller(r).Admin); err != nil {
		return conflict(err.Error())
	}
	return nil
}
