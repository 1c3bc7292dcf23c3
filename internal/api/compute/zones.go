package compute

import (
	"net/http"
	"sort"
)

// listZones is GET /os-availability-zone: the zones that hold compute
// services; with detail (admin) each zone's hosts and their services.
func (a *API) listZones(detail bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		svcs, err := a.computeServices(r.Context())
		if err != nil {
			return err
		}
		aggZones, err := a.hostZones(r.Context())
		if err != nil {
			return err
		}
		type zone struct {
			available bool
			hosts     map[string]any
		}
		zones := map[string]*zone{}
		for _, s := range svcs {
			name := serviceZone(s, aggZones)
			z := zones[name]
			if z == nil {
				z = &zone{hosts: map[string]any{}}
				zones[name] = z
			}
			up := a.serviceUp(s)
			z.available = z.available || (up && !s.Disabled)
			z.hosts[s.Host] = map[string]any{"nova-compute": map[string]any{
				"available": up, "active": !s.Disabled, "updated_at": migrationTime(s.UpdatedAt)}}
		}
		names := make([]string, 0, len(zones))
		for n := range zones {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]any, 0, len(names))
		for _, n := range names {
			var hosts any
			if detail {
				hosts = zones[n].hosts
			}
			out = append(out, map[string]any{"zoneName": n, "zoneState": map[string]any{"available": zones[n].available}, "hosts": hosts})
		}
		writeJSON(w, http.StatusOK, map[string]any{"availabilityZoneInfo": out})
		return nil
	}
}

// showLimits is GET /limits. keel enforces no quotas, so every maximum is
// -1 (unlimited, as Nova reports an unlimited quota); the totals are the
// caller's project's actual use.
func (a *API) showLimits(w http.ResponseWriter, r *http.Request) error {
	ins, err := a.cfg.Store.ListInstances(r.Context(), "")
	if err != nil {
		return err
	}
	project := caller(r).ProjectID
	if t := r.URL.Query().Get("tenant_id"); t != "" && caller(r).Admin {
		project = t
	}
	var n, cores, ram int64
	for _, in := range ins {
		if in.ProjectID != project {
			continue
		}
		n++
		cores += in.Flavor.VCPUs
		ram += in.Flavor.RAMMB
	}
	groups, err := a.cfg.Store.ListServerGroups(r.Context())
	if err != nil {
		return err
	}
	nGroups := 0
	for _, g := range groups {
		if g.ProjectID == project {
			nGroups++
		}
	}
	abs := map[string]any{
		"maxTotalInstances": -1, "maxTotalCores": -1, "maxTotalRAMSize": -1,
		"maxServerMeta": -1, "maxTotalKeypairs": -1, "maxServerGroups": -1, "maxServerGroupMembers": -1,
		"totalInstancesUsed": n, "totalCoresUsed": cores, "totalRAMUsed": ram, "totalServerGroupsUsed": nGroups,
	}
	if !version(r).AtLeast(57) {
		abs["maxPersonality"], abs["maxPersonalitySize"] = -1, -1
	}
	if !version(r).AtLeast(39) {
		abs["maxImageMeta"] = -1
	}
	if !version(r).AtLeast(36) {
		abs["maxSecurityGroups"], abs["maxSecurityGroupRules"] = -1, -1
		abs["maxTotalFloatingIps"], abs["totalFloatingIpsUsed"], abs["totalSecurityGroupsUsed"] = -1, 0, 0
	}
	writeJSON(w, http.StatusOK, map[string]any{"limits": map[string]any{"rate": []any{}, "absolute": abs}})
	return nil
}
