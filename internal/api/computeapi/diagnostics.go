package computeapi

import (
	"net/http"

	"keel/internal/records"
)

// diagnosticsState maps a server's power state to the diagnostics' state
// names (Nova's, 2.48).
func diagnosticsState(in records.Instance) string {
	switch in.VMState {
	case records.VMPaused:
		return "paused"
	case records.VMSuspended:
		return "suspended"
	case records.VMStopped, records.VMShelved:
		return "shutdown"
	case records.VMError:
		return "crashed"
	case records.VMBuilding:
		return "pending"
	}
	return "running"
}

// serverDiagnostics is GET /servers/{id}/diagnostics (admin): what keel
// knows of a placed server's guest, from its record — the flavor's vCPUs
// and memory, one disk, no NICs (keel has no networks), the time since
// launch. The counters a hypervisor keeps (CPU time, disk and NIC
// traffic, memory in use) are null: keel's drivers do not report them.
// The driver field is "libvirt", the one of Nova's driver names whose
// diagnostics shape keel follows (Nova's own fake driver says the same);
// hypervisor is what os-hypervisors reports as the hypervisor type. Before 2.48 the answer is the same
// figures flat, as drivers then chose their own keys.
func (a *serversAPI) serverDiagnostics(w http.ResponseWriter, r *http.Request) error {
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if in.Host == "" || in.VMState == records.VMBuilding {
		return conflict("Cannot 'get_diagnostics' instance " + in.UUID + " while it is in vm_state " + string(in.VMState))
	}
	hyper := "fake" // as os-hypervisors' hypervisor_type says
	uptime := int64(a.clock.Now().Sub(in.CreatedAt).Seconds())
	f := in.Flavor
	if !version(r).AtLeast(48) {
		writeJSON(w, http.StatusOK, map[string]any{
			"state": diagnosticsState(in), "num_cpus": f.VCPUs, "memory": f.RAMMB, "disk_gb": f.DiskGB, "uptime": uptime,
		})
		return nil
	}
	cpus := make([]map[string]any, 0, f.VCPUs)
	for i := range f.VCPUs {
		cpus = append(cpus, map[string]any{"id": i, "time": nil, "utilisation": nil})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"state": diagnosticsState(in), "driver": "libvirt", "hypervisor": hyper, "hypervisor_os": "linux",
		"uptime": uptime, "config_drive": false, "num_cpus": f.VCPUs, "num_nics": 0, "num_disks": 1,
		"memory_details": map[string]any{"maximum": f.RAMMB, "used": nil},
		"cpu_details":    cpus, "nic_details": []any{},
		"disk_details": []map[string]any{{"read_bytes": nil, "read_requests": nil, "write_bytes": nil, "write_requests": nil, "errors_count": nil}},
	})
	return nil
}
