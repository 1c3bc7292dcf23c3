package sim

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/sim/scenario"
)

// Caps FuzzRun puts on a scenario the loader accepted, so each input runs
// in well under a second: bigger ones are skipped, longer ones end at
// fuzzDuration (later events are simply never reached).
const (
	fuzzHosts      = 16
	fuzzInstances  = 300
	fuzzDuration   = 900.0
	fuzzOperations = 3000.0
	fuzzDeadline   = 20 * time.Second
)

// FuzzRun goes past parsing: any scenario Parse accepts (within the caps)
// is run under every policy it names and must end, within fuzzDeadline,
// with placement exact (no host over capacity, every instance holding its
// flavor once, nothing leaked) — never a panic, never an error.
func FuzzRun(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("..", "..", "scenarios", "seed-hour.toml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	small := `duration = 600
seed = 3
[scheduler]
host_subset_size = 2
service_down_time = 30
[compute]
update_resources_interval = 120
report_interval = 7
spawn_seconds = 3
migration_bandwidth_mib_s = 100
max_concurrent_live_migrations = 2
[[flavor]]
name = "a"
vcpus = 1
ram = 512
disk = 1
[[flavor]]
name = "b"
vcpus = 4
ram = 4096
disk = 10
[[hosts]]
prefix = "h"
count = 4
vcpus = 8
memory_mb = 16384
disk_gb = 100
instances = { "a" = 3, "b" = 1 }
audit_spread = true
[[event]]
at = 50
stop_heartbeats = ["h02"]
disable = ["h03"]
[[event]]
at = 200
start_heartbeats = ["h02"]
enable = ["h03"]
[[drain]]
start = 0
hosts = ["h01"]
in_flight = 3
[[workload]]
kind = "boot"
rate = 0.5
poisson = true
[[workload]]
kind = "delete"
rate = 0.3
[[workload]]
kind = "migrate"
rate = 0.2
start = 10
end = 500
`
	f.Add([]byte(small))
	f.Add([]byte(strings.Replace(small, "ram = 4096", "ram = 16000", 1)))
	f.Add([]byte(strings.Replace(small, "rate = 0.5", "rate = 1e-12", 1)))
	f.Add([]byte(strings.Replace(small, "service_down_time = 30", "service_down_time = 3", 1)))
	// What keel sim export writes: named hosts with traits, one-by-one
	// instances, a server group, an aggregate (run with a rebalance).
	f.Add([]byte(exportLike))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := scenario.Parse("f.toml", data)
		if err != nil {
			return // FuzzParse covers refusals
		}
		hosts := sc.Hosts()
		instances := len(sc.Instances)
		for _, h := range hosts {
			for _, n := range h.Instances {
				instances += n
			}
		}
		sc.Duration = math.Min(sc.Duration, fuzzDuration)
		ops := 0.0
		for _, w := range sc.Workloads {
			ops += w.Rate * (math.Min(w.End, sc.Duration) - math.Min(w.Start, sc.Duration))
		}
		if len(hosts) > fuzzHosts || instances > fuzzInstances || ops > fuzzOperations || len(sc.Drains) > 8 || len(sc.Events) > 32 {
			t.Skip("over the fuzz target's caps")
		}
		ctx, cancel := context.WithTimeout(context.Background(), fuzzDeadline)
		defer cancel()
		done := make(chan struct{})
		var rep *Report
		go func() {
			defer close(done)
			opts := Options{Samples: 4}
			if len(sc.Instances) > 0 {
				opts.Rebalance = &RebalanceOptions{InFlight: 2}
			}
			rep, err = Run(ctx, sc, opts)
		}()
		select {
		case <-done:
		case <-time.After(fuzzDeadline + 5*time.Second):
			t.Fatalf("the run did not end within %v", fuzzDeadline)
		}
		if err != nil {
			t.Fatalf("an accepted scenario failed to run: %v", err)
		}
		for _, p := range rep.Policies {
			if len(p.Inconsistencies) > 0 {
				t.Errorf("%s: placement not exact at the end: %v", p.Policy, p.Inconsistencies)
			}
			if p.Boots < p.FailedBoots || p.Migrations < 0 || p.Decisions < 0 {
				t.Errorf("%s: counts do not add up: %+v", p.Policy, p)
			}
		}
	})
}

const exportLike = `duration = 300
[scheduler]
enabled_filters = ["ComputeFilter", "AvailabilityZoneFilter", "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter", "AggregateInstanceExtraSpecsFilter"]
[[flavor]]
name = "a"
vcpus = 1
ram = 2048
disk = 10
[[flavor]]
name = "f"
vcpus = 2
ram = 4096
disk = 10
extra_specs = { "trait:CUSTOM_FAST" = "required" }
[[hosts]]
name = "x1"
vcpus = 8
memory_mb = 32768
disk_gb = 200
traits = ["CUSTOM_FAST"]
reserved_host_memory_mb = 1024
[[hosts]]
name = "x2"
vcpus = 8
memory_mb = 32768
disk_gb = 200
traits = ["CUSTOM_FAST"]
[[hosts]]
prefix = "y"
count = 2
vcpus = 8
memory_mb = 32768
disk_gb = 200
[[server_group]]
name = "g"
policy = "anti-affinity"
[[aggregate]]
name = "az"
hosts = ["y01"]
metadata = { "availability_zone" = "az1" }
[[instance]]
host = "x1"
flavor = "f"
[[instance]]
host = "x1"
flavor = "f"
[[instance]]
host = "x1"
flavor = "a"
group = "g"
[[instance]]
host = "x1"
flavor = "a"
group = "g"
zone = "nova"
[[drain]]
start = 10
hosts = ["y02"]
`
