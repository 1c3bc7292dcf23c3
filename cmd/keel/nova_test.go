package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/sim/scenario"
)

// novaCloudsYAML writes a clouds.yaml whose cloud "nova" reaches cloud
// the way a Nova run with noauth2 is reached: auth_type admin_token with
// an admin token, and the compute and placement endpoints given. It
// points the commands at it.
func novaCloudsYAML(t *testing.T, cloud *clienttest.Cloud) string {
	t.Helper()
	c := cloud.Connect(t)
	cc := c.ComputeClient()
	return writeNovaCloudsYAML(t, cc.ProviderClient.Token(), strings.TrimSuffix(cc.Endpoint, "/"), cloud.Server.URL()+"/placement")
}

// writeNovaCloudsYAML writes a clouds.yaml with cloud "nova": the token
// and the compute and placement endpoints. It points the commands at it.
func writeNovaCloudsYAML(t *testing.T, token, compute, placement string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clouds.yaml")
	yaml := fmt.Sprintf(`clouds:
  nova:
    auth_type: admin_token
    auth:
      token: %s
      endpoint: %s
    compute_endpoint_override: %s
    placement_endpoint_override: %s
    region_name: RegionOne
`, token, compute, compute, placement)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	setenv(t, "OS_CLIENT_CONFIG_FILE", path)
	setenv(t, "OS_CLOUD", "")
	return path
}

// TestSimExportReadsANovaCloud: keel serves Nova's compute API and
// Placement, so the Nova reader runs against it (--as-nova) through a
// token-and-endpoints clouds.yaml. Its export has the same hosts (with
// Placement's inventories), the same servers on the same hosts with the
// same flavors, and the same groups and aggregates as keel's own; the
// nova.conf's scheduler options are in the file and a filter keel does
// not have is named on stderr.
func TestSimExportReadsANovaCloud(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3})
	useCloud(t, cloud)
	mustRun(t, "server", "create", "web1", "--flavor", "m1.small", "--wait")
	mustRun(t, "server", "create", "db1", "--flavor", "m1.medium", "--wait")
	mustRun(t, "server", "create", "big1", "--flavor", "m1.large", "--wait")
	dir := t.TempDir()
	own := filepath.Join(dir, "own.toml")
	if err := os.WriteFile(own, []byte(mustRun(t, "sim", "export")), 0o600); err != nil {
		t.Fatal(err)
	}

	novaCloudsYAML(t, cloud)
	conf := filepath.Join(dir, "nova.conf")
	if err := os.WriteFile(conf, []byte(`[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:5672/
update_resources_interval = 3600
[filter_scheduler]
host_subset_size = 3
enabled_filters = ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter,PciPassthroughFilter
weight_classes = nova.scheduler.weights.all_weighers
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, notes strings.Builder
	if err := runIO(t, &out, &notes, "sim", "export", "--os-cloud", "nova", "--as-nova", "--nova-conf", conf); err != nil {
		t.Fatalf("keel sim export --as-nova: %v\n%s", err, out.String())
	}
	wantContains(t, notes.String(), "PciPassthroughFilter is not one keel has", "Placement's inventories")
	nova := filepath.Join(dir, "nova.toml")
	if err := os.WriteFile(nova, []byte(out.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := scenario.Load(own)
	if err != nil {
		t.Fatal(err)
	}
	b, err := scenario.Load(nova)
	if err != nil {
		t.Fatalf("the Nova export does not load: %v\n%s", err, out.String())
	}
	if fmt.Sprint(a.Hosts()) != fmt.Sprint(b.Hosts()) {
		t.Errorf("hosts differ:\nkeel %v\nnova %v", a.Hosts(), b.Hosts())
	}
	key := func(s *scenario.Scenario) []string {
		var out []string
		fl := map[string]scenario.Flavor{}
		for _, f := range s.Flavors {
			fl[f.Name] = f
		}
		for _, in := range s.Instances {
			f := fl[in.Flavor]
			out = append(out, fmt.Sprintf("%s@%s:%d/%d/%d", in.Name, in.Host, f.VCPUs, f.RAMMB, f.DiskGB))
		}
		slices.Sort(out)
		return out
	}
	if ka, kb := key(a), key(b); len(ka) != 3 || !slices.Equal(ka, kb) {
		t.Errorf("instances differ:\nkeel %v\nnova %v", ka, kb)
	}
	if b.Scheduler.HostSubsetSize != 3 || slices.Contains(b.Scheduler.EnabledFilters, "PciPassthroughFilter") ||
		!slices.Contains(b.Scheduler.EnabledFilters, "ServerGroupAffinityFilter") || b.Compute.UpdateResourcesInterval != 3600 {
		t.Errorf("scheduler %+v compute %+v", b.Scheduler, b.Compute)
	}
	// The export runs in the simulator.
	wantContains(t, mustRun(t, "sim", nova, "--policy", "legacy,claim", "--drain", "h01"), "legacy", "claim")

	// Without --nova-conf, and with a nova.conf that does not set
	// enabled_filters, the filters are Nova 26's defaults (no
	// AvailabilityZoneFilter: Nova checks zones in Placement), not keel's.
	bare := filepath.Join(dir, "bare.conf")
	if err := os.WriteFile(bare, []byte("[filter_scheduler]\nhost_subset_size = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--nova-conf", bare}} {
		var out, notes strings.Builder
		if err := runIO(t, &out, &notes, append([]string{"sim", "export", "--os-cloud", "nova", "--as-nova"}, args...)...); err != nil {
			t.Fatalf("keel sim export --as-nova %v: %v", args, err)
		}
		path := filepath.Join(dir, "defaults.toml")
		if err := os.WriteFile(path, []byte(out.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := scenario.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"ComputeFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter", "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter"}
		if !slices.Equal(s.Scheduler.EnabledFilters, want) {
			t.Errorf("export %v: enabled_filters %v, want Nova 26's defaults %v", args, s.Scheduler.EnabledFilters, want)
		}
		if args == nil && strings.Contains(notes.String(), "AvailabilityZoneFilter") {
			t.Errorf("export without --nova-conf names AvailabilityZoneFilter among Nova's defaults: %s", notes.String())
		}
	}
}

// TestNovaBadInput: a cloud that does not answer, one that is not an
// OpenStack compute API, a Placement older than keel needs and a user
// without admin each fail with an error that names the thing and what to
// do.
func TestNovaBadInput(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	cc := cloud.Connect(t).ComputeClient()
	compute := strings.TrimSuffix(cc.Endpoint, "/")
	placement := cloud.Server.URL() + "/placement"
	notNova := httptest.NewServer(http.NotFoundHandler())
	defer notNova.Close()
	oldPlacement := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"versions":[{"id":"v1.0","min_version":"1.0","max_version":"1.10","status":"CURRENT"}]}`)
	}))
	defer oldPlacement.Close()
	closed := "http://127.0.0.1:1/v2.1"
	demo, err := client.Connect(context.Background(), client.Options{Cloud: "keel-demo", ConfigFile: cloud.CloudsYAML})
	if err != nil {
		t.Fatal(err)
	}
	demoToken := demo.ComputeClient().ProviderClient.Token()
	admin := cc.ProviderClient.Token()
	for _, tc := range []struct {
		name, token, compute, placement string
		want                            []string
	}{
		{"unreachable", admin, closed, placement, []string{"127.0.0.1:1", "does not answer", "check the endpoint"}},
		{"not nova", admin, notNova.URL + "/v2.1", placement, []string{notNova.URL, "does not answer as OpenStack compute"}},
		{"old placement", admin, compute, oldPlacement.URL, []string{"up to 1.10", "needs 1.14", "upgrade Placement"}},
		{"not admin", demoToken, compute, placement, []string{"os-hypervisors", "needs an admin user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeNovaCloudsYAML(t, tc.token, tc.compute, tc.placement)
			out, err := run(t, "sim", "export", "--os-cloud", "nova", "--as-nova")
			if err == nil {
				t.Fatalf("exported:\n%s", out)
			}
			wantContains(t, err.Error(), tc.want...)
		})
	}
}
