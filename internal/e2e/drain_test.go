package e2e

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestSeedDrainThroughTheAPI is the bug report's drain, end to end: `keel
// dev --hosts 12` with hourly audits and host_subset_size = 3, every host
// running 4 small, 4 medium and 4 large instances; h01 and h02 are
// disabled and h01 is emptied by live migration through the API, the
// scheduler choosing each destination. The destinations spread: no more
// than half go to the three hosts that looked best at the start.
func TestSeedDrainThroughTheAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("144 boots and 12 migrations; skipped in -short mode")
	}
	t.Parallel() // its own keel dev, ports and data dir
	c := &cloud{t: t, dataDir: t.TempDir(), agents: map[string]*proc{}}
	c.server = start(t, "dev", "dev", "--hosts", "12", "--data-dir", c.dataDir, "--listen", "127.0.0.1:0",
		"--set", "DEFAULT.update_resources_interval=3600",
		"--set", "filter_scheduler.host_subset_size=3",
		"--set", "libvirt.live_migration_bandwidth=65536")
	c.readEndpoints()
	c.waitFor("keel dev", 30*time.Second, func() bool {
		var out struct {
			Hypervisors []map[string]any `json:"hypervisors"`
		}
		return fileExists(filepath.Join(c.dataDir, "clouds.yaml")) &&
			c.tryCall("GET", "/compute/v2.1/os-hypervisors", nil, &out) == 200 && len(out.Hypervisors) == 12
	})

	// The seed's load, host by host, in creation order.
	byHost := map[string][]string{}
	for h := 1; h <= 12; h++ {
		host := fmt.Sprintf("h%02d", h)
		for round := 0; round < 4; round++ {
			for _, flavor := range []string{"2", "3", "4"} { // m1.small, m1.medium, m1.large
				var out struct {
					Server struct{ ID string } `json:"server"`
				}
				if st := c.call("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{
					"name": fmt.Sprintf("%s-%d-%s", host, round, flavor), "flavorRef": flavor, "networks": "none",
					"availability_zone": "nova:" + host}}, &out); st != 202 {
					t.Fatalf("boot on %s: %d", host, st)
				}
				byHost[host] = append(byHost[host], out.Server.ID)
			}
		}
	}
	c.waitFor("144 ACTIVE instances", 60*time.Second, func() bool {
		var out struct {
			Servers []map[string]any `json:"servers"`
		}
		c.call("GET", "/compute/v2.1/servers/detail?all_tenants=1&status=ACTIVE", nil, &out)
		return len(out.Servers) == 144
	})
	for _, h := range []string{"h01", "h02"} {
		if st := c.call("PUT", "/compute/v2.1/os-services/disable", map[string]any{"host": h, "binary": "nova-compute"}, nil); st != 200 {
			t.Fatalf("disabling %s: %d", h, st)
		}
	}
	var exp struct {
		Explanation struct {
			Hosts []struct {
				Host string `json:"host"`
				Rank int    `json:"rank"`
			} `json:"hosts"`
		} `json:"explanation"`
	}
	c.call("POST", "/keel/v1/schedule/explain", map[string]any{"flavor": "m1.small"}, &exp)
	best := map[string]bool{}
	for _, h := range exp.Explanation.Hosts {
		if h.Rank >= 1 && h.Rank <= 3 {
			best[h.Host] = true
		}
	}
	if len(best) != 3 {
		t.Fatalf("initially best = %v, want 3 hosts", best)
	}

	dest := map[string]int{}
	toBest := 0
	for _, id := range byHost["h01"] {
		mid := c.migrate(id, "")
		if st := c.waitMigration(mid, 30*time.Second); st != "completed" {
			t.Fatalf("migration %d of %s ended %s", mid, id, st)
		}
		h := c.hostOf(id)
		dest[h]++
		if best[h] {
			toBest++
		}
	}
	var hosts []string
	for h, n := range dest {
		hosts = append(hosts, fmt.Sprintf("%s×%d", h, n))
	}
	sort.Strings(hosts)
	t.Logf("initially best %v; destinations %s", keys(best), strings.Join(hosts, " "))
	if toBest > 6 {
		t.Errorf("%d of 12 migrations went to the initially best hosts; want no more than half", toBest)
	}
	if v := c.audit(); len(v) != 0 {
		t.Errorf("audit: %s", strings.Join(v, "\n"))
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
