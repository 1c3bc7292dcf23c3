package computeapi

import (
	"net/http"
	"sort"
)

// listZones is GET /os-availability-zone: the zones that hold compute
// services; with detail (admin) each zone's hosts and their services.
func (a *zonesAPI) listZones(detail bool) func(w http.ResponseWriter, r *http.Request) error {
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
