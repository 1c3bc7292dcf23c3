package compute

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"keel/internal/records"
)

// serverStatus is Nova's status for a vm_state and task_state.
func serverStatus(in records.Instance) string {
	switch in.VMState {
	case records.VMBuilding:
		return "BUILD"
	case records.VMError:
		return "ERROR"
	case records.VMDeleted:
		return "DELETED"
	}
	if in.TaskState == records.TaskMigrating {
		return "MIGRATING"
	}
	return "ACTIVE"
}

// hostID is Nova's opaque per-project host hash.
func hostID(in records.Instance) string {
	if in.Host == "" {
		return ""
	}
	sum := sha256.Sum224([]byte(in.ProjectID + in.Host))
	return hex.EncodeToString(sum[:])
}

func (a *API) serverView(r *http.Request, in records.Instance, detail bool) map[string]any {
	v := map[string]any{"id": in.UUID, "name": in.Name, "links": a.link("servers", in.UUID)}
	if !detail {
		return v
	}
	var task any
	if in.TaskState != "" {
		task = in.TaskState
	}
	power := 1 // RUNNING
	if in.VMState != records.VMActive {
		power = 0
	}
	v["status"] = serverStatus(in)
	v["tenant_id"], v["user_id"] = in.ProjectID, in.UserID
	v["metadata"] = map[string]string{}
	v["hostId"] = hostID(in)
	v["image"] = ""
	if in.ImageRef != "" {
		v["image"] = map[string]any{"id": in.ImageRef, "links": a.link("images", in.ImageRef)[1:]}
	}
	v["created"], v["updated"] = timeStr(in.CreatedAt), timeStr(in.UpdatedAt)
	v["addresses"] = map[string]any{}
	v["accessIPv4"], v["accessIPv6"] = "", ""
	v["OS-DCF:diskConfig"] = "MANUAL"
	v["progress"] = 0
	v["OS-EXT-AZ:availability_zone"] = in.Zone
	v["config_drive"] = ""
	v["key_name"] = nil
	v["OS-SRV-USG:launched_at"], v["OS-SRV-USG:terminated_at"] = nil, nil
	if in.VMState == records.VMActive {
		v["OS-SRV-USG:launched_at"] = strings.TrimSuffix(fmt.Sprint(timeStr(in.CreatedAt)), "Z") + ".000000"
	}
	v["OS-EXT-STS:vm_state"], v["OS-EXT-STS:task_state"], v["OS-EXT-STS:power_state"] = in.VMState, task, power
	v["os-extended-volumes:volumes_attached"] = []any{}
	v["security_groups"] = []map[string]string{{"name": "default"}}
	if version(r).AtLeast(47) {
		specs := in.Flavor.ExtraSpecs
		if specs == nil {
			specs = map[string]string{}
		}
		v["flavor"] = map[string]any{"vcpus": in.Flavor.VCPUs, "ram": in.Flavor.RAMMB, "disk": in.Flavor.DiskGB,
			"ephemeral": 0, "swap": 0, "original_name": in.Flavor.Name, "extra_specs": specs}
	} else {
		v["flavor"] = map[string]any{"id": in.Flavor.ID, "links": a.link("flavors", in.Flavor.ID)}
	}
	if caller(r).Admin {
		var host any
		if in.Host != "" {
			host = in.Host
		}
		v["OS-EXT-SRV-ATTR:host"], v["OS-EXT-SRV-ATTR:hypervisor_hostname"] = host, host
		v["OS-EXT-SRV-ATTR:instance_name"] = "instance-" + in.UUID[:8]
	}
	if in.VMState == records.VMError && in.Fault != "" {
		v["fault"] = map[string]any{"code": 500, "message": in.Fault, "created": timeStr(in.UpdatedAt)}
	}
	return v
}

func (a *API) createServer(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Server *struct {
			Name      string `json:"name"`
			FlavorRef any    `json:"flavorRef"`
			ImageRef  string `json:"imageRef"`
			Networks  any    `json:"networks"`
			Zone      string `json:"availability_zone"`
		} `json:"server"`
		Hints    jsonRaw `json:"os:scheduler_hints"`
		OldHints jsonRaw `json:"OS-SCH-HNT:scheduler_hints"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	sb := body.Server
	if sb == nil {
		return badRequest("Invalid input for field/attribute server: 'server' is a required property")
	}
	if strings.TrimSpace(sb.Name) == "" {
		return badRequest("Invalid input for field/attribute name: 'name' is a required property and may not be blank")
	}
	ref := fmt.Sprint(sb.FlavorRef)
	if sb.FlavorRef == nil || ref == "" {
		return badRequest("Invalid input for field/attribute flavorRef: 'flavorRef' is a required property")
	}
	// flavorRef may be an id or a link ending in the id.
	ref = ref[strings.LastIndex(ref, "/")+1:]
	f, err := a.flavor(r, ref)
	if err != nil {
		if isNotFound(err) || statusOf(err) == http.StatusNotFound {
			return badRequest("Flavor " + ref + " could not be found.")
		}
		return err
	}
	c := caller(r)
	// "zone:host" (admin only, as in Nova) forces the host.
	zone, host, forced := strings.Cut(sb.Zone, ":")
	if forced && !c.Admin {
		return forbidden("os_compute_api:servers:create:forced_host")
	}
	if zone == "" {
		zone = "nova"
	}
	image := sb.ImageRef[strings.LastIndex(sb.ImageRef, "/")+1:]
	in := records.Instance{Name: sb.Name, ProjectID: c.ProjectID, UserID: c.UserID, Flavor: f, Zone: zone, ImageRef: image}
	hints := body.Hints
	if hints == nil {
		hints = body.OldHints
	}
	if in.Hints, err = a.schedulerHints(r, hints); err != nil {
		return err
	}
	if forced {
		in.Zone = zone
		in, err = a.cfg.Conductor.BootOn(r.Context(), in, host)
	} else {
		if sb.Zone == "" {
			in.Zone = ""
		}
		in, err = a.cfg.Conductor.Boot(r.Context(), in)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"server": map[string]any{
		"id": in.UUID, "links": a.link("servers", in.UUID), "OS-DCF:diskConfig": "MANUAL",
		"security_groups": []map[string]string{{"name": "default"}}, "adminPass": "",
	}})
	return nil
}

func (a *API) listServers(detail bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		ins, err := a.cfg.Store.ListInstances(r.Context(), "")
		if err != nil {
			return err
		}
		c := caller(r)
		q := r.URL.Query()
		all := c.Admin && (q.Get("all_tenants") == "1" || strings.EqualFold(q.Get("all_tenants"), "true"))
		host := q.Get("host")
		out := []any{}
		for _, in := range ins {
			if !all && in.ProjectID != c.ProjectID {
				continue
			}
			if host != "" && in.Host != host {
				continue
			}
			if s := q.Get("status"); s != "" && !strings.EqualFold(s, serverStatus(in)) {
				continue
			}
			out = append(out, a.serverView(r, in, detail))
		}
		writeJSON(w, http.StatusOK, map[string]any{"servers": out})
		return nil
	}
}

// instance loads a server the caller may see (its project's, or any for
// an admin).
func (a *API) instance(r *http.Request, id string) (records.Instance, error) {
	in, err := a.cfg.Store.GetInstance(r.Context(), id)
	c := caller(r)
	if isNotFound(err) || (err == nil && !c.Admin && in.ProjectID != c.ProjectID) {
		return records.Instance{}, notFoundf("Instance %s could not be found.", id)
	}
	return in, err
}

func (a *API) showServer(w http.ResponseWriter, r *http.Request) error {
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": a.serverView(r, in, true)})
	return nil
}

func (a *API) deleteServer(w http.ResponseWriter, r *http.Request) error {
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := a.cfg.Conductor.Delete(r.Context(), in.UUID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// serverAction handles POST /servers/{id}/action; keel implements
// os-migrateLive.
func (a *API) serverAction(w http.ResponseWriter, r *http.Request) error {
	var body map[string]jsonRaw
	if err := decode(r, &body); err != nil {
		return err
	}
	raw, ok := body["os-migrateLive"]
	if !ok {
		for k := range body {
			return badRequest("Action " + k + " is not supported by keel (supported: os-migrateLive)")
		}
		return badRequest("Malformed request body: no action given")
	}
	if !caller(r).Admin {
		return forbidden("os_compute_api:os-migrate-server:migrate_live")
	}
	var args struct {
		Host *string `json:"host"`
	}
	if err := unmarshalRaw(raw, &args); err != nil {
		return badRequest("Invalid input for os-migrateLive: " + err.Error())
	}
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	host := ""
	if args.Host != nil {
		host = *args.Host
		if _, err := a.cfg.Store.GetService(r.Context(), host); err != nil {
			if isNotFound(err) {
				return badRequest("Compute host " + host + " could not be found.")
			}
			return err
		}
	}
	m, err := a.cfg.Conductor.LiveMigrate(r.Context(), in.UUID, host)
	if err != nil {
		return err
	}
	// Before 2.34 the pre-checks were synchronous: a migration that ended
	// in error at once is a 400 with its reason.
	if !version(r).AtLeast(34) && m.Status == records.MigrationError {
		return badRequest(m.Error)
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}
