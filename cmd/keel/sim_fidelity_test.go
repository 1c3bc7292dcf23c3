package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/placement"
	"keel/internal/sim"
	"keel/internal/testenv"
)

// TestExportedDrainMatchesTheRealOne: a running keel (8 fake-driver hosts,
// 32 servers) is exported; the real drain of h01 and h02 (keel host drain
// --wait) and the simulator's drain of the same hosts on the exported copy
// (policy claim) end with the same spread of RAM over the enabled hosts,
// within 0.05 of CV.
func TestExportedDrainMatchesTheRealOne(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 8, Config: func(c *config.Config) {
		c.Libvirt.LiveMigrationBandwidth = 1 << 20 // copies take a millisecond
	}})
	useCloud(t, cloud)
	ctx := context.Background()
	c := cloud.Connect(t)
	flavors := []string{"m1.small", "m1.medium", "m1.large", "m1.small"}
	for i := 0; i < 32; i++ {
		fl, err := c.FindFlavor(ctx, flavors[i%len(flavors)])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := servers.Create(ctx, c.ComputeClient(), servers.CreateOpts{Name: fmt.Sprintf("s%02d", i), FlavorRef: fl.ID}, nil).Extract(); err != nil {
			t.Fatal(err)
		}
	}
	wait := testenv.Context(t)
	for {
		ss, err := c.Servers(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		active := 0
		for _, s := range ss {
			if s.Status == "ACTIVE" {
				active++
			}
		}
		if active == 32 {
			break
		}
		if wait.Err() != nil {
			t.Fatalf("%d of 32 servers ACTIVE", active)
		}
		time.Sleep(100 * time.Millisecond)
	}

	path := filepath.Join(t.TempDir(), "cloud.toml")
	if err := os.WriteFile(path, []byte(mustRun(t, "sim", "export")), 0o600); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "sim", path, "--policy", "claim", "--drain", "h01,h02", "--in-flight", "4", "--format", "json")
	var rep sim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	simulated := rep.Policies[0]

	mustRun(t, "host", "drain", "h01", "h02", "--parallel", "4", "--wait")
	snap, err := c.CloudSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ram []float64
	for _, h := range snap.Hosts {
		if h.Disabled {
			continue
		}
		ram = append(ram, float64(h.Used[placement.MemoryMB]))
		if h.Name == "h01" || h.Name == "h02" {
			t.Errorf("drained %s still enabled", h.Name)
		}
	}
	real := cvOf(ram)
	t.Logf("RAM CV after draining h01, h02: real %.3f over %d hosts, simulated %.3f over %d (%d migrations)",
		real, len(ram), simulated.Final.RAMCV, len(simulated.Final.RAMUsedMB), simulated.Migrations)
	if len(ram) != 6 || len(simulated.Final.RAMUsedMB) != 6 || simulated.FailedMigrations != 0 {
		t.Fatalf("enabled hosts: real %d, simulated %d; failed simulated migrations %d", len(ram), len(simulated.Final.RAMUsedMB), simulated.FailedMigrations)
	}
	if math.Abs(real-simulated.Final.RAMCV) > 0.05 {
		t.Fatalf("real RAM CV %.3f, simulated %.3f: more than 0.05 apart", real, simulated.Final.RAMCV)
	}
}

func cvOf(xs []float64) float64 {
	var sum, ss float64
	for _, x := range xs {
		sum += x
	}
	mean := sum / float64(len(xs))
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss/float64(len(xs))) / mean
}
