package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/aggregates"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servergroups"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/sim/scenario"
)

// TestSimExportWritesTheLiveCloud: a running keel (server and three
// fake-driver agents in-process) with servers, a server group and an
// aggregate is exported through the API; the file loads with the
// scenario loader and its hosts and instances are the cloud's.
func TestSimExportWritesTheLiveCloud(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	useCloud(t, cloud)
	ctx := context.Background()
	c := cloud.Connect(t)
	cc := c.ComputeClient()
	g, err := servergroups.Create(ctx, cc, servergroups.CreateOpts{Name: "apart", Policies: []string{"anti-affinity"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	agg, err := aggregates.Create(ctx, cc, aggregates.CreateOpts{Name: "rack1", AvailabilityZone: "az1"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aggregates.AddHost(ctx, cc, agg.ID, aggregates.AddHostOpts{Host: "h02"}).Extract(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a1", "a2"} {
		fl, err := c.FindFlavor(ctx, "m1.small")
		if err != nil {
			t.Fatal(err)
		}
		s, err := servers.Create(ctx, cc, servers.CreateOpts{Name: name, FlavorRef: fl.ID},
			servers.SchedulerHintOpts{Group: g.ID}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		mustRun(t, "server", "show", s.ID) // exists
	}
	mustRun(t, "server", "create", "web1", "--flavor", "m1.small", "--wait")
	mustRun(t, "server", "create", "db1", "--flavor", "m1.medium", "--wait")
	var list []client.Server
	for {
		list = nil
		if err := json.Unmarshal([]byte(mustRun(t, "server", "list", "-f", "json")), &list); err != nil {
			t.Fatal(err)
		}
		active := 0
		for _, s := range list {
			if s.Status == "ACTIVE" {
				active++
			}
		}
		if active == len(list) {
			break
		}
	}

	out := mustRun(t, "sim", "export", "--duration", "600")
	path := filepath.Join(t.TempDir(), "cloud.toml")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Load(path)
	if err != nil {
		t.Fatalf("the export does not load: %v\n%s", err, out)
	}
	var hosts []client.Host
	if err := json.Unmarshal([]byte(mustRun(t, "host", "list", "-f", "json")), &hosts); err != nil {
		t.Fatal(err)
	}
	specs := sc.Hosts()
	if len(specs) != len(hosts) {
		t.Fatalf("%d hosts exported, the cloud has %d:\n%s", len(specs), len(hosts), out)
	}
	for i, h := range specs {
		if h.Name != cloud.Hosts[i] || h.VCPUs != int64(cloud.Config.Keel.VCPUs) || h.MemoryMB != int64(cloud.Config.Keel.MemoryMB) ||
			h.ReservedMemoryMB != int64(cloud.Config.Default.ReservedHostMemoryMB) {
			t.Errorf("host %d exported as %+v", i, h)
		}
	}
	type placed struct{ name, host, flavor string }
	var want, got []placed
	for _, s := range list {
		want = append(want, placed{s.Name, s.Host, s.FlavorName})
	}
	for _, in := range sc.Instances {
		got = append(got, placed{in.Name, in.Host, in.Flavor})
	}
	for _, l := range [][]placed{want, got} {
		sort.Slice(l, func(i, j int) bool { return l[i].name < l[j].name })
	}
	if len(got) != 4 || len(want) != 4 {
		t.Fatalf("instances: exported %v, the cloud has %v", got, want)
	}
	for i := range want {
		if want[i] != got[i] {
			t.Errorf("instance %d: exported %v, the cloud has %v", i, got[i], want[i])
		}
	}
	groups := 0
	for _, in := range sc.Instances {
		if in.Group == "apart" {
			groups++
		}
	}
	if len(sc.ServerGroups) != 1 || sc.ServerGroups[0].Policy != "anti-affinity" || groups != 2 {
		t.Errorf("server groups %+v, %d members", sc.ServerGroups, groups)
	}
	if len(sc.Aggregates) != 1 || sc.Aggregates[0].Metadata["availability_zone"] != "az1" || len(sc.Aggregates[0].Hosts) != 1 {
		t.Errorf("aggregates %+v", sc.Aggregates)
	}
	if sc.Duration != 600 || sc.Scheduler.HostSubsetSize != cloud.Config.FilterScheduler.HostSubsetSize {
		t.Errorf("duration %v, host_subset_size %d", sc.Duration, sc.Scheduler.HostSubsetSize)
	}
	// The copy runs in the simulator.
	simOut := mustRun(t, "sim", path, "--policy", "claim", "--drain", "h01", "--rebalance")
	wantContains(t, simOut, "claim", "rebalance at t=")
}
