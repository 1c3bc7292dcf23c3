package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var requestID = regexp.MustCompile(`^req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestMigrationsUpdateBothHostsAtOnce: with hourly audits, after every live
// migration both hosts' usage in os-hypervisors is already exact.
func TestMigrationsUpdateBothHostsAtOnce(t *testing.T) {
	t.Parallel() // its own processes, ports and data dir
	c := newCloud(t, "DEFAULT.update_resources_interval=3600")
	for i := 1; i <= 3; i++ {
		c.startAgent(fmt.Sprintf("h%d", i))
	}
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.small", "ram": 2048, "vcpus": 1, "disk": 20, "id": "2"}}, nil)
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, c.boot(fmt.Sprintf("vm%d", i), "2"))
	}
	for _, id := range ids {
		src := c.hostOf(id)
		before := c.memUsed()
		mid := c.migrate(id, "")
		if st := c.waitMigration(mid, 30*time.Second); st != "completed" {
			t.Fatalf("migration %d ended %s", mid, st)
		}
		dst := c.hostOf(id)
		after := c.memUsed()
		if dst == src || after[src] != before[src]-2048 || after[dst] != before[dst]+2048 {
			t.Fatalf("after moving %s %s→%s, memory_mb_used went %v → %v; want both hosts exact at once", id, src, dst, before, after)
		}
	}
	if v := c.audit(); len(v) != 0 {
		t.Fatalf("audit: %s", strings.Join(v, "\n"))
	}
	var imgs struct {
		Images []map[string]any `json:"images"`
	}
	if st := c.call("GET", "/image/v2/images", nil, &imgs); st != 200 || len(imgs.Images) != 1 || imgs.Images[0]["name"] != "keel-fake" {
		t.Errorf("image list: %d %+v", st, imgs)
	}
	// Version documents need no token, the rest does; every response
	// carries its own request id, answered or refused.
	seen := map[string]string{}
	for path, want := range map[string]int{
		"/compute": 200, "/compute/v2.1/": 200, "/placement": 200, "/placement/": 200, "/image/": 300, "/identity/v3": 200,
		"/compute/v2.1/servers": 401, "/placement/resource_providers": 401, "/image/v2/images": 401, "/no/such/path": 404,
	} {
		resp, err := http.Get(c.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a token: %d, want %d", path, resp.StatusCode, want)
		}
		id := resp.Header.Get("X-OpenStack-Request-ID")
		if !requestID.MatchString(id) || seen[id] != "" {
			t.Errorf("GET %s (%d): request id %q (seen before: %q)", path, resp.StatusCode, id, seen[id])
		}
		seen[id] = path
	}
	for sample, want := range map[string]float64{
		`keel_live_migrations_total{status="completed"}`:                  4,
		`keel_agents{state="up"}`:                                         3,
		`keel_builds_total{outcome="active"}`:                             4,
		`keel_scheduler_claims_total{kind="migration",outcome="claimed"}`: 4,
	} {
		if got := c.metric(sample); got != want {
			t.Errorf("/metrics %s = %v, want %v", sample, got, want)
		}
	}
}

// TestSilentAgentIsReportedDownAndFilteredOut: an agent whose heartbeat
// stops is reported down after service_down_time, the scheduler's
// ComputeFilter refuses it, and it is up again once it heartbeats.
func TestSilentAgentIsReportedDownAndFilteredOut(t *testing.T) {
	t.Parallel()
	c := newCloud(t, "DEFAULT.service_down_time=3", "DEFAULT.report_interval=1")
	for i := 1; i <= 2; i++ {
		c.startAgent(fmt.Sprintf("h%d", i))
	}
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.small", "ram": 2048, "vcpus": 1, "disk": 20, "id": "2"}}, nil)
	state := func(host string) string {
		var out struct {
			Hypervisors []map[string]any `json:"hypervisors"`
		}
		c.call("GET", "/compute/v2.1/os-hypervisors", nil, &out)
		for _, h := range out.Hypervisors {
			if h["hypervisor_hostname"] == host {
				return h["state"].(string)
			}
		}
		return ""
	}
	c.agents["h2"].kill()
	c.waitFor("h2 reported down", 15*time.Second, func() bool { return state("h2") == "down" })
	var exp struct {
		Explanation struct {
			Hosts []struct {
				Host       string `json:"host"`
				RejectedBy string `json:"rejected_by"`
				Reason     string `json:"reason"`
			} `json:"hosts"`
		} `json:"explanation"`
	}
	c.call("POST", "/keel/v1/schedule/explain", map[string]any{"flavor": "m1.small"}, &exp)
	for _, h := range exp.Explanation.Hosts {
		if h.Host == "h2" && (h.RejectedBy != "ComputeFilter" || !strings.Contains(h.Reason, "down")) {
			t.Fatalf("h2 while down: rejected by %q (%s), want ComputeFilter, service down", h.RejectedBy, h.Reason)
		}
	}
	for i := 0; i < 3; i++ {
		if host := c.hostOf(c.boot(fmt.Sprintf("vm%d", i), "2")); host != "h1" {
			t.Fatalf("boot landed on %s while h2 is down", host)
		}
	}
	c.startAgent("h2") // waits until it is up again
	if st := state("h2"); st != "up" {
		t.Fatalf("h2 after its return: %s", st)
	}
}
