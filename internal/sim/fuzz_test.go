package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"keel/internal/sim/scenario"
)

// Caps FuzzRun puts on a scenario the loader accepted, so each input runs
// in well under a second: bigger ones are cut down to them (fewer hosts and
// instances, lower rates; see cut), longer ones end at fuzzDuration (later
// events are simply never reached). A run must end within fuzzDeadline and
// its heap may grow by at most fuzzHeap.
const (
	fuzzHosts      = 16
	fuzzInstances  = 300
	fuzzDuration   = 900.0
	fuzzOperations = 3000.0
	fuzzDeadline   = 20 * time.Second
	fuzzHeap       = 256 << 20
)

// FuzzRun goes past parsing: any scenario Parse accepts (cut down to the
// caps) is run under every policy it names and must end, within
// fuzzDeadline and fuzzHeap, with placement exact (no host over capacity,
// every instance holding its flavor once, nothing leaked) — never a panic,
// never an error.
func FuzzRun(f *testing.F) {
	for _, name := range []string{"seed-hour.toml", "gpu-trees.toml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "scenarios", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
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
	// Provider trees and sharing pools whose names are one edit from a
	// collision (h01's child "x" and a host h01_y, a pool next to them),
	// and the collisions themselves (refused by the loader: accept6 D3),
	// so the mutator starts next to them.
	f.Add([]byte(treesNearCollision))
	f.Add([]byte(strings.Replace(treesNearCollision, `name = "h01_y"`, `name = "h01_x"`, 1)))
	f.Add([]byte(strings.Replace(treesNearCollision, `name = "pool"`, `name = "h02_x"`, 1)))
	f.Add([]byte(strings.Replace(treesNearCollision, `name = "pool"`, `name = "h01"`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := scenario.Parse("f.toml", data)
		if err != nil {
			return // FuzzParse covers refusals
		}
		if !cut(sc) {
			t.Skip("cannot be cut down to the fuzz target's caps")
		}
		var rep *Report
		heap, err := runBounded(fuzzDeadline, fuzzHeap, func(ctx context.Context) error {
			opts := Options{Samples: 4}
			if len(sc.Instances) > 0 {
				opts.Rebalance = &RebalanceOptions{InFlight: 2}
			}
			var err error
			rep, err = Run(ctx, sc, opts)
			return err
		})
		if err != nil {
			t.Fatalf("an accepted scenario failed to run (heap grew %d MiB): %v", heap>>20, err)
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

// cut brings an accepted scenario within the fuzz target's caps instead of
// skipping it: numbered groups get fewer hosts, groups fewer initial
// instances, [[instance]]s past the cap are dropped, drains and events
// past 8 and 32 too, and rates are scaled down to fuzzOperations over the
// cut duration; the run ends at fuzzDuration. It reports false when the
// cut scenario is no longer valid (an event naming a host cut away).
func cut(sc *scenario.Scenario) bool {
	hosts := 0
	for _, g := range sc.HostGroups {
		hosts += g.Count
	}
	if hosts > fuzzHosts {
		for i := range sc.HostGroups {
			if g := &sc.HostGroups[i]; g.Name == "" {
				g.Count = max(1, g.Count*fuzzHosts/hosts)
			}
		}
	}
	hostSpecs := sc.Hosts()
	if len(hostSpecs) > fuzzHosts {
		return false
	}
	instances := 0
	for _, h := range hostSpecs {
		for _, n := range h.Instances {
			instances += n
		}
	}
	if instances > fuzzInstances {
		for i := range sc.HostGroups {
			g := &sc.HostGroups[i]
			m := make(map[string]int, len(g.Instances))
			for f, n := range g.Instances {
				m[f] = n * fuzzInstances / instances
			}
			g.Instances = m
		}
		instances = fuzzInstances
	}
	if n := max(0, fuzzInstances-instances); len(sc.Instances) > n {
		sc.Instances = sc.Instances[:n]
	}
	sc.Drains = sc.Drains[:min(len(sc.Drains), 8)]
	sc.Events = sc.Events[:min(len(sc.Events), 32)]
	if sc.Validate() != nil {
		return false
	}
	sc.Duration = math.Min(sc.Duration, fuzzDuration)
	ops := 0.0
	for _, w := range sc.Workloads {
		ops += w.Rate * (math.Min(w.End, sc.Duration) - math.Min(w.Start, sc.Duration))
	}
	if ops > fuzzOperations {
		for i := range sc.Workloads {
			sc.Workloads[i].Rate *= fuzzOperations / ops
		}
	}
	return true
}

// runBounded runs f with a context that ends after deadline, watching the
// heap: when it has grown by more than limit bytes since the start, f's
// context is cancelled and runBounded fails. It returns the largest growth
// seen and f's error, or why it was stopped; a run that ignores its
// context is abandoned 5 s after the deadline.
func runBounded(deadline time.Duration, limit uint64, f func(context.Context) error) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	base := heap()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	stall := time.After(deadline + 5*time.Second)
	var peak uint64
	for {
		select {
		case err := <-done:
			if ctx.Err() == context.DeadlineExceeded {
				return peak, fmt.Errorf("the run did not end within %v (%v)", deadline, err)
			}
			return peak, err
		case <-tick.C:
			if h := heap(); h > base {
				peak = max(peak, h-base)
			}
			if peak > limit {
				runtime.GC() // garbage not yet collected is not the run's
				if h := heap(); h > base && h-base > limit {
					cancel()
					<-done
					return h - base, fmt.Errorf("the run's heap grew by %d MiB, more than %d MiB", (h-base)>>20, limit>>20)
				}
				peak = 0
			}
		case <-stall:
			return peak, fmt.Errorf("the run did not end within %v and ignored its context", deadline)
		}
	}
}

// treesNearCollision has provider trees and a sharing pool whose names
// are one edit from colliding with a host's or a child's.
const treesNearCollision = `duration = 300
seed = 5
policies = ["legacy", "claim"]
[[flavor]]
name = "a"
vcpus = 1
ram = 512
disk = 5
[[flavor]]
name = "g"
vcpus = 1
ram = 512
disk = 5
extra_specs = { "resources1:VGPU" = "1", "resources2:DISK_GB" = "10", group_policy = "none" }
[[hosts]]
prefix = "h"
count = 2
vcpus = 8
memory_mb = 8192
disk_gb = 20
instances = { "a" = 2 }
[[hosts.child]]
name = "x"
resources = { VGPU = 2 }
[[hosts]]
name = "h01_y"
vcpus = 8
memory_mb = 8192
disk_gb = 20
[[shared]]
name = "pool"
resources = { DISK_GB = 200 }
groups = ["h"]
[[drain]]
start = 20
interval = 15
hosts = ["h01"]
[[workload]]
kind = "boot"
rate = 0.2
flavors = { "a" = 1, "g" = 2 }
`

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

// TestRunBoundedStopsAGrowingHeap: FuzzRun's memory bound stops a run
// whose heap keeps growing (and keeps what it allocates live) long before
// its deadline, and lets a small one end.
func TestRunBoundedStopsAGrowingHeap(t *testing.T) {
	var kept [][]byte
	start := time.Now()
	grown, err := runBounded(10*time.Second, 16<<20, func(ctx context.Context) error {
		for ctx.Err() == nil {
			kept = append(kept, make([]byte, 1<<20))
			time.Sleep(time.Millisecond)
		}
		return ctx.Err()
	})
	if err == nil || !strings.Contains(err.Error(), "more than 16 MiB") || grown <= 16<<20 {
		t.Errorf("a run growing without end: grew %d MiB, error %v; want it stopped past 16 MiB", grown>>20, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stopped after %v, want well before the 10 s deadline", d)
	}
	kept = nil
	if _, err := runBounded(10*time.Second, 16<<20, func(context.Context) error { return nil }); err != nil {
		t.Errorf("a run that allocates nothing: %v", err)
	}
}
