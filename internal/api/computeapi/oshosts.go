package computeapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"keel/internal/records"
)

// osHostsRoutes adds os-hosts, Nova's host API deprecated at 2.43 (404
// from then on, as Nova answers): the compute hosts with their zones,
// one host's resources in total, in use and per project, enabling or
// disabling its service, and the power actions keel's drivers do not
// have (501).
func (a *osHostsAPI) osHostsRoutes(route func(string, bool, func(http.ResponseWriter, *http.Request) error)) {
	route("GET /compute/v2.1/os-hosts", true, a.listOSHosts)
	route("GET /compute/v2.1/os-hosts/{host}", true, a.showOSHost)
	route("PUT /compute/v2.1/os-hosts/{host}", true, a.updateOSHost)
	for _, act := range []string{"startup", "shutdown", "reboot"} {
		route("GET /compute/v2.1/os-hosts/{host}/"+act, true, a.osHostPower)
	}
}

func osHostsGone(r *http.Request) error {
	if version(r).AtLeast(43) {
		return notFound("The resource could not be found.")
	}
	return nil
}

// listOSHosts is GET /os-hosts (zone filters; a blank zone does not).
func (a *osHostsAPI) listOSHosts(w http.ResponseWriter, r *http.Request) error {
	if err := osHostsGone(r); err != nil {
		return err
	}
	svcs, err := a.computeServices(r.Context())
	if err != nil {
		return err
	}
	zones, err := a.hostZones(r.Context())
	if err != nil {
		return err
	}
	zone := r.URL.Query().Get("zone")
	out := []map[string]string{}
	for _, s := range svcs {
		z := serviceZone(s, zones)
		if zone != "" && z != zone {
			continue
		}
		out = append(out, map[string]string{"host_name": s.Host, "service": "compute", "zone": z})
	}
	writeJSON(w, http.StatusOK, map[string]any{"hosts": out})
	return nil
}

// osHost finds a compute host's service, or Nova's 404.
func (a *osHostsAPI) osHost(r *http.Request) (records.Service, error) {
	host := r.PathValue("host")
	s, err := a.store.GetService(r.Context(), host)
	if (err == nil && !s.IsCompute()) || isNotFound(err) {
		return s, notFoundf("Compute host %s could not be found.", host)
	}
	return s, err
}

// showOSHost is GET /os-hosts/{host}: the host's resources as (total),
// (used_now) (the host record's usage, reserved included), (used_max)
// (its instances' flavors) and then per project.
func (a *osHostsAPI) showOSHost(w http.ResponseWriter, r *http.Request) error {
	if err := osHostsGone(r); err != nil {
		return err
	}
	s, err := a.osHost(r)
	if err != nil {
		return err
	}
	rec, err := a.store.GetHostRecord(r.Context(), s.Host)
	if err != nil && !isNotFound(err) {
		return err
	}
	ins, err := a.store.ListInstances(r.Context(), s.Host)
	if err != nil {
		return err
	}
	res := func(project string, cpu, mem, disk int64) map[string]any {
		return map[string]any{"resource": map[string]any{"host": s.Host, "project": project, "cpu": cpu, "memory_mb": mem, "disk_gb": disk}}
	}
	type sum struct{ cpu, mem, disk int64 }
	var all sum
	per := map[string]*sum{}
	for _, in := range ins {
		f := in.Flavor
		all.cpu, all.mem, all.disk = all.cpu+f.VCPUs, all.mem+f.RAMMB, all.disk+f.DiskGB
		p := per[in.ProjectID]
		if p == nil {
			p = &sum{}
			per[in.ProjectID] = p
		}
		p.cpu, p.mem, p.disk = p.cpu+f.VCPUs, p.mem+f.RAMMB, p.disk+f.DiskGB
	}
	out := []map[string]any{
		res("(total)", rec.VCPUs, rec.MemoryMB, rec.LocalGB),
		res("(used_now)", rec.VCPUsUsed, rec.MemoryMBUsed, rec.LocalGBUsed),
		res("(used_max)", all.cpu, all.mem, all.disk),
	}
	projects := make([]string, 0, len(per))
	for p := range per {
		projects = append(projects, p)
	}
	slices.Sort(projects)
	for _, p := range projects {
		out = append(out, res(p, per[p].cpu, per[p].mem, per[p].disk))
	}
	writeJSON(w, http.StatusOK, map[string]any{"host": out})
	return nil
}

// updateOSHost is PUT /os-hosts/{host} with status (enable/disable: the
// host's compute service) and/or maintenance_mode (which keel's drivers
// do not have: 501, as Nova's libvirt driver answers).
func (a *osHostsAPI) updateOSHost(w http.ResponseWriter, r *http.Request) error {
	if err := osHostsGone(r); err != nil {
		return err
	}
	var body map[string]json.RawMessage
	if err := decode(r, &body); err != nil {
		return err
	}
	vals := map[string]string{}
	for k, raw := range body {
		if k != "status" && k != "maintenance_mode" {
			return badRequest("Additional properties are not allowed ('" + k + "' was unexpected)")
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || (strings.ToLower(s) != "enable" && strings.ToLower(s) != "disable") {
			return badRequest("Invalid input for field/attribute " + k + ". Value: " + string(raw) + ". It is not one of ['enable', 'disable']")
		}
		vals[k] = strings.ToLower(s)
	}
	if len(vals) == 0 {
		return badRequest("Invalid input for the request body: 'status' or 'maintenance_mode' is required")
	}
	s, err := a.osHost(r)
	if err != nil {
		return err
	}
	if _, ok := vals["maintenance_mode"]; ok {
		return &apiError{http.StatusNotImplemented, "Virt driver does not implement host maintenance mode."}
	}
	disable := vals["status"] == "disable"
	if _, err := a.store.UpdateService(r.Context(), s.Host, func(s *records.Service) error {
		s.Disabled, s.DisabledReason = disable, ""
		s.UpdatedAt = a.clock.Now()
		return nil
	}); err != nil {
		return err
	}
	status := "enabled"
	if disable {
		status = "disabled"
	}
	writeJSON(w, http.StatusOK, map[string]any{"host": s.Host, "status": status})
	return nil
}

// osHostPower is GET /os-hosts/{host}/{startup,shutdown,reboot}: keel's
// drivers have no host power management (Nova's libvirt driver neither:
// 501), an unknown host is 404.
func (a *osHostsAPI) osHostPower(w http.ResponseWriter, r *http.Request) error {
	if err := osHostsGone(r); err != nil {
		return err
	}
	if _, err := a.osHost(r); err != nil {
		return err
	}
	return &apiError{http.StatusNotImplemented, "Virt driver does not implement host power management."}
}
