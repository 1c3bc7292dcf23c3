package computeapi

import (
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// instanceUsageAuditLog is GET /os-instance_usage_audit_log[/{before}]
// (admin): the state of Nova's monthly instance usage audit for the
// last completed month before the given time (now by default). keel runs
// no such audit (its usage comes from the instance records directly, see
// os-simple-tenant-usage), so every compute host is listed as not run.
func (a *usageAPI) instanceUsageAuditLog(one bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		before := a.clock.Now().UTC()
		if one {
			raw, err := url.PathUnescape(r.PathValue("before"))
			if err != nil {
				return badRequest("Invalid timestamp for date " + r.PathValue("before"))
			}
			t, ok := parseUsageTime(raw)
			if !ok {
				if t, err = time.Parse("2006-01-02 15:04:05", raw); err != nil {
					return badRequest("Invalid timestamp for date " + raw)
				}
			}
			before = t
		}
		end := time.Date(before.Year(), before.Month(), 1, 0, 0, 0, 0, time.UTC)
		begin := end.AddDate(0, -1, 0)
		svcs, err := a.computeServices(r.Context())
		if err != nil {
			return err
		}
		hosts := make([]string, 0, len(svcs))
		for _, s := range svcs {
			hosts = append(hosts, s.Host)
		}
		log := map[string]any{
			"hosts_not_run": hosts, "log": map[string]any{},
			"num_hosts": len(hosts), "num_hosts_done": 0, "num_hosts_not_run": len(hosts), "num_hosts_running": 0,
			"overall_status":   fmt.Sprintf("%d of %d hosts done. 0 errors.", 0, len(hosts)),
			"period_beginning": begin.Format("2006-01-02 15:04:05"), "period_ending": end.Format("2006-01-02 15:04:05"),
			"total_errors": 0, "total_instances": 0,
		}
		key := "instance_usage_audit_logs"
		if one {
			key = "instance_usage_audit_log"
		}
		writeJSON(w, http.StatusOK, map[string]any{key: log})
		return nil
	}
}
