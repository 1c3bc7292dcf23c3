package scenario

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// lines joins its arguments as the lines of a file, so a case's line
// numbers are its argument positions (1-based).
func lines(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }

// Common blocks. flavorSmall is 5 lines, hostsH is 6.
var (
	flavorSmall = []string{`[[flavor]]`, `name = "m1.small"`, `vcpus = 1`, `ram = 2048`, `disk = 20`}
	hostsH      = []string{`[[hosts]]`, `prefix = "h"`, `count = 3`, `vcpus = 32`, `memory_mb = 131072`, `disk_gb = 2000`}
)

// file is "duration = 3600" (line 1), flavorSmall (2–6), hostsH (7–12),
// then extra from line 13.
func file(extra ...string) []byte {
	ls := append([]string{"duration = 3600"}, flavorSmall...)
	ls = append(ls, hostsH...)
	return lines(append(ls, extra...)...)
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		line int
		want string // substring of Msg
	}{
		// Syntax and structure.
		{"syntax", lines(`duration = 3600`, `seed = `), 2, "invalid TOML"},
		{"unknown top-level key", lines(`duration = 3600`, ``, `durration = 5`), 3, `durration: unknown key (did you mean "duration"?)`},
		{"unknown key in second group", file(hostsH[0], `prefix = "g"`, `count = 1`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`, `zone2 = "az"`), 19, `hosts[1].zone2: unknown key (did you mean "zone"?)`},
		{"key case matters", lines(`duration = 3600`, `[[hosts]]`, `prefix = "h"`, `Count = 3`), 4, `hosts[0].Count: unknown key (did you mean "count"?)`},
		{"unknown scheduler option", file(`[scheduler]`, `host_subset = 3`), 14, `scheduler.host_subset: unknown key`},
		{"unknown table", file(`[placement]`, `x = 1`), 13, `placement: unknown key`},
		// The type error is in the first group; BurntSushi would name the
		// line of the last group's count.
		{"wrong type, first of two groups", lines(`duration = 3600`, `[[hosts]]`, `prefix = "a"`, `count = "three"`, `[[hosts]]`, `prefix = "b"`, `count = 3`), 4, `hosts[0].count: want an integer, got the string "three"`},
		{"float for an integer", file(`[compute]`, `max_concurrent_live_migrations = 1.5`), 14, "want an integer, got the number 1.5"},
		{"string for a float", lines(`duration = "1h"`), 1, "duration: want a number"},
		{"table for an array", file(`[drain]`, `hosts = ["h01"]`), 13, "drain: want an array of tables"},
		{"nan", lines(`duration = nan`), 1, "want a finite number"},

		// Top level.
		{"duration missing", lines(`seed = 1`), 0, "duration: missing"},
		{"duration zero", lines(`seed = 1`, `duration = 0`), 2, "duration: must be > 0"},
		{"duration negative", lines(`duration = -5`), 1, "duration: must be > 0 seconds, got -5"},
		{"unknown policy, multi-line array", lines(`duration = 3600`, `policies = [`, `  "legacy",`, `  "fast",`, `]`), 4, `policies[1]: unknown policy "fast"`},
		{"duplicate policy", lines(`duration = 3600`, `policies = ["claim", "legacy", "claim"]`), 2, `policies[2]: policy "claim" is listed twice`},

		// Scheduler.
		{"negative subset", file(`[scheduler]`, `host_subset_size = -1`), 14, "scheduler.host_subset_size: must be between 0 and 100000 (0 means 1), got -1"},
		{"dotted key", lines(`duration = 3600`, `scheduler.max_attempts = -2`), 2, "scheduler.max_attempts: must be between 0 and 1000 (0 means 3), got -2"},
		{"unknown filter", file(`[scheduler]`, `enabled_filters = [`, `  "ComputeFilter",`, `  "RamFilter",`, `]`), 16, `scheduler.enabled_filters[1]: unknown filter "RamFilter"`},
		{"duplicate filter", file(`[scheduler]`, `enabled_filters = ["ComputeFilter", "ComputeFilter"]`), 14, "listed twice"},
		{"unknown weigher", file(`[scheduler]`, `weighers = ["RAMWeigher", "CrossCellWeigher"]`), 14, `scheduler.weighers[1]: unknown weigher "CrossCellWeigher"`},
		{"max instances", file(`[scheduler]`, `max_instances_per_host = 0`), 14, "max_instances_per_host: must be >= 1"},
		{"fractional limit", file(`[scheduler]`, `host_subset_size = 2`, `max_io_ops_per_host = 2.5`), 15, "scheduler.max_io_ops_per_host: want an integer, got the number 2.5"},
		{"multiplier not a number", file(`[scheduler]`, `ram_weight_multiplier = "high"`), 14, `scheduler.ram_weight_multiplier: want a number, got the string "high"`},
		{"negative soft multiplier", file(`[scheduler]`, `soft_affinity_weight_multiplier = -1.0`), 14, "scheduler.soft_affinity_weight_multiplier: must be >= 0"},
		{"misspelt multiplier", file(`[scheduler]`, `ram_weight_multiplyer = 2.0`), 14, `scheduler.ram_weight_multiplyer: unknown key (did you mean "ram_weight_multiplier"?)`},

		// Compute.
		{"negative reserved", file(`[compute]`, `reserved_host_memory_mb = -1`), 14, "compute.reserved_host_memory_mb: must be >= 0"},
		{"reserved exceeds host", file(`[compute]`, `reserved_host_memory_mb = 131072`), 11, "hosts[0].memory_mb: 131072 MiB leaves nothing"},
		{"negative bandwidth", file(`[compute]`, `migration_bandwidth_mib_s = -1`), 14, "compute.migration_bandwidth_mib_s: must be > 0"},

		// Flavors.
		{"duplicate flavor", file(flavorSmall...), 14, `flavor[1].name: flavor "m1.small" is defined twice (first at line 2)`},
		{"flavor without name", lines(`duration = 1`, `[[flavor]]`, `vcpus = 1`, `ram = 1`), 2, "flavor[0].name: missing"},
		{"flavor vcpus zero", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 0`, `ram = 1`), 4, "flavor[0].vcpus: must be > 0"},
		{"flavor ram missing", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 1`), 2, "flavor[0].ram: missing: a size in MiB (> 0) is required"},
		{"flavor disk negative", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 1`, `ram = 1`, `disk = -1`), 6, "flavor[0].disk: must be >= 0"},

		// Hosts.
		{"no hosts", lines(`duration = 1`), 0, "hosts: missing"},
		{"count zero", lines(`duration = 1`, `[[hosts]]`, `prefix = "h"`, `count = 0`), 4, "hosts[0].count: must be >= 1, got 0"},
		{"count missing", lines(`duration = 1`, ``, `[[hosts]]`, `prefix = "h"`, `vcpus = 1`), 3, "hosts[0].count: missing"},
		{"prefix empty", lines(`duration = 1`, `[[hosts]]`, `prefix = ""`, `count = 1`), 3, "hosts[0].prefix: must not be empty"},
		{"prefix missing", lines(`duration = 1`, `[[hosts]]`, `count = 1`), 2, "hosts[0].prefix: missing"},
		{"memory zero", lines(`duration = 1`, `[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 1`, `memory_mb = 0`, `disk_gb = 1`), 6, "hosts[0].memory_mb: must be > 0"},
		{"disk missing", lines(`duration = 1`, `[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 1`, `memory_mb = 1024`), 2, "hosts[0].disk_gb: missing: a size in GiB (> 0) is required"},
		{"explicit zero ratio", file(`cpu_allocation_ratio = 0`), 13, "hosts[0].cpu_allocation_ratio: must be > 0 and at most 1e+06, got 0"},
		{"negative ratio", file(`ram_allocation_ratio = -1.5`), 13, "hosts[0].ram_allocation_ratio: must be > 0"},
		{"explicit first 0", file(`first = 0`), 13, "hosts[0].first: must be between 1 and 1000000000000, got 0"},
		{"empty zone", file(`zone = ""`), 13, "hosts[0].zone: must not be empty"},
		{"audit phase beyond interval", file(`audit_phase = 60`), 13, "hosts[0].audit_phase: must be below compute.update_resources_interval (60)"},
		{"audit phase and spread", file(`audit_spread = true`, `audit_phase = 5`), 13, "exclude each other"},
		{"unknown flavor in inline instances", file(`instances = { "m1.small" = 1, "m1.huge" = 2 }`), 13, `hosts[0].instances."m1.huge": unknown flavor "m1.huge" (known: m1.small)`},
		{"negative count in instances sub-table", file(`[hosts.instances]`, `"m1.small" = 1`, ``, `# comment`, `"m1.small" = -1`), 0, ""}, // duplicate key: syntax (line checked below)
		{"negative count in instances sub-table", file(`[hosts.instances]`, `# a comment = with an equals sign`, `"m1.small" = -1`), 15, `hosts[0].instances."m1.small": instance count must be >= 0`},
		{"instances do not fit", file(`instances = { "m1.small" = 64 }`), 13, "initial instances need 131072 MiB of RAM per host but a host offers 130560 ((131072 - 512 reserved) x 1)"},
		{"duplicate host names", file(hostsH[0], `prefix = "h"`, `count = 2`, `first = 3`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`), 14, `hosts[1].prefix: host name "h03" is also generated by hosts[0] (line 7)`},

		// Events and drains.
		{"event unknown host", file(`[[event]]`, `at = 10`, `disable = ["h01", "h04"]`), 15, `event[0].disable[1]: no host is named "h04"`},
		{"event late", file(`[[event]]`, `at = 3601`, `enable = ["h01"]`), 14, "event[0].at: 3601 is outside the run [0, 3600]"},
		{"event empty", file(`[[event]]`, `at = 1`), 13, "the event does nothing"},
		{"drain unknown host on its own line", file(`[[drain]]`, `start = 0`, `hosts = [`, `  "h01",`, `  "h99",`, `]`), 17, `drain[0].hosts[1]: no host is named "h99"`},
		{"drain duplicate host", file(`[[drain]]`, `hosts = ["h01", "h01"]`), 14, `drain[0].hosts[1]: host "h01" is listed twice`},
		{"drain no hosts", file(`[[drain]]`, `start = 5`), 13, "drain[0].hosts: missing"},
		{"drain negative start", file(`[[drain]]`, `start = -1`, `hosts = ["h01"]`), 14, "drain[0].start: -1 is outside the run"},
		{"drain negative interval", file(`[[drain]]`, `interval = -60`, `hosts = ["h01"]`), 14, "drain[0].interval: must be >= 0"},
		{"drain negative in_flight", file(`[[drain]]`, `in_flight = -1`, `hosts = ["h01"]`), 14, "drain[0].in_flight: must be between 0 and 10000 (0 means 1), got -1"},
		{"drain unknown order", file(`[[drain]]`, `order = "random"`, `hosts = ["h01"]`), 14, "drain[0].order: unknown move order random (want largest, smallest or given)"},

		// Workloads.
		{"workload kind", file(`[[workload]]`, `kind = "resize"`, `rate = 1`), 14, `workload[0].kind: unknown kind "resize" (known: boot, delete, migrate)`},
		{"workload kind missing", file(`[[workload]]`, `rate = 1`), 13, "workload[0].kind: missing"},
		{"workload rate", file(`[[workload]]`, `kind = "boot"`, `rate = 0`), 15, "workload[0].rate: must be > 0"},
		{"workload end past duration", file(`[[workload]]`, `kind = "delete"`, `rate = 1`, `end = 4000`), 16, "workload[0].end: 4000 is outside the run"},
		{"workload end before start", file(`[[workload]]`, `kind = "delete"`, `rate = 1`, `start = 100`, `end = 100`), 17, "workload[0].end: must be after start (100)"},
		{"workload start at end", file(`[[workload]]`, `kind = "delete"`, `rate = 1`, `start = 3600`), 16, "workload[0].start: must be before the run's end"},
		{"workload unknown flavor", file(`[[workload]]`, `kind = "boot"`, `rate = 1`, `flavors = { "m1.tiny" = 1 }`), 16, `workload[0].flavors."m1.tiny": unknown flavor`},
		{"workload flavors on delete", file(`[[workload]]`, `kind = "delete"`, `rate = 1`, `flavors = { "m1.small" = 1 }`), 16, "only a boot workload takes flavors"},
		{"boot without flavors", lines(`duration = 10`, `[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`, `[[workload]]`, `kind = "boot"`, `rate = 1`), 9, "needs at least one [[flavor]]"},

		// Multi-line strings and comments do not confuse the line index.
		{"multi-line string", lines(`name = """`, `count = 1`, `zone = 2`, `"""`, `duration = 10`, `bogus = 1`), 6, "bogus: unknown key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("test.toml", tc.data)
			if err == nil {
				t.Fatalf("no error; parsed %+v", s)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not a *Error", err, err)
			}
			if tc.want == "" { // only "refused, with a line"
				if e.Line == 0 {
					t.Errorf("%v: no line", err)
				}
				return
			}
			if e.File != "test.toml" || e.Line != tc.line || !strings.Contains(e.Msg, tc.want) {
				t.Errorf("got  %v\nwant test.toml:%d: …%s…", err, tc.line, tc.want)
			}
			prefix := fmt.Sprintf("test.toml:%d: ", tc.line)
			if tc.line == 0 {
				prefix = "test.toml: "
			}
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("Error() = %q, want prefix %q", err.Error(), prefix)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	s, err := Parse("dir/minimal.toml", file(`[[drain]]`, `hosts = ["h01"]`, `[[workload]]`, `kind = "boot"`, `rate = 2`))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", what, got, want)
		}
	}
	check("Name", s.Name, "minimal")
	check("Policies", s.Policies, []string{"legacy", "dest-update", "claim"})
	check("HostSubsetSize", s.Scheduler.HostSubsetSize, 1)
	check("MaxAttempts", s.Scheduler.MaxAttempts, 3)
	check("EnabledFilters", s.Scheduler.EnabledFilters, []string(nil))
	check("Options", s.Scheduler.Options, map[string]float64(nil))
	check("UpdateResourcesInterval", s.Compute.UpdateResourcesInterval, 60)
	check("ReservedHostMemoryMB", *s.Compute.ReservedHostMemoryMB, int64(512))
	check("MigrationBandwidthMiBps", s.Compute.MigrationBandwidthMiBps, 1024.0)
	check("MaxConcurrentLiveMigrations", s.Compute.MaxConcurrentLiveMigrations, 1)
	g := s.HostGroups[0]
	check("First", g.First, 1)
	check("Digits", g.Digits, 2)
	check("CPUAllocationRatio", g.CPUAllocationRatio, 4.0)
	check("RAMAllocationRatio", g.RAMAllocationRatio, 1.0)
	check("DiskAllocationRatio", g.DiskAllocationRatio, 1.0)
	check("Zone", g.Zone, "nova")
	d := s.Drains[0]
	check("InFlight", d.InFlight, 1)
	check("Disable", *d.Disable, true)
	w := s.Workloads[0]
	check("End", w.End, 3600.0)
	check("Flavors", w.Flavors, map[string]float64{"m1.small": 1})

	// Explicit values survive, including an explicit 0 where 0 is allowed.
	s, err = Parse("x.toml", file(`zone = "az1"`, `[compute]`, `reserved_host_memory_mb = 0`, `update_resources_interval = -1`,
		`[[drain]]`, `hosts = ["h01"]`, `disable = false`, `in_flight = 0`))
	if err != nil {
		t.Fatal(err)
	}
	check("explicit ReservedHostMemoryMB", *s.Compute.ReservedHostMemoryMB, int64(0))
	check("explicit UpdateResourcesInterval", s.Compute.UpdateResourcesInterval, -1)
	check("explicit Zone", s.HostGroups[0].Zone, "az1")
	check("explicit Disable", *s.Drains[0].Disable, false)
	check("InFlight 0 → 1", s.Drains[0].InFlight, 1)

	// Idempotent.
	before := fmt.Sprintf("%+v", *s)
	s.ApplyDefaults()
	if after := fmt.Sprintf("%+v", *s); after != before {
		t.Errorf("ApplyDefaults is not idempotent:\n%s\n%s", before, after)
	}
}

func TestHostNames(t *testing.T) {
	tests := []struct {
		g    HostGroup
		want []string
	}{
		{HostGroup{Prefix: "h", Count: 3}, []string{"h01", "h02", "h03"}},
		{HostGroup{Prefix: "h", Count: 2, First: 9}, []string{"h09", "h10"}},
		{HostGroup{Prefix: "node", Count: 3, First: 998}, []string{"node0998", "node0999", "node1000"}},
		{HostGroup{Prefix: "c-", Count: 2, First: 99}, []string{"c-099", "c-100"}},
		{HostGroup{Prefix: "h", Count: 2, Digits: 5}, []string{"h00001", "h00002"}},
		{HostGroup{Prefix: "h", Count: 2, First: 9, Digits: 1}, []string{"h9", "h10"}},
		{HostGroup{Prefix: "h", Count: 0}, nil},
	}
	for _, tc := range tests {
		if got := tc.g.HostNames(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: got %v, want %v", tc.g, got, tc.want)
		}
	}
	// Hundred hosts: three digits.
	names := HostGroup{Prefix: "h", Count: 100}.HostNames()
	if names[0] != "h001" || names[99] != "h100" {
		t.Errorf("100 hosts: %s … %s", names[0], names[99])
	}
}

func TestHostsAndSpread(t *testing.T) {
	s, err := Parse("x.toml", lines(`duration = 10`,
		`[compute]`, `update_resources_interval = 600`,
		`[[hosts]]`, `prefix = "a"`, `count = 4`, `vcpus = 8`, `memory_mb = 4096`, `disk_gb = 10`, `audit_spread = true`,
		`[[hosts]]`, `prefix = "b"`, `count = 1`, `vcpus = 16`, `memory_mb = 8192`, `disk_gb = 20`, `audit_phase = 30`, `zone = "z2"`, `disabled = true`))
	if err != nil {
		t.Fatal(err)
	}
	hs := s.Hosts()
	var got []string
	for _, h := range hs {
		got = append(got, fmt.Sprintf("%s g%d %dc %gx %dM %s phase=%g dis=%v", h.Name, h.Group, h.VCPUs, h.CPUAllocationRatio, h.MemoryMB, h.Zone, h.AuditPhase, h.Disabled))
	}
	want := []string{
		"a01 g0 8c 4x 4096M nova phase=0 dis=false",
		"a02 g0 8c 4x 4096M nova phase=150 dis=false",
		"a03 g0 8c 4x 4096M nova phase=300 dis=false",
		"a04 g0 8c 4x 4096M nova phase=450 dis=false",
		"b01 g1 16c 4x 8192M z2 phase=30 dis=true",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Hosts:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFlavorByName(t *testing.T) {
	s := &Scenario{Flavors: []Flavor{{Name: "a", VCPUs: 1}, {Name: "b", VCPUs: 2}}}
	if f, ok := s.FlavorByName("b"); !ok || f.VCPUs != 2 {
		t.Errorf("b: %+v %v", f, ok)
	}
	if _, ok := s.FlavorByName("c"); ok {
		t.Error("c found")
	}
}

func TestSeedHour(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(here), "..", "..", "..", "scenarios", "seed-hour.toml")
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	reserved := int64(512)
	down, report := 60.0, 10.0
	yes := true
	small := map[string]int{"m1.small": 4, "m1.medium": 4, "m1.large": 4}
	want := &Scenario{
		Name:     "seed-hour",
		Seed:     1,
		Duration: 3600,
		Policies: []string{"legacy", "dest-update", "claim"},
		Scheduler: Scheduler{
			HostSubsetSize:              3,
			ShuffleBestSameWeighedHosts: false,
			MaxAttempts:                 3,
			EnabledFilters: []string{"ComputeFilter", "AvailabilityZoneFilter", "ComputeCapabilitiesFilter",
				"ImagePropertiesFilter", "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter"},
			Weighers: []string{"RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher", "BuildFailureWeigher",
				"NumInstancesWeigher", "ServerGroupSoftAffinityWeigher", "ServerGroupSoftAntiAffinityWeigher"},
			Options: map[string]float64{"ram_weight_multiplier": 1, "cpu_weight_multiplier": 1, "disk_weight_multiplier": 1,
				"io_ops_weight_multiplier": -1, "build_failure_weight_multiplier": 1000000, "num_instances_weight_multiplier": 0,
				"soft_affinity_weight_multiplier": 1, "soft_anti_affinity_weight_multiplier": 1},
			ServiceDownTime: &down,
		},
		Compute: Compute{
			UpdateResourcesInterval:     3600,
			ReservedHostMemoryMB:        &reserved,
			MigrationBandwidthMiBps:     1024,
			MaxConcurrentLiveMigrations: 1,
			ReportInterval:              &report,
		},
		Flavors: []Flavor{
			{Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20},
			{Name: "m1.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 40},
			{Name: "m1.large", VCPUs: 4, RAMMB: 8192, DiskGB: 80},
		},
		HostGroups: []HostGroup{
			{Prefix: "h", Count: 2, First: 1, Digits: 2, VCPUs: 32, CPUAllocationRatio: 4, MemoryMB: 131072, RAMAllocationRatio: 1,
				DiskGB: 2000, DiskAllocationRatio: 1, Zone: "nova", Instances: small, Disabled: true},
			{Prefix: "h", Count: 10, First: 3, Digits: 2, VCPUs: 32, CPUAllocationRatio: 4, MemoryMB: 131072, RAMAllocationRatio: 1,
				DiskGB: 2000, DiskAllocationRatio: 1, Zone: "nova", Instances: small},
		},
		Drains: []Drain{{Start: 30, Interval: 60, InFlight: 1, Hosts: []string{"h01", "h02"}, Disable: &yes}},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("seed-hour:\n got %s\nwant %s", dump(s), dump(want))
	}

	hosts := s.Hosts()
	if len(hosts) != 12 {
		t.Fatalf("%d hosts", len(hosts))
	}
	for i, h := range hosts {
		if name := fmt.Sprintf("h%02d", i+1); h.Name != name || h.Disabled != (i < 2) || h.AuditPhase != 0 {
			t.Errorf("host %d: %+v", i, h)
		}
	}
	// 24 instances to drain.
	n := 0
	for _, h := range hosts[:2] {
		for _, c := range h.Instances {
			n += c
		}
	}
	if n != 24 {
		t.Errorf("%d instances on the drained hosts, want 24", n)
	}
}

// dump prints a scenario with pointers followed.
func dump(s *Scenario) string {
	var b strings.Builder
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				b.WriteString("nil")
			} else {
				walk(v.Elem())
			}
		case reflect.Struct:
			b.WriteString("{")
			for i := 0; i < v.NumField(); i++ {
				fmt.Fprintf(&b, "%s:", v.Type().Field(i).Name)
				walk(v.Field(i))
				b.WriteString(" ")
			}
			b.WriteString("}")
		case reflect.Slice:
			b.WriteString("[")
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
				b.WriteString(" ")
			}
			b.WriteString("]")
		default:
			fmt.Fprintf(&b, "%v", v.Interface())
		}
	}
	walk(reflect.ValueOf(s))
	return b.String()
}

func TestGenerate(t *testing.T) {
	s := Generate(10000, 24, 7)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Duration != 24*3600 || s.Seed != 7 || s.Scheduler.HostSubsetSize != 3 || s.Compute.UpdateResourcesInterval != 3600 {
		t.Errorf("options: %+v", s)
	}
	hosts := s.Hosts()
	if len(hosts) != 10000 {
		t.Fatalf("%d hosts", len(hosts))
	}
	seen := map[string]bool{}
	sizes := map[int64]int{}
	for _, h := range hosts {
		if seen[h.Name] {
			t.Fatalf("duplicate %s", h.Name)
		}
		seen[h.Name] = true
		sizes[h.MemoryMB]++
		var ram int64
		for name, n := range h.Instances {
			f, ok := s.FlavorByName(name)
			if !ok {
				t.Fatalf("unknown flavor %s", name)
			}
			ram += int64(n) * f.RAMMB
		}
		if full := float64(ram) / float64(h.MemoryMB-512); full < 0.40 || full > 0.50 {
			t.Fatalf("%s is %.0f%% full", h.Name, 100*full)
		}
		if h.AuditPhase < 0 || h.AuditPhase >= 3600 {
			t.Fatalf("%s: phase %v", h.Name, h.AuditPhase)
		}
	}
	if sizes[128*1024] != 6000 || sizes[256*1024] != 3000 || sizes[64*1024] != 1000 {
		t.Errorf("group sizes %v", sizes)
	}
	kinds := map[string]float64{}
	for _, w := range s.Workloads {
		kinds[w.Kind] = w.Rate
		if w.End != s.Duration {
			t.Errorf("%s ends at %v", w.Kind, w.End)
		}
	}
	if !reflect.DeepEqual(kinds, map[string]float64{"boot": 1, "delete": 1, "migrate": 1}) {
		t.Errorf("workloads %v", kinds)
	}
	// Tiny sizes still make a valid scenario.
	for _, n := range []int{1, 2, 3, 7} {
		if err := Generate(n, 0.5, 1).Validate(); err != nil {
			t.Errorf("Generate(%d): %v", n, err)
		}
	}
}

func TestValidateWithoutFile(t *testing.T) {
	s := Generate(10, 1, 1)
	s.Workloads[0].Kind = "resize"
	err := s.Validate()
	if err == nil || err.Error() != `generated-10-hosts-1h: workload[0].kind: unknown kind "resize" (known: boot, delete, migrate)` {
		t.Errorf("got %v", err)
	}
}

func TestLineIndex(t *testing.T) {
	ix := buildIndex(string(lines(
		`# header`,
		`a = 1`,
		`b.c = "x # not a comment"`,
		`[t]`,
		`k = [ 1,`,
		`  [2, 3], # c`,
		`  4 ]`,
		`[[arr]]`,
		`x = { y = 1, "q.r" = { z = 2 } }`,
		`[[arr]]`,
		`[arr.sub]`,
		`w = 'lit'`,
		`[[arr.list]]`,
		`v = 1979-05-27 07:32:00`,
		`u = 2`,
	)))
	want := map[string]int{
		"a": 2, "b": 3, "b.c": 3, "t": 4, "t.k": 5, "t.k[0]": 5, "t.k[1]": 6, "t.k[1][1]": 6, "t.k[2]": 7,
		"arr": 8, "arr[0]": 8, "arr[0].x": 9, "arr[0].x.y": 9, `arr[0].x."q.r".z`: 9,
		"arr[1]": 10, "arr[1].sub": 11, "arr[1].sub.w": 12, "arr[1].list[0]": 13, "arr[1].list[0].v": 14, "arr[1].list[0].u": 15,
	}
	for p, l := range want {
		if got := ix.line(p); got != l {
			t.Errorf("line(%s) = %d, want %d", p, got, l)
		}
	}
	if got := ix.line("arr[1].missing"); got != 10 {
		t.Errorf("fallback to parent: %d", got)
	}
	if got := ix.line(`arr[0].x."q.r".missing`); got != 9 {
		t.Errorf("fallback through a quoted key: %d", got)
	}
	if ix.line("nothing") != 0 {
		t.Error("unknown path has a line")
	}
}

// TestLimitsLetTheShippedScenariosRun: the limits on what a run costs
// (MaxOperations, MaxAuditWork, …) refuse none of the shipped scenarios
// nor the generated 10,000-host day, and the day has room to spare.
func TestLimitsLetTheShippedScenariosRun(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "scenarios", "*.toml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("shipped scenarios: %v, %v", files, err)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, g := range []struct {
		hosts int
		hours float64
	}{{10000, 24}, {10000, 72}, {60000, 24}} {
		if err := Generate(g.hosts, g.hours, 1).Validate(); err != nil {
			t.Errorf("--generate %d --hours %v: %v", g.hosts, g.hours, err)
		}
	}
}

// TestMeasureWorkOnlyUnderClaim: only the claim policy reports measured
// usage on a cadence (legacy measures at the audits, dest-update after
// moves), so a scenario past MaxMeasureWork without claim in its
// policies is accepted, and with claim refused.
func TestMeasureWorkOnlyUnderClaim(t *testing.T) {
	body := []string{`[metrics]`, `weight_setting = ["cpu.percent=-1.0"]`, `report_interval = 1`, `[compute]`, `update_resources_interval = -1`,
		`[[hosts]]`, `prefix = "h"`, `count = 100000`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`}
	if _, err := Parse("ok.toml", lines(append([]string{`duration = 3600`, `policies = ["legacy", "dest-update"]`}, body...)...)); err != nil {
		t.Errorf("without claim: %v", err)
	}
	_, err := Parse("bad.toml", lines(append([]string{`duration = 3600`, `policies = ["legacy", "claim"]`}, body...)...))
	if err == nil || !strings.Contains(err.Error(), "bad.toml:5: metrics.report_interval: the claim policy's measured-usage reports") {
		t.Errorf("with claim: %v", err)
	}
}
