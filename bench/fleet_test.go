package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"keel/internal/testenv"
)

// keelProcesses is what the fleet's test needs beyond Go.
const keelProcesses = "a keel server process (the binary built from this tree)"

// TestFleetQuick runs keelbench --only fleet --quick --json: a real `keel
// server` process and, in the test's process, 4 then 12 real agents on
// their own bus identities and connections, heartbeating every second.
// Every step must be measured, every host seen up by os-hypervisors/detail,
// every heartbeat answered, and the server's CPU and memory read from its
// own process; the text table must show every step. Then the server is
// restarted with the 12 agents connected (--fleet-restart): every agent's
// heartbeat is answered again and no host is seen down.
func TestFleetQuick(t *testing.T) {
	testenv.External(t, keelProcesses)
	ctx := testenv.Context(t)
	var out bytes.Buffer
	if err := Main(ctx, []string{"--only", "fleet", "--quick", "--json", "--fleet-restart"}, &out, logWriter{t}); err != nil {
		t.Fatalf("keelbench --only fleet --quick --json: %v", err)
	}
	var got struct {
		Fleet   []FleetStep      `json:"fleet"`
		Rows    []map[string]any `json:"rows"`
		Restart *FleetRestart    `json:"fleet_restart"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	var figures map[string]any
	_ = json.Unmarshal(out.Bytes(), &figures)
	if len(got.Fleet) != 2 || got.Fleet[0].Hosts != 4 || got.Fleet[1].Hosts != 12 {
		t.Fatalf("fleet steps %+v, want 4 then 12 hosts", got.Fleet)
	}
	for _, st := range got.Fleet {
		// Whether it held also depends on API p99s, which a busy machine
		// may push past 100 ms: not asserted.
		if st.Behind != "" || st.HostsDown != 0 || st.HeartbeatsFailed != 0 {
			t.Errorf("%d hosts: down=%d heartbeats failed=%d (%s), want every host up and every heartbeat answered",
				st.Hosts, st.HostsDown, st.HeartbeatsFailed, st.Behind)
		}
		// Each agent heartbeats every second over a 4 s period.
		if st.Heartbeats < 2*st.Hosts {
			t.Errorf("%d hosts: %d heartbeats in %.1f s, want at least %d", st.Hosts, st.Heartbeats, st.PeriodS, 2*st.Hosts)
		}
		if st.ServerRSSMiB <= 0 || st.StoreMiB <= 0 || st.ServersCalls == 0 || st.BusMsgsPerS <= 0 || st.StoreWritesPerS <= 0 {
			t.Errorf("%d hosts: RSS %.1f MiB, store %.1f MiB, %d API calls, %.0f bus msgs/s, %.0f store writes/s: want all positive",
				st.Hosts, st.ServerRSSMiB, st.StoreMiB, st.ServersCalls, st.BusMsgsPerS, st.StoreWritesPerS)
		}
		// A boot a second, and a live migration of the one before:
		// each answered and decided, none failed.
		if st.Boots == 0 || st.BootClaimP50MS <= 0 || st.MovesFailed != 0 {
			t.Errorf("%d hosts: %d boots (decided p50 %.1f ms), %d failed (%s): want boots timed to their host and none failed", st.Hosts, st.Boots, st.BootClaimP50MS, st.MovesFailed, st.MovesError)
		}
		if st.Migrations > 0 && st.MigrationStartP50MS <= 0 {
			t.Errorf("%d hosts: %d live migrations, start p50 %.1f ms: want them timed to running", st.Hosts, st.Migrations, st.MigrationStartP50MS)
		}
		if st.ServerWaitCores < 0 {
			t.Errorf("%d hosts: the server waited %.3f cores for a CPU, want ≥ 0", st.Hosts, st.ServerWaitCores)
		}
		if st.Store != "sqlite" || st.Replicas != 1 {
			t.Errorf("%d hosts: store %q, %d replicas, want sqlite and 1", st.Hosts, st.Store, st.Replicas)
		}
	}
	if v, _ := figures["fleet_largest_hosts"].(float64); v != 12 {
		t.Errorf("fleet_largest_hosts = %v, want 12", figures["fleet_largest_hosts"])
	}
	if _, ok := figures["fleet_max_hosts_one_replica"].(float64); !ok {
		t.Errorf("no fleet_max_hosts_one_replica in %s", out.String())
	}
	if v, _ := figures["fleet_hosts_per_core_at_largest"].(float64); v <= 12 {
		t.Errorf("fleet_hosts_per_core_at_largest = %v, want more than the 12 hosts (the server under one core)", figures["fleet_hosts_per_core_at_largest"])
	}
	// The 10,000-host figures are there, null, with the reason.
	var unmeasured map[string]string
	if b, ok := figures["unmeasured"]; ok {
		raw, _ := json.Marshal(b)
		_ = json.Unmarshal(raw, &unmeasured)
	}
	for _, k := range []string{"fleet_server_cores_at_10k", "fleet_api_p99_ms_at_10k", "fleet_cpu_per_host_ratio_10k_to_1k"} {
		if v, ok := figures[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
		if !strings.Contains(unmeasured[k], "do not include 10,000") {
			t.Errorf("unmeasured[%s] = %q, want the reason", k, unmeasured[k])
		}
	}
	if !strings.Contains(out.String(), `"server_wait_cores"`) {
		t.Errorf("no server_wait_cores in %s", out.String())
	}
	if len(got.Rows) != 1 || got.Rows[0]["section"] != "7" {
		t.Errorf("rows %v, want the fleet's one row", got.Rows)
	}

	if rs := got.Restart; rs == nil {
		t.Errorf("no fleet_restart in %s", out.String())
	} else if rs.Hosts != 12 || rs.Answered != 12 || rs.HostsDown != 0 || rs.ServerCPUS <= 0 || rs.AllUpS <= 0 {
		t.Errorf("restart %+v: want all 12 hosts heard from again, none seen down, the new server's CPU counted", *rs)
	}

	// The text table shows every step.
	var text bytes.Buffer
	if err := writeFleetTable(&text, got.Fleet); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[2], "4 ") || !strings.HasPrefix(lines[3], "12 ") || !strings.Contains(lines[1], "replicas") {
		t.Errorf("fleet table:\n%s\nwant a heading, a header and the rows of 4 and 12 hosts", text.String())
	}
}
