package computeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"keel/internal/records"
)

// hypervisor joins a host's record, service and provider.
type hypervisor struct {
	rec     records.HostRecord
	svc     records.Service
	hasSvc  bool
	uuid    string
	running int64
}

// hypervisors is every host record, sorted by host, with its compute
// service: from the configured HostLister if there is one, else read from
// the store.
func (a *hypervisorsAPI) hypervisors(r *http.Request) ([]hypervisor, error) {
	recs, byHost, err := a.computeHosts(r.Context())
	if err != nil {
		return nil, err
	}
	out := make([]hypervisor, 0, len(recs))
	for _, rec := range recs {
		s, ok := byHost[rec.Host]
		out = append(out, hypervisor{rec: rec, svc: s, hasSvc: ok, uuid: rec.ProviderUUID})
	}
	return out, nil
}

// computeHosts is every host record, sorted by host, and the compute
// services by host.
func (a *hypervisorsAPI) computeHosts(ctx context.Context) ([]records.HostRecord, map[string]records.Service, error) {
	if a.hosts != nil {
		recs, svcs, err := a.hosts.ComputeHosts(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the hosts: %w", err)
		}
		return recs, svcs, nil
	}
	recs, err := a.store.ListHostRecords(ctx)
	if err != nil {
		return nil, nil, err
	}
	svcs, err := a.computeServices(ctx)
	if err != nil {
		return nil, nil, err
	}
	byHost := make(map[string]records.Service, len(svcs))
	for _, s := range svcs {
		byHost[s.Host] = s
	}
	return recs, byHost, nil
}

// hypervisorJSON is one hypervisor as the API shows it: a typed value,
// not a map, because a listing shows every host. What a listing or a
// microversion leaves out is nil (an embedded nil pointer's fields are
// left out too).
type hypervisorJSON struct {
	ID       any    `json:"id"` // an integer before 2.53, a UUID from it
	Hostname string `json:"hypervisor_hostname"`
	State    string `json:"state"`
	Status   string `json:"status"`
	*hypervisorDetail
	*hypervisorUsage
	Metrics *[]metricJSON       `json:"metrics,omitempty"`
	Servers *[]hypervisorServer `json:"servers,omitempty"`
	// Uptime is the uptime text (a JSON string, or null for a host that
	// is down): the uptime path's before 2.88, a detailed view's from it.
	Uptime json.RawMessage `json:"uptime,omitempty"`
}

// hypervisorDetail is what a detailed view adds at every microversion.
type hypervisorDetail struct {
	Type    string            `json:"hypervisor_type"`
	Version int               `json:"hypervisor_version"`
	HostIP  string            `json:"host_ip"`
	Service hypervisorService `json:"service"`
}

// hypervisorService is a detailed view's compute service.
type hypervisorService struct {
	Host           string  `json:"host"`
	ID             any     `json:"id"`
	DisabledReason *string `json:"disabled_reason"`
}

// hypervisorUsage is what a detailed view adds before 2.88.
type hypervisorUsage struct {
	VCPUs              int64 `json:"vcpus"`
	VCPUsUsed          int64 `json:"vcpus_used"`
	MemoryMB           int64 `json:"memory_mb"`
	MemoryMBUsed       int64 `json:"memory_mb_used"`
	FreeRAMMB          int64 `json:"free_ram_mb"`
	LocalGB            int64 `json:"local_gb"`
	LocalGBUsed        int64 `json:"local_gb_used"`
	FreeDiskGB         int64 `json:"free_disk_gb"`
	DiskAvailableLeast int64 `json:"disk_available_least"`
	RunningVMs         int64 `json:"running_vms"`
	CurrentWorkload    int64 `json:"current_workload"`
	CPUInfo            any   `json:"cpu_info"` // an object from 2.28, a string before
}

// hypervisorServer is one server of a hypervisor (with_servers).
type hypervisorServer struct {
	UUID string `json:"uuid"`
	Name string `json:"name"`
}

// metricJSON is one measured metric as Nova stores it.
type metricJSON struct {
	Name      string  `json:"name"`
	Value     float64 `json:"value"`
	Source    string  `json:"source"`
	Timestamp string  `json:"timestamp"`
}

// hypervisorID is a hypervisor's id: its provider's UUID from 2.53, an
// integer derived from its host before.
func hypervisorID(r *http.Request, h hypervisor) any {
	if version(r).AtLeast(53) {
		return h.uuid
	}
	return intID(h.rec.Host)
}

func (a *hypervisorsAPI) hypervisorView(r *http.Request, h hypervisor, detail bool) *hypervisorJSON {
	state, status := "down", "disabled"
	if h.hasSvc && a.serviceUp(h.svc) {
		state = "up"
	}
	if h.hasSvc && !h.svc.Disabled {
		status = "enabled"
	}
	v := &hypervisorJSON{ID: hypervisorID(r, h), Hostname: h.rec.Host, State: state, Status: status}
	if !detail {
		return v
	}
	rec := h.rec
	var svcID any = intID(rec.Host)
	if version(r).AtLeast(53) {
		svcID = serviceID(rec.Host)
	}
	var reason *string
	if h.svc.DisabledReason != "" {
		reason = &h.svc.DisabledReason
	}
	v.hypervisorDetail = &hypervisorDetail{Type: "fake", Version: 1000, HostIP: "127.0.0.1",
		Service: hypervisorService{Host: rec.Host, ID: svcID, DisabledReason: reason}}
	if wantMetrics(r) {
		ms := metricsView(rec.Metrics)
		v.Metrics = &ms
	}
	if version(r).AtLeast(88) {
		// 2.88: the resource fields are gone (placement has them), the
		// uptime is here.
		v.Uptime = []byte("null")
		if up, ok := a.uptime(h); ok {
			v.Uptime, _ = json.Marshal(up)
		}
		return v
	}
	var cpuInfo any = "{}"
	if version(r).AtLeast(28) {
		cpuInfo = struct{}{}
	}
	v.hypervisorUsage = &hypervisorUsage{
		VCPUs: rec.VCPUs, VCPUsUsed: rec.VCPUsUsed,
		MemoryMB: rec.MemoryMB, MemoryMBUsed: rec.MemoryMBUsed, FreeRAMMB: rec.FreeRAMMB,
		LocalGB: rec.LocalGB, LocalGBUsed: rec.LocalGBUsed, FreeDiskGB: rec.FreeDiskGB,
		DiskAvailableLeast: rec.FreeDiskGB,
		RunningVMs:         rec.RunningVMs, CurrentWorkload: rec.NumIOOps,
		CPUInfo: cpuInfo,
	}
	return v
}

// wantMetrics reads keel's with_metrics query parameter. Nova's
// hypervisor API has no measured metrics (they stay in
// compute_nodes.metrics), and its clients validate the view strictly —
// Tempest's schema refuses any extra field — so keel serves them only
// when asked: GET /os-hypervisors/detail?with_metrics=true. An invalid
// value was refused by checkMetricsParam before the view is built.
func wantMetrics(r *http.Request) bool {
	b, _ := strconv.ParseBool(r.URL.Query().Get("with_metrics"))
	return b
}

// checkMetricsParam refuses a with_metrics value that is not a boolean,
// as Nova refuses with_servers'.
func checkMetricsParam(r *http.Request) error {
	s := r.URL.Query().Get("with_metrics")
	if s == "" {
		return nil
	}
	if _, err := strconv.ParseBool(s); err != nil {
		return badRequest("Invalid input for query parameters with_metrics. Value: " + s + ". not a boolean")
	}
	return nil
}

// metricsView is a host's measured metrics as Nova stores them in
// compute_nodes.metrics (MonitorMetric.to_dict: the percents as
// fractions, the timestamp as Nova's strtime); an unavailable metric is
// absent, never 0.
func metricsView(ms []records.Metric) []metricJSON {
	out := make([]metricJSON, 0, len(ms))
	for _, m := range ms {
		out = append(out, metricJSON{Name: m.Name, Value: m.Value, Source: m.Source,
			Timestamp: m.Timestamp.UTC().Format("2006-01-02T15:04:05.000000")})
	}
	return out
}

// withServers adds the names and UUIDs of the servers on a hypervisor to
// its view (Nova adds the key only when there are some, or from 2.75
// always when they were asked for).
func (a *hypervisorsAPI) withServers(r *http.Request, v *hypervisorJSON, host string) error {
	ins, err := a.store.ListInstances(r.Context(), host)
	if err != nil {
		return err
	}
	if len(ins) == 0 && !version(r).AtLeast(75) {
		return nil
	}
	servers := make([]hypervisorServer, 0, len(ins))
	for _, in := range ins {
		servers = append(servers, hypervisorServer{UUID: in.UUID, Name: in.Name})
	}
	v.Servers = &servers
	return nil
}

// wantServers reads 2.53's with_servers query parameter.
func wantServers(r *http.Request) (bool, error) {
	s := r.URL.Query().Get("with_servers")
	if s == "" || !version(r).AtLeast(53) {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badRequest("Invalid input for query parameters with_servers. Value: " + s + ". not a boolean")
	}
	return b, nil
}

// maxLimit is the most items a page of a paged listing holds, limit or
// not: Nova's [api] max_limit default. Only the hypervisor listings (from
// 2.33) apply it yet.
const maxLimit = 1000

func (a *hypervisorsAPI) listHypervisors(detail bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		servers, err := wantServers(r)
		if err != nil {
			return err
		}
		if err := checkMetricsParam(r); err != nil {
			return err
		}
		// A large listing is kept (listingCache), but not one with
		// servers: those are read from the instances, per host.
		key := ""
		if !servers {
			key = fmt.Sprintf("%t %v %s", detail, version(r), r.URL.Query().Encode())
		}
		build := func(ctx context.Context) ([]byte, int, error) {
			body, n, err := a.hypervisorList(r.WithContext(ctx), detail, servers)
			if err != nil {
				return nil, 0, err
			}
			b, err := encodeBody(body)
			if err != nil {
				return nil, 0, fmt.Errorf("encoding the hypervisors: %w", err)
			}
			return b, n, nil
		}
		if key != "" && a.listings.serve(w, r, key, build) {
			return nil
		}
		at := a.listings.now()
		b, n, err := build(r.Context())
		if err != nil {
			return err
		}
		if key != "" {
			a.listings.keep(key, b, n, at)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
		return nil
	}
}

// hypervisorList is a hypervisor listing's body and how many hypervisors
// it shows.
func (a *hypervisorsAPI) hypervisorList(r *http.Request, detail, servers bool) (map[string]any, int, error) {
	hs, err := a.hypervisors(r)
	if err != nil {
		return nil, 0, err
	}
	pattern := ""
	if version(r).AtLeast(53) {
		pattern = r.URL.Query().Get("hypervisor_hostname_pattern")
	}
	// 2.33: paging with limit and a hypervisor's id as marker, at
	// most maxLimit a page as in Nova (its [api] max_limit), so a
	// listing without limit shows the first maxLimit hosts and a link
	// to the next. A hostname pattern (2.53) is not paged.
	body := map[string]any{}
	if version(r).AtLeast(33) {
		q := r.URL.Query()
		if pattern != "" && (q.Has("limit") || q.Has("marker")) {
			return nil, 0, badRequest("Paging over hypervisors with the hypervisor_hostname_pattern query parameter is not supported.")
		}
		idOf := func(h hypervisor) string { return fmt.Sprint(hypervisorID(r, h)) }
		if m := q.Get("marker"); m != "" {
			i := slices.IndexFunc(hs, func(h hypervisor) bool { return idOf(h) == m })
			if i < 0 {
				return nil, 0, badRequest("marker [" + m + "] not found")
			}
			hs = hs[i+1:]
		}
		n := maxLimit
		if q.Has("limit") {
			l, err := strconv.Atoi(q.Get("limit"))
			if err != nil || l < 0 {
				return nil, 0, badRequest("Invalid input for query parameters limit. Value: " + q.Get("limit") + ". not a non-negative integer")
			}
			n = min(l, maxLimit)
		}
		if pattern == "" && len(hs) > n {
			hs = hs[:n]
			if n > 0 {
				body["hypervisors_links"] = a.nextLink(r, "os-hypervisors", idOf(hs[n-1]))
			}
		}
	}
	out := make([]*hypervisorJSON, 0, len(hs))
	for _, h := range hs {
		if pattern != "" && !strings.Contains(h.rec.Host, pattern) {
			continue
		}
		v := a.hypervisorView(r, h, detail)
		if servers {
			if err := a.withServers(r, v, h.rec.Host); err != nil {
				return nil, 0, err
			}
		}
		out = append(out, v)
	}
	if pattern != "" && len(out) == 0 {
		return nil, 0, notFoundf("No hypervisor matching '%s' could be found.", pattern)
	}
	body["hypervisors"] = out
	return body, len(out), nil
}

// searchHypervisors is GET /os-hypervisors/{pattern}/search and, with
// servers, /os-hypervisors/{pattern}/servers (both gone from 2.53, as in
// Nova): the hypervisors whose hostname contains pattern.
func (a *hypervisorsAPI) searchHypervisors(servers bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if version(r).AtLeast(53) {
			return notFound("The resource could not be found.")
		}
		pattern := r.PathValue("id")
		hs, err := a.hypervisors(r)
		if err != nil {
			return err
		}
		out := []*hypervisorJSON{}
		for _, h := range hs {
			if !strings.Contains(h.rec.Host, pattern) {
				continue
			}
			v := a.hypervisorView(r, h, false)
			if servers {
				if err := a.withServers(r, v, h.rec.Host); err != nil {
					return err
				}
			}
			out = append(out, v)
		}
		if len(out) == 0 {
			return notFoundf("No hypervisor matching '%s' could be found.", pattern)
		}
		writeJSON(w, http.StatusOK, map[string]any{"hypervisors": out})
		return nil
	}
}

// hypervisorUptime is GET /os-hypervisors/{id}/uptime (gone from 2.88).
// keel's agents report heartbeats, not their host's boot time, so the
// uptime text says when the host last reported; a host that is down has
// none (400, as Nova answers for an unreachable compute service).
func (a *hypervisorsAPI) hypervisorUptime(w http.ResponseWriter, r *http.Request) error {
	if version(r).AtLeast(88) {
		return notFound("The resource could not be found.")
	}
	h, err := a.findHypervisor(r)
	if err != nil {
		return err
	}
	up, ok := a.uptime(h)
	if !ok {
		return badRequest("Compute service of " + h.rec.Host + " is unavailable at this time.")
	}
	v := a.hypervisorView(r, h, false)
	v.Uptime, _ = json.Marshal(up)
	writeJSON(w, http.StatusOK, map[string]any{"hypervisor": v})
	return nil
}

// uptime is a host's uptime text, in the shape of the uptime(1) line
// Nova's drivers answer; a host whose service is down has none.
func (a *hypervisorsAPI) uptime(h hypervisor) (string, bool) {
	if !h.hasSvc || !a.serviceUp(h.svc) {
		return "", false
	}
	now := a.clock.Now().UTC()
	return fmt.Sprintf(" %s up, last heartbeat %s ago, load average: unknown",
		now.Format("15:04:05"), now.Sub(h.svc.LastSeenUp).Round(time.Second)), true
}

// hypervisorStatistics is GET /os-hypervisors/statistics (gone from 2.88,
// as in Nova): the sums of every host record.
func (a *hypervisorsAPI) hypervisorStatistics(w http.ResponseWriter, r *http.Request) error {
	if version(r).AtLeast(88) {
		return notFoundf("The resource could not be found.")
	}
	hs, err := a.hypervisors(r)
	if err != nil {
		return err
	}
	var sum records.HostRecord
	for _, h := range hs {
		rec := h.rec
		sum.VCPUs += rec.VCPUs
		sum.VCPUsUsed += rec.VCPUsUsed
		sum.MemoryMB += rec.MemoryMB
		sum.MemoryMBUsed += rec.MemoryMBUsed
		sum.FreeRAMMB += rec.FreeRAMMB
		sum.LocalGB += rec.LocalGB
		sum.LocalGBUsed += rec.LocalGBUsed
		sum.FreeDiskGB += rec.FreeDiskGB
		sum.RunningVMs += rec.RunningVMs
		sum.NumIOOps += rec.NumIOOps
	}
	writeJSON(w, http.StatusOK, map[string]any{"hypervisor_statistics": map[string]any{
		"count": len(hs), "vcpus": sum.VCPUs, "vcpus_used": sum.VCPUsUsed,
		"memory_mb": sum.MemoryMB, "memory_mb_used": sum.MemoryMBUsed, "free_ram_mb": sum.FreeRAMMB,
		"local_gb": sum.LocalGB, "local_gb_used": sum.LocalGBUsed, "free_disk_gb": sum.FreeDiskGB,
		"disk_available_least": sum.FreeDiskGB, "running_vms": sum.RunningVMs, "current_workload": sum.NumIOOps,
	}})
	return nil
}

// findHypervisor finds the hypervisor of the path's id: its UUID from
// 2.53, its integer id before (or its hostname, for keel's own client).
func (a *hypervisorsAPI) findHypervisor(r *http.Request) (hypervisor, error) {
	hs, err := a.hypervisors(r)
	if err != nil {
		return hypervisor{}, err
	}
	id := r.PathValue("id")
	for _, h := range hs {
		if id == h.uuid || id == strconv.FormatInt(intID(h.rec.Host), 10) || id == h.rec.Host {
			return h, nil
		}
	}
	return hypervisor{}, notFoundf("Hypervisor with ID '%s' could not be found.", id)
}

func (a *hypervisorsAPI) showHypervisor(w http.ResponseWriter, r *http.Request) error {
	servers, err := wantServers(r)
	if err != nil {
		return err
	}
	if err := checkMetricsParam(r); err != nil {
		return err
	}
	h, err := a.findHypervisor(r)
	if err != nil {
		return err
	}
	v := a.hypervisorView(r, h, true)
	if servers {
		if err := a.withServers(r, v, h.rec.Host); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"hypervisor": v})
	return nil
}

func (a *servicesAPI) serviceView(r *http.Request, s records.Service) map[string]any {
	state, status := "down", "enabled"
	if a.serviceUp(s) {
		state = "up"
	}
	if s.Disabled {
		status = "disabled"
	}
	var reason any
	if s.DisabledReason != "" {
		reason = s.DisabledReason
	}
	var id any = intID(s.Host)
	if version(r).AtLeast(53) {
		id = serviceID(s.Host)
	}
	v := map[string]any{"id": id, "binary": "nova-compute", "host": s.Host, "zone": s.Zone,
		"status": status, "state": state, "updated_at": migrationTime(s.UpdatedAt), "disabled_reason": reason}
	if version(r).AtLeast(11) {
		v["forced_down"] = s.ForcedDown
	}
	return v
}

func (a *servicesAPI) listServices(w http.ResponseWriter, r *http.Request) error {
	svcs, err := a.computeServices(r.Context())
	if err != nil {
		return err
	}
	zones, err := a.hostZones(r.Context())
	if err != nil {
		return err
	}
	q := r.URL.Query()
	out := []any{}
	for _, s := range svcs {
		s.Zone = serviceZone(s, zones)
		if b := q.Get("binary"); b != "" && b != "nova-compute" {
			continue
		}
		if h := q.Get("host"); h != "" && h != s.Host {
			continue
		}
		out = append(out, a.serviceView(r, s))
	}
	writeJSON(w, http.StatusOK, map[string]any{"services": out})
	return nil
}

// updateService is PUT /os-services/{enable|disable|disable-log-reason}
// (before 2.53) or PUT /os-services/{id} with a status (2.53 and later).
// serviceNamespace derives compute services' UUIDs from their hosts.
var serviceNamespace = uuid.MustParse("5d1c3e0a-8f43-4b8e-9b8e-6b65656c7376")

// serviceID is a compute service's id from 2.53: a UUID derived from its
// host (keel keeps one compute service per host), so it is stable across
// restarts and needs no column of its own.
func serviceID(host string) string {
	return uuid.NewSHA1(serviceNamespace, []byte(host)).String()
}

// serviceHost finds the host of the service with the given id.
func (a *servicesAPI) serviceHost(r *http.Request, id string) (string, error) {
	svcs, err := a.computeServices(r.Context())
	if err != nil {
		return "", err
	}
	for _, s := range svcs {
		if serviceID(s.Host) == id {
			return s.Host, nil
		}
	}
	return "", notFoundf("Service %s could not be found.", id)
}

func (a *servicesAPI) updateService(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Host           string  `json:"host"`
		Binary         string  `json:"binary"`
		Status         string  `json:"status"`
		DisabledReason *string `json:"disabled_reason"`
		ForcedDown     *bool   `json:"forced_down"`
	}
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	if body.DisabledReason != nil {
		if *body.DisabledReason == "" {
			return badRequest("Invalid input for field/attribute disabled_reason. Value: ''. is too short")
		}
		if err := checkText("disabled_reason", *body.DisabledReason, 255); err != nil {
			return err
		}
	}
	action := r.PathValue("action")
	host := body.Host
	disable := false
	if action == "force-down" && version(r).AtLeast(11) && !version(r).AtLeast(53) {
		return a.forceDownService(w, r, body.Host, body.Binary, body.ForcedDown)
	}
	switch action {
	case "enable", "disable", "disable-log-reason":
		// Nova's schema before 2.53: the body names the service.
		for _, f := range []struct{ name, v string }{{"host", body.Host}, {"binary", body.Binary}} {
			if f.v == "" {
				return badRequest("Invalid input for the request body: '" + f.name + "' is a required property")
			}
		}
	}
	switch action {
	case "enable":
	case "disable", "disable-log-reason":
		disable = true
	default:
		if !version(r).AtLeast(53) {
			return notFound("Unknown action")
		}
		if body.Host != "" || body.Binary != "" {
			return badRequest("Invalid input for the request body: Additional properties are not allowed (host and binary are named by the service id)")
		}
		var err error
		if host, err = a.serviceHost(r, action); err != nil {
			return err
		}
		switch body.Status {
		case "enabled":
		case "disabled":
			disable = true
		case "":
			if body.ForcedDown == nil {
				return badRequest("nothing to update: give status or forced_down")
			}
		default:
			return badRequest("status must be enabled or disabled")
		}
	}
	setStatus := action != "" && (body.Status != "" || action == "enable" || action == "disable" || action == "disable-log-reason")
	s, err := a.store.UpdateService(r.Context(), host, func(s *records.Service) error {
		if setStatus {
			s.Disabled, s.DisabledReason = disable, ""
			if disable && body.DisabledReason != nil {
				s.DisabledReason = *body.DisabledReason
			}
		}
		if body.ForcedDown != nil {
			s.ForcedDown = *body.ForcedDown
		}
		s.UpdatedAt = a.clock.Now()
		return nil
	})
	if err != nil {
		if isNotFound(err) {
			return notFoundf("Compute host %s could not be found.", host)
		}
		return err
	}
	if version(r).AtLeast(53) {
		writeJSON(w, http.StatusOK, map[string]any{"service": a.serviceView(r, s)})
		return nil
	}
	out := map[string]any{"host": s.Host, "binary": "nova-compute", "status": map[bool]string{true: "disabled", false: "enabled"}[s.Disabled]}
	if action == "disable-log-reason" {
		out["disabled_reason"] = s.DisabledReason
	}
	writeJSON(w, http.StatusOK, map[string]any{"service": out})
	return nil
}

// forceDownService is PUT /os-services/force-down (2.11 to 2.52): the
// body names the service by host and binary and sets forced_down.
func (a *servicesAPI) forceDownService(w http.ResponseWriter, r *http.Request, host, binary string, forced *bool) error {
	for _, f := range []struct{ name, v string }{{"host", host}, {"binary", binary}} {
		if f.v == "" {
			return badRequest("Invalid input for the request body: '" + f.name + "' is a required property")
		}
	}
	if forced == nil {
		return badRequest("Missing forced_down field")
	}
	if binary != "nova-compute" {
		return badRequest("Updating a " + binary + " service is not supported. Only nova-compute services can be updated.")
	}
	_, err := a.store.UpdateService(r.Context(), host, func(s *records.Service) error {
		s.ForcedDown = *forced
		s.UpdatedAt = a.clock.Now()
		return nil
	})
	if isNotFound(err) {
		return notFoundf("Compute host %s could not be found.", host)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"service": map[string]any{"host": host, "binary": binary, "forced_down": *forced}})
	return nil
}

// computeServices are the compute agents' service records: the keel
// server replicas' heartbeats, kept beside them, are not compute services.
func (a *base) computeServices(ctx context.Context) ([]records.Service, error) {
	svcs, err := a.store.ListServices(ctx)
	if err != nil {
		return nil, err
	}
	out := svcs[:0]
	for _, s := range svcs {
		if s.IsCompute() {
			out = append(out, s)
		}
	}
	return out, nil
}
