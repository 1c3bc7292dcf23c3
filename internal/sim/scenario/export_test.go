package scenario

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
)

func snapHost(name string, memReserved int64) SnapshotHost {
	cpu := placement.NewInventory(32)
	cpu.AllocationRatio = 4
	mem := placement.NewInventory(131072)
	mem.Reserved = memReserved
	return SnapshotHost{Name: name, Zone: "nova", Inventories: placement.Inventories{
		placement.VCPU: cpu, placement.MemoryMB: mem, placement.DiskGB: placement.NewInventory(2000)}}
}

// TestExportRoundTrips: a snapshot with odd names, per-host reserved RAM,
// traits, a disabled host, a host the simulator cannot hold, two flavors of
// one name, server groups and aggregates becomes a scenario that writes to
// TOML and parses back to the same scenario.
func TestExportRoundTrips(t *testing.T) {
	cfg := scheduler.DefaultConfig()
	small := records.Flavor{ID: "1", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20}
	odd := records.Flavor{ID: "9", Name: "m1.small", VCPUs: 2, RAMMB: 2048, DiskGB: 20, ExtraSpecs: map[string]string{"trait:CUSTOM_FAST": "required"}}
	snap := Snapshot{
		Scheduler: SnapshotScheduler{EnabledFilters: cfg.EnabledFilters, Weighers: cfg.Weighers, HostSubsetSize: 3, MaxAttempts: 3,
			Options: cfg.Options, ServiceDownTime: 60},
		Compute: SnapshotCompute{UpdateResourcesInterval: 3600, MigrationBandwidthMiBps: 1024, MaxConcurrentLiveMigrations: 1, ReportInterval: 10},
		Hosts: []SnapshotHost{snapHost("compute-a", 512), snapHost("compute-b", 512), snapHost("odd \"host\"", 1024),
			{Name: "storage", Inventories: placement.Inventories{placement.DiskGB: placement.NewInventory(10)}}},
		ServerGroups: []records.ServerGroup{{UUID: "g-1111111111", Name: "web", Policy: "anti-affinity"}, {UUID: "g-2222222222", Name: "web", Policy: "affinity"}},
		Aggregates:   []records.Aggregate{{Name: "fast", Hosts: []string{"compute-b", "storage"}, Metadata: map[string]string{"availability_zone": "az1", "ssd": "true"}}},
		Instances: []SnapshotInstance{
			{UUID: "u1", Name: "web-1", Host: "compute-a", Flavor: small, Group: "g-1111111111"},
			{UUID: "u2", Name: "web-2", Host: "compute-b", Flavor: small, Group: "g-1111111111", RequestedZone: "az1"},
			{UUID: "u3", Name: "db", Host: "odd \"host\"", Flavor: odd},
			{UUID: "u4", Name: "shelved", Flavor: small},
		},
	}
	snap.Hosts[1].Traits = []string{"CUSTOM_FAST"}
	snap.Hosts[2].Disabled = true
	s, notes, err := FromSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "storage") {
		t.Errorf("notes %q, want one about the storage host", notes)
	}
	var buf bytes.Buffer
	if err := s.WriteTOML(&buf, "exported for a test"); err != nil {
		t.Fatal(err)
	}
	back, err := Parse("cloud.toml", buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	want := *s
	want.ApplyDefaults()
	if !reflect.DeepEqual(*back, want) {
		t.Fatalf("parsed back:\n%+v\nwant:\n%+v\nfile:\n%s", *back, want, buf.String())
	}
	hosts := back.Hosts()
	if len(hosts) != 3 || hosts[2].Name != `odd "host"` || hosts[2].ReservedMemoryMB != 1024 || hosts[0].ReservedMemoryMB != 512 || !hosts[2].Disabled {
		t.Fatalf("hosts: %+v", hosts)
	}
	if len(back.Flavors) != 2 || back.Flavors[1].Name != "m1.small-9" || back.Flavors[1].ExtraSpecs["trait:CUSTOM_FAST"] != "required" {
		t.Errorf("flavors: %+v", back.Flavors)
	}
	if len(back.Instances) != 3 || back.Instances[0].Group != "web" || back.Instances[2].Flavor != "m1.small-9" || back.Instances[1].Zone != "az1" {
		t.Errorf("instances: %+v", back.Instances)
	}
	if back.ServerGroups[1].Name != "web-g-222222" || !reflect.DeepEqual(back.Aggregates[0].Hosts, []string{"compute-b"}) {
		t.Errorf("groups %+v, aggregates %+v", back.ServerGroups, back.Aggregates)
	}
	if back.Scheduler.HostSubsetSize != 3 || back.Scheduler.Options["max_instances_per_host"] != 50 {
		t.Errorf("scheduler: %+v", back.Scheduler)
	}
}

// TestPlacementRefusals: the new sections' mistakes are refused with
// their path.
func TestPlacementRefusals(t *testing.T) {
	base := "duration = 60\n[[flavor]]\nname = \"s\"\nvcpus = 1\nram = 1024\n[[hosts]]\nname = \"a\"\nvcpus = 2\nmemory_mb = 4096\ndisk_gb = 10\n"
	for _, tc := range []struct{ extra, want string }{
		{"[[instance]]\nhost = \"b\"\nflavor = \"s\"\n", `instance[0].host: no host is named "b"`},
		{"[[instance]]\nhost = \"a\"\nflavor = \"x\"\n", `instance[0].flavor: unknown flavor "x"`},
		{"[[instance]]\nhost = \"a\"\nflavor = \"s\"\ngroup = \"g\"\n", `instance[0].group: no [[server_group]] is named "g"`},
		{strings.Repeat("[[instance]]\nhost = \"a\"\nflavor = \"s\"\n", 4), `instance[3].host: host a's instances need 4096 MiB of RAM with this one but it offers 3584`},
		{"[[server_group]]\nname = \"g\"\npolicy = \"spread\"\n", `server_group[0].policy: unknown policy "spread"`},
		{"[[aggregate]]\nname = \"x\"\nhosts = [\"a\", \"z\"]\n", `aggregate[0].hosts[1]: no host is named "z"`},
		{"[[hosts]]\nname = \"b\"\nprefix = \"h\"\nvcpus = 2\nmemory_mb = 4096\ndisk_gb = 10\n", `hosts[1].prefix: name and prefix exclude each other`},
		{"[[hosts]]\nname = \"a\"\nvcpus = 2\nmemory_mb = 4096\ndisk_gb = 10\n", `host name "a" is also generated by hosts[0]`},
	} {
		_, err := Parse("x.toml", []byte(base+tc.extra))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.extra, err, tc.want)
		}
	}
}
