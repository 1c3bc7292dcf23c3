package computeapi_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHypervisorMetrics: a guest's workload (its metadata keel:workload)
// is what the fake driver measures, the agent's report lands in the host
// record, and os-hypervisors detail?with_metrics=true serves it under
// Nova's compute_nodes.metrics names (fractions, as Nova stores them) and
// the host's memory under keel's (keel.memory.*, MiB); a host
// not measured yet has none (unavailable, never 0). A workload the flavor
// cannot have fails the spawn, saying why.
func TestHypervisorMetrics(t *testing.T) {
	e := newEnv(t)
	var created struct{ Server struct{ ID string } }
	e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm1", "flavorRef": "2", "networks": "none",
		"metadata": map[string]string{"keel:workload": "constant cpu=1 mem=1024"}}}, &created)
	e.clk.Advance(2 * time.Second)
	var show struct{ Server map[string]any }
	e.call("GET", "/compute/v2.1/servers/"+created.Server.ID, "admin", "", nil, &show)
	host, _ := show.Server["OS-EXT-SRV-ATTR:host"].(string)
	if show.Server["status"] != "ACTIVE" {
		t.Fatalf("boot: %v", show.Server["status"])
	}
	if _, err := e.cloud.Agents[host].ReportMetrics(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	// Nova's view has no metrics, and strict clients (Tempest's schemas)
	// refuse extra fields: they are served only when asked for.
	var plain struct{ Hypervisors []map[string]any }
	e.call("GET", "/compute/v2.1/os-hypervisors/detail", "admin", "", nil, &plain)
	for _, h := range plain.Hypervisors {
		if _, ok := h["metrics"]; ok {
			t.Errorf("%v: metrics served without with_metrics: %v", h["hypervisor_hostname"], h["metrics"])
		}
	}
	if resp := e.call("GET", "/compute/v2.1/os-hypervisors/detail?with_metrics=maybe", "admin", "", nil, nil); resp.StatusCode != 400 {
		t.Errorf("with_metrics=maybe: %d, want 400", resp.StatusCode)
	}
	var hv struct{ Hypervisors []map[string]any }
	e.call("GET", "/compute/v2.1/os-hypervisors/detail?with_metrics=true", "admin", "", nil, &hv)
	for _, h := range hv.Hypervisors {
		ms, _ := h["metrics"].([]any)
		if h["hypervisor_hostname"] != host {
			if len(ms) != 0 {
				t.Errorf("%v was never measured, yet has metrics %v", h["hypervisor_hostname"], ms)
			}
			continue
		}
		vals := map[string]float64{}
		for _, m := range ms {
			mm := m.(map[string]any)
			vals[mm["name"].(string)] = mm["value"].(float64)
			if mm["source"] != "fake.Driver" || !strings.HasPrefix(mm["timestamp"].(string), "2") {
				t.Errorf("metric %v: source and timestamp", mm)
			}
		}
		want := 1 / h["vcpus"].(float64)
		if vals["cpu.percent"] != want || vals["cpu.idle.percent"] != 1-want || vals["cpu.frequency"] != 2400 {
			t.Errorf("%s metrics %v, want cpu.percent %v", host, vals, want)
		}
		// The host's memory, keel's names beside Nova's: all of it but
		// the 1024 MiB the guest's model touches.
		if mem := h["memory_mb"].(float64); vals["keel.memory.total"] != mem || vals["keel.memory.available"] != mem-1024 {
			t.Errorf("%s memory metrics %v, want keel.memory.total %v and available %v", host, vals, mem, mem-1024)
		}
	}

	e.call("POST", "/compute/v2.1/servers", "admin", "", map[string]any{"server": map[string]any{"name": "vm2", "flavorRef": "2", "networks": "none",
		"metadata": map[string]string{"keel:workload": "constant cpu=3"}}}, &created)
	e.clk.Advance(10 * time.Second)
	e.call("GET", "/compute/v2.1/servers/"+created.Server.ID, "admin", "", nil, &show)
	fault, _ := show.Server["fault"].(map[string]any)
	if show.Server["status"] != "ERROR" || !strings.Contains(fault["message"].(string), "cpu=3 is above the flavor's 1 vCPUs") {
		t.Errorf("an impossible workload: %v %v", show.Server["status"], fault)
	}
}
