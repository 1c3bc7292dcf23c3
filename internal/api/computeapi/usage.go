package computeapi

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"keel/internal/records"
)

// usageRoutes adds os-simple-tenant-usage: each project's usage over a
// period, from the instance records (an admin lists every project's; a
// member reads its own project's).
func (a *usageAPI) usageRoutes(route func(string, bool, func(http.ResponseWriter, *http.Request) error)) {
	route("GET /compute/v2.1/os-simple-tenant-usage", true, a.listUsage)
	route("GET /compute/v2.1/os-simple-tenant-usage/{tenant}", false, a.showUsage)
}

// usageTimeLayouts are the forms Nova reads start and end in.
var usageTimeLayouts = []string{"2006-01-02T15:04:05", "2006-01-02T15:04:05.999999", "2006-01-02 15:04:05.999999", "2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05.999999Z07:00"}

func parseUsageTime(s string) (time.Time, bool) {
	for _, l := range usageTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// usagePeriod reads start and end (both default to now), refusing a
// start after the end as Nova does; an end still to come counts up to now.
func (a *usageAPI) usagePeriod(r *http.Request) (start, stop time.Time, err error) {
	now := a.clock.Now().UTC()
	q := r.URL.Query()
	read := func(name string) (time.Time, error) {
		if !q.Has(name) {
			return now, nil
		}
		t, ok := parseUsageTime(q.Get(name))
		if !ok {
			return time.Time{}, badRequest("Datetime is in invalid format")
		}
		return t, nil
	}
	if start, err = read("start"); err != nil {
		return
	}
	if stop, err = read("end"); err != nil {
		return
	}
	if start.After(stop) {
		return start, stop, badRequest("Invalid start time. The start time cannot occur after the end time.")
	}
	if stop.After(now) {
		stop = now
	}
	return start, stop, nil
}

// usageTime renders Nova's usage timestamps (ISO 8601 with microseconds,
// no zone).
func usageTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000") }

// serverUsage is one instance's usage over [start, stop]: it counts from
// its launch (keel's guests launch when their boot ends; the record's
// creation stands for it) to stop. keel keeps no record of deleted
// instances, so every instance counted is still there.
func (a *usageAPI) serverUsage(in records.Instance, start, stop time.Time) (map[string]any, float64, bool) {
	if in.VMState == records.VMBuilding || in.VMState == records.VMError || in.VMState == records.VMDeleted {
		return nil, 0, false
	}
	launched := in.CreatedAt.UTC()
	if launched.After(stop) {
		return nil, 0, false
	}
	from := launched
	if from.Before(start) {
		from = start
	}
	hours := max(stop.Sub(from).Hours(), 0)
	f := in.Flavor
	return map[string]any{
		"instance_id": in.UUID, "name": in.Name, "hours": hours,
		"memory_mb": f.RAMMB, "local_gb": f.DiskGB, "vcpus": f.VCPUs,
		"tenant_id": in.ProjectID, "flavor": f.Name, "started_at": usageTime(launched), "ended_at": nil,
		"state": in.VMState, "uptime": int64(a.clock.Now().Sub(launched).Seconds()),
	}, hours, true
}

// tenantUsages sums the usage of the instances given (of any projects)
// per project, in project order; with detailed, each project's server
// usages are listed.
func (a *usageAPI) tenantUsages(ins []records.Instance, start, stop time.Time, detailed bool) []map[string]any {
	by := map[string]map[string]any{}
	var order []string
	for _, in := range ins {
		su, hours, ok := a.serverUsage(in, start, stop)
		if !ok {
			continue
		}
		t := by[in.ProjectID]
		if t == nil {
			t = map[string]any{
				"tenant_id": in.ProjectID, "start": usageTime(start), "stop": usageTime(stop),
				"total_hours": 0.0, "total_local_gb_usage": 0.0, "total_memory_mb_usage": 0.0, "total_vcpus_usage": 0.0,
			}
			if detailed {
				t["server_usages"] = []map[string]any{}
			}
			by[in.ProjectID] = t
			order = append(order, in.ProjectID)
		}
		f := in.Flavor
		t["total_hours"] = t["total_hours"].(float64) + hours
		t["total_local_gb_usage"] = t["total_local_gb_usage"].(float64) + float64(f.DiskGB)*hours
		t["total_memory_mb_usage"] = t["total_memory_mb_usage"].(float64) + float64(f.RAMMB)*hours
		t["total_vcpus_usage"] = t["total_vcpus_usage"].(float64) + float64(f.VCPUs)*hours
		if detailed {
			t["server_usages"] = append(t["server_usages"].([]map[string]any), su)
		}
	}
	slices.Sort(order)
	out := make([]map[string]any, 0, len(order))
	for _, p := range order {
		out = append(out, by[p])
	}
	return out
}

// instancesOf lists project's instances, or every instance if project is
// empty.
func (a *base) instancesOf(ctx context.Context, project string) ([]records.Instance, error) {
	if project == "" {
		return a.store.ListInstances(ctx, "")
	}
	return a.store.ListProjectInstances(ctx, project)
}

// usageInstances lists the instances (of one project if project is not
// empty) in UUID order, paged from 2.40 by limit and marker (an
// instance's UUID); it reports the marker for the next page, if any.
func (a *usageAPI) usageInstances(r *http.Request, project string) ([]records.Instance, string, error) {
	ins, err := a.instancesOf(r.Context(), project)
	if err != nil {
		return nil, "", err
	}
	slices.SortFunc(ins, func(x, y records.Instance) int { return strings.Compare(x.UUID, y.UUID) })
	if !version(r).AtLeast(40) {
		return ins, "", nil
	}
	q := r.URL.Query()
	if q.Has("marker") {
		m := q.Get("marker")
		i := slices.IndexFunc(ins, func(in records.Instance) bool { return in.UUID == m })
		if i < 0 {
			return nil, "", badRequest("marker [" + m + "] not found")
		}
		ins = ins[i+1:]
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 0 {
			return nil, "", badRequest("Invalid input for query parameters limit. Value: " + q.Get("limit") + ". It is not a valid non-negative integer")
		}
		if len(ins) > n {
			ins = ins[:n]
			if n > 0 {
				return ins, ins[n-1].UUID, nil
			}
		}
	}
	return ins, "", nil
}

// usageLink is the next page's link (2.40) with the request's own query
// and the new marker.
func (a *usageAPI) usageLink(r *http.Request, path, marker string) []map[string]string {
	q := url.Values{}
	for k, v := range r.URL.Query() {
		q[k] = v
	}
	q.Set("marker", marker)
	return []map[string]string{{"rel": "next", "href": a.baseURL + "/v2.1/" + path + "?" + q.Encode()}}
}

func detailedUsage(r *http.Request) bool {
	d := strings.ToLower(r.URL.Query().Get("detailed"))
	return d != "" && d != "0" && d != "false" && d != "no" && d != "off"
}

// listUsage is GET /os-simple-tenant-usage (admin): every project's.
func (a *usageAPI) listUsage(w http.ResponseWriter, r *http.Request) error {
	start, stop, err := a.usagePeriod(r)
	if err != nil {
		return err
	}
	ins, next, err := a.usageInstances(r, "")
	if err != nil {
		return err
	}
	body := map[string]any{"tenant_usages": a.tenantUsages(ins, start, stop, detailedUsage(r))}
	if next != "" {
		body["tenant_usages_links"] = a.usageLink(r, "os-simple-tenant-usage", next)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// showUsage is GET /os-simple-tenant-usage/{tenant}: one project's, with
// its server usages, for an admin or the project's members.
func (a *usageAPI) showUsage(w http.ResponseWriter, r *http.Request) error {
	tenant := r.PathValue("tenant")
	if c := caller(r); !c.Admin && c.ProjectID != tenant {
		return forbidden("os_compute_api:os-simple-tenant-usage:show")
	}
	start, stop, err := a.usagePeriod(r)
	if err != nil {
		return err
	}
	ins, next, err := a.usageInstances(r, tenant)
	if err != nil {
		return err
	}
	var usage map[string]any = map[string]any{}
	if us := a.tenantUsages(ins, start, stop, true); len(us) == 1 {
		usage = us[0]
	}
	body := map[string]any{"tenant_usage": usage}
	if next != "" {
		body["tenant_usage_links"] = a.usageLink(r, "os-simple-tenant-usage/"+tenant, next)
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}
