package sim

import (
	"context"
	"maps"
	"testing"

	"keel/internal/sim/scenario"
)

// pacedDrain: h01's 12 instances are drained one a minute from t=30. h02
// stops its heartbeats at t=0 (down from t=60, service_down_time after its
// last report) and starts them again at t=300; h03 has room for 3.
const pacedDrain = `duration = 1500
policies = ["claim"]
[compute]
reserved_host_memory_mb = 0
[[flavor]]
name = "f"
vcpus = 1
ram = 1024
[[hosts]]
prefix = "h"
count = 1
vcpus = 32
memory_mb = 65536
disk_gb = 1000
instances = { "f" = 12 }
[[hosts]]
prefix = "h"
first = 2
count = 1
vcpus = 32
memory_mb = 65536
disk_gb = 1000
[[hosts]]
prefix = "h"
first = 3
count = 1
vcpus = 32
memory_mb = 3072
disk_gb = 1000
[[event]]
at = 0
stop_heartbeats = ["h02"]
[[event]]
at = 300
start_heartbeats = ["h02"]
[[drain]]
start = 30
interval = 60
hosts = ["h01"]
`

// TestPacedDrainKeepsItsPace (accept6 D1): a drain with an interval starts
// one migration a tick, and one that finds no valid host is that tick's:
// the next instance waits for the next tick, it is not tried (and failed)
// at once. At t=30 h02 is still up (1 to h02), 90–210 fill h03 (3), at 270
// no host is valid (1 failed), and from 330 to 690 h02 is up again (7).
func TestPacedDrainKeepsItsPace(t *testing.T) {
	sc, err := scenario.Parse("paced.toml", []byte(pacedDrain))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Policies[0]
	want := map[string]int{"h02": 8, "h03": 3}
	if p.Migrations != 12 || p.FailedMigrations != 1 || !maps.Equal(p.Destinations, want) {
		t.Errorf("migrations %d, failed %d, destinations %v; want 12, 1 and %v", p.Migrations, p.FailedMigrations, p.Destinations, want)
	}
	if p.NoValidHost != 1 {
		t.Errorf("no valid host %d times, want once (at t=270)", p.NoValidHost)
	}
}
