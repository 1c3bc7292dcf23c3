package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/scheduler"
)

// values drops origins, so that configs compare by their values.
func values(c Config) Config { c.origins = nil; return c }

func mustParse(t *testing.T, text string) (Config, []Warning) {
	t.Helper()
	cfg, warns, err := Parse("keel.conf", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg, warns
}

func TestDefaults(t *testing.T) {
	d := Default()
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	want := []struct {
		name     string
		got, exp any
	}{
		{"host", d.Default.Host, host},
		{"update_resources_interval", d.Default.UpdateResourcesInterval, 0},
		{"reserved_host_memory_mb", d.Default.ReservedHostMemoryMB, 512},
		{"reserved_host_disk_mb", d.Default.ReservedHostDiskMB, 0},
		{"reserved_host_cpus", d.Default.ReservedHostCPUs, 0},
		{"cpu_allocation_ratio", d.Default.CPUAllocationRatio, 4.0},
		{"ram_allocation_ratio", d.Default.RAMAllocationRatio, 1.0},
		{"disk_allocation_ratio", d.Default.DiskAllocationRatio, 1.0},
		{"max_concurrent_live_migrations", d.Default.MaxConcurrentLiveMigrations, 1},
		{"service_down_time", d.Default.ServiceDownTime, 60 * time.Second},
		{"report_interval", d.Default.ReportInterval, 10 * time.Second},
		{"host_subset_size", d.FilterScheduler.HostSubsetSize, 1},
		{"weight_classes", d.FilterScheduler.WeightClasses, scheduler.KnownWeighers},
		{"max_attempts", d.Scheduler.MaxAttempts, 3},
		{"live_migration_bandwidth", d.Libvirt.LiveMigrationBandwidth, 0},
		{"live_migration_downtime", d.Libvirt.LiveMigrationDowntime, 500 * time.Millisecond},
		{"live_migration_completion_timeout", d.Libvirt.LiveMigrationCompletionTimeout, 800 * time.Second},
		{"live_migration_permit_post_copy", d.Libvirt.LiveMigrationPermitPostCopy, false},
		{"live_migration_timeout_action", d.Libvirt.LiveMigrationTimeoutAction, "abort"},
		{"listen", d.Keel.Listen, "127.0.0.1:8080"},
		{"data_dir", d.Keel.DataDir, "./.keel"},
		{"nats_url", d.Keel.NATSURL, ""},
		{"nats_listen", d.Keel.NATSListen, "127.0.0.1:0"},
		{"db", d.Keel.DB, ""},
		{"fake_spawn_seconds", d.Keel.FakeSpawnTime, time.Duration(0)},
		{"vcpus", d.Keel.VCPUs, 32},
		{"memory_mb", d.Keel.MemoryMB, 131072},
		{"disk_gb", d.Keel.DiskGB, 2000},
		{"policy", d.Keel.Policy, scheduler.PolicyClaim},
		{"token_ttl", d.API.TokenTTL, time.Hour},
	}
	for _, w := range want {
		if !reflect.DeepEqual(w.got, w.exp) {
			t.Errorf("%s = %v, want %v", w.name, w.got, w.exp)
		}
	}
	if got := d.SchedulerConfig(); !reflect.DeepEqual(got, scheduler.DefaultConfig()) {
		t.Errorf("Default().SchedulerConfig() = %+v\nwant scheduler.DefaultConfig() %+v", got, scheduler.DefaultConfig())
	}
	if err := d.SchedulerConfig().Validate(); err != nil {
		t.Errorf("default scheduler config invalid: %v", err)
	}
	// An empty file is the defaults.
	cfg, warns := mustParse(t, "")
	if len(warns) != 0 || !reflect.DeepEqual(values(cfg), values(d)) {
		t.Errorf("empty file: %+v, warnings %v", cfg, warns)
	}
}

func TestUpdateResourcesPeriod(t *testing.T) {
	for _, c := range []struct {
		interval int
		want     time.Duration
	}{{0, 60 * time.Second}, {-1, 0}, {-60, 0}, {5, 5 * time.Second}, {600, 10 * time.Minute}} {
		if got := (DefaultGroup{UpdateResourcesInterval: c.interval}).UpdateResourcesPeriod(); got != c.want {
			t.Errorf("update_resources_interval %d: period %v, want %v", c.interval, got, c.want)
		}
	}
}

func TestParseValues(t *testing.T) {
	cfg, warns := mustParse(t, `# a nova.conf
; another comment
[DEFAULT]
host = compute-1.example.org
update_resources_interval = -1
reserved_host_memory_mb=1024
reserved_host_disk_mb :2048
cpu_allocation_ratio = 16
ram_allocation_ratio = 1.5
service_down_time = 120
state_path = /var/lib/keel

[filter_scheduler]
enabled_filters = ComputeFilter , NumInstancesFilter,IoOpsFilter,
weight_classes = nova.scheduler.weights.ram.RAMWeigher, CPUWeigher
io_ops_weight_multiplier = -2.5
shuffle_best_same_weighed_hosts = Yes

[SCHEDULER]
max_attempts = "5"

[libvirt]
live_migration_downtime = 250
live_migration_permit_post_copy = ON
live_migration_timeout_action = 'force_complete'

[keel]
listen = 0.0.0.0:9000
nats_url = nats://10.0.0.1:4222
db =
policy = legacy
`)
	if len(warns) != 0 {
		t.Errorf("warnings: %v", warns)
	}
	checks := []struct {
		name     string
		got, exp any
	}{
		{"host", cfg.Default.Host, "compute-1.example.org"},
		{"update_resources_interval", cfg.Default.UpdateResourcesInterval, -1},
		{"reserved_host_memory_mb", cfg.Default.ReservedHostMemoryMB, 1024},
		{"reserved_host_disk_mb (colon)", cfg.Default.ReservedHostDiskMB, 2048},
		{"cpu_allocation_ratio", cfg.Default.CPUAllocationRatio, 16.0},
		{"ram_allocation_ratio", cfg.Default.RAMAllocationRatio, 1.5},
		{"service_down_time", cfg.Default.ServiceDownTime, 2 * time.Minute},
		{"state_path → data_dir", cfg.Keel.DataDir, "/var/lib/keel"},
		{"enabled_filters", cfg.FilterScheduler.EnabledFilters, []string{"ComputeFilter", "NumInstancesFilter", "IoOpsFilter"}},
		{"weight_classes", cfg.FilterScheduler.WeightClasses, []string{"RAMWeigher", "CPUWeigher"}},
		{"io_ops_weight_multiplier", cfg.FilterScheduler.Options["io_ops_weight_multiplier"], -2.5},
		{"shuffle_best_same_weighed_hosts", cfg.FilterScheduler.ShuffleBestSameWeighedHosts, true},
		{"max_attempts (quoted, group case)", cfg.Scheduler.MaxAttempts, 5},
		{"live_migration_downtime", cfg.Libvirt.LiveMigrationDowntime, 250 * time.Millisecond},
		{"live_migration_permit_post_copy", cfg.Libvirt.LiveMigrationPermitPostCopy, true},
		{"live_migration_timeout_action", cfg.Libvirt.LiveMigrationTimeoutAction, "force_complete"},
		{"listen", cfg.Keel.Listen, "0.0.0.0:9000"},
		{"nats_url", cfg.Keel.NATSURL, "nats://10.0.0.1:4222"},
		{"db", cfg.Keel.DB, ""},
		{"policy", cfg.Keel.Policy, scheduler.PolicyLegacy},
		// untouched
		{"disk_allocation_ratio", cfg.Default.DiskAllocationRatio, 1.0},
		{"host_subset_size", cfg.FilterScheduler.HostSubsetSize, 1},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.exp) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.exp)
		}
	}
	for _, o := range []struct {
		group, option string
		want          Origin
	}{
		{"DEFAULT", "host", Origin{File: "keel.conf", Line: 4}},
		{"keel", "data_dir", Origin{File: "keel.conf", Line: 11}},
		{"DEFAULT", "state_path", Origin{File: "keel.conf", Line: 11}},
		{"scheduler", "max_attempts", Origin{File: "keel.conf", Line: 20}},
		{"Scheduler", "max_attempts", Origin{File: "keel.conf", Line: 20}},
		{"filter_scheduler", "host_subset_size", Origin{}},
		{"nowhere", "nothing", Origin{}},
	} {
		if got := cfg.Origin(o.group, o.option); got != o.want {
			t.Errorf("Origin(%s, %s) = %v, want %v", o.group, o.option, got, o.want)
		}
	}
	if s := cfg.Origin("DEFAULT", "host").String(); s != "keel.conf:4" {
		t.Errorf("origin string %q", s)
	}
	if !cfg.Origin("DEFAULT", "debug").IsDefault() || cfg.Origin("DEFAULT", "debug").String() != "default" {
		t.Error("an unset option's origin is not the default")
	}
}

func TestBooleans(t *testing.T) {
	for _, c := range []struct {
		text string
		want bool
	}{
		{"true", true}, {"True", true}, {"TRUE", true}, {"yes", true}, {"Yes", true}, {"on", true}, {"On", true}, {"1", true},
		{"false", false}, {"False", false}, {"no", false}, {"NO", false}, {"off", false}, {"OFF", false}, {"0", false},
	} {
		cfg, _ := mustParse(t, "[filter_scheduler]\nshuffle_best_same_weighed_hosts = "+c.text+"\n")
		if cfg.FilterScheduler.ShuffleBestSameWeighedHosts != c.want {
			t.Errorf("%q read as %v", c.text, !c.want)
		}
	}
}

func TestLists(t *testing.T) {
	for _, c := range []struct {
		option, text string
		want         []string
	}{
		{"enabled_filters", "", []string{}},
		{"enabled_filters", "ComputeFilter", []string{"ComputeFilter"}},
		{"enabled_filters", " ComputeFilter ,, SameHostFilter , ", []string{"ComputeFilter", "SameHostFilter"}},
		{"weight_classes", "nova.scheduler.weights.all_weighers", scheduler.KnownWeighers},
		{"weight_classes", "IoOpsWeigher, nova.scheduler.weights.all_weighers", append([]string{"IoOpsWeigher"}, without(scheduler.KnownWeighers, "IoOpsWeigher")...)},
		{"weight_classes", "RAMWeigher,RAMWeigher,nova.scheduler.weights.ram.RAMWeigher", []string{"RAMWeigher"}},
		{"weight_classes", "", []string{}},
	} {
		cfg, _ := mustParse(t, "[filter_scheduler]\n"+c.option+" = "+c.text+"\n")
		got := cfg.FilterScheduler.EnabledFilters
		if c.option == "weight_classes" {
			got = cfg.FilterScheduler.WeightClasses
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s = %q: got %q, want %q", c.option, c.text, got, c.want)
		}
	}
}

func without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		name          string
		text          string
		line          int
		group, option string
		msg           string // a substring of Msg
	}{
		{"integer", "[DEFAULT]\n\nreserved_host_memory_mb = lots\n", 3, "DEFAULT", "reserved_host_memory_mb", `invalid integer "lots"`},
		{"empty integer", "[DEFAULT]\nreserved_host_memory_mb =\n", 2, "DEFAULT", "reserved_host_memory_mb", "empty value"},
		{"integer range", "[DEFAULT]\nreserved_host_cpus = 99999999999999999999\n", 2, "DEFAULT", "reserved_host_cpus", "out of range"},
		{"inline comment", "[scheduler]\nmax_attempts = 3 # three\n", 2, "scheduler", "max_attempts", "comments must be on a line of their own"},
		{"float", "[DEFAULT]\ncpu_allocation_ratio = four\n", 2, "DEFAULT", "cpu_allocation_ratio", `invalid number "four"`},
		{"float NaN", "[DEFAULT]\nram_allocation_ratio = NaN\n", 2, "DEFAULT", "ram_allocation_ratio", "invalid number"},
		{"negative ratio", "[DEFAULT]\ndisk_allocation_ratio = -1.0\n", 2, "DEFAULT", "disk_allocation_ratio", "must be at least 0, got -1.0"},
		{"boolean", "# x\n[filter_scheduler]\nshuffle_best_same_weighed_hosts = maybe\n", 3, "filter_scheduler", "shuffle_best_same_weighed_hosts", `invalid boolean "maybe"`},
		{"duration", "[DEFAULT]\nservice_down_time = 60s\n", 2, "DEFAULT", "service_down_time", "want whole seconds"},
		{"negative duration", "[DEFAULT]\nreport_interval = -5\n", 2, "DEFAULT", "report_interval", "must be at least 0, got -5"},
		{"milliseconds minimum", "[libvirt]\nlive_migration_downtime = 50\n", 2, "libvirt", "live_migration_downtime", "must be at least 100, got 50"},
		{"minimum", "[filter_scheduler]\nhost_subset_size = 0\n", 2, "filter_scheduler", "host_subset_size", "must be at least 1, got 0"},
		{"max_attempts", "[scheduler]\nmax_attempts = 0\n", 2, "scheduler", "max_attempts", "must be at least 1"},
		{"unknown filter", "[filter_scheduler]\nenabled_filters = ComputeFilter, RamFilter\n", 2, "filter_scheduler", "enabled_filters", `unknown filter "RamFilter"`},
		{"unknown weigher", "[filter_scheduler]\nweight_classes = nova.scheduler.weights.cross_cell.CrossCellWeigher\n", 2, "filter_scheduler", "weight_classes", `unknown weigher "nova.scheduler.weights.cross_cell.CrossCellWeigher"`},
		{"choice", "[libvirt]\nlive_migration_timeout_action = retry\n", 2, "libvirt", "live_migration_timeout_action", `invalid value "retry" (one of: abort, force_complete)`},
		{"policy", "[keel]\npolicy = optimistic\n", 2, "keel", "policy", `invalid value "optimistic" (one of: legacy, dest-update, claim)`},
		{"address", "[keel]\nlisten = 8080\n", 2, "keel", "listen", "want host:port"},
		{"port", "[keel]\nnats_listen = localhost:99999\n", 2, "keel", "nats_listen", "invalid port"},
		{"empty host", "[DEFAULT]\nhost =\n", 2, "DEFAULT", "host", "must not be empty"},
		{"host with space", "[DEFAULT]\nhost = my host\n", 2, "DEFAULT", "host", "invalid host name"},
		{"empty data dir via alias", "[DEFAULT]\nstate_path = \"\"\n", 2, "DEFAULT", "state_path", "must not be empty"},
		{"fake host size", "[keel]\nvcpus = 0\n", 2, "keel", "vcpus", "must be at least 1"},
		{"token ttl", "[identity]\ntoken_ttl = 0\n", 2, "identity", "token_ttl", "must be at least 1"},
		{"not an assignment", "[DEFAULT]\nhost\n", 2, "DEFAULT", "", `expected "option = value"`},
		{"empty option name", "[DEFAULT]\n= 4\n", 2, "DEFAULT", "", "empty option name"},
		{"outside any group", "# top\nhost = a\n[DEFAULT]\n", 2, "", "host", "outside any group"},
		{"header not closed", "[DEFAULT]\nhost = a\n[filter_scheduler\n", 3, "", "", "does not end with ]"},
		{"comment after header", "[DEFAULT] # main\n", 1, "", "", "does not end with ]"},
		{"empty header", "[]\n", 1, "", "", "empty group name"},
		{"indented line", "[DEFAULT]\nhost = a\n  b\n", 3, "", "", "continuation"},
		{"indented comment", "[DEFAULT]\n\t# note\n", 2, "", "", "indented line"},
		{"error in an unread group is still syntax", "[glance]\napi_servers\n", 2, "glance", "", `expected "option = value"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, _, err := Parse("nova.conf", []byte(c.text))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if e.File != "nova.conf" || e.Line != c.line || e.Group != c.group || e.Option != c.option || !strings.Contains(e.Msg, c.msg) {
				t.Errorf("got %#v\nwant line %d, [%s] %s, message containing %q", e, c.line, c.group, c.option, c.msg)
			}
			want := "nova.conf:" + itoa(c.line) + ": "
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q, want it to start with %q", err, want)
			}
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Errorf("config returned with an error")
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{File: "keel.conf", Line: 12, Group: "filter_scheduler", Option: "host_subset_size", Msg: "must be at least 1, got 0"},
			"keel.conf:12: [filter_scheduler] host_subset_size: must be at least 1, got 0"},
		{Error{File: "keel.conf", Line: 3, Msg: "empty group name"}, "keel.conf:3: empty group name"},
		{Error{File: "keel.conf", Line: 3, Group: "DEFAULT", Msg: "empty option name"}, "keel.conf:3: [DEFAULT]: empty option name"},
		{Error{Group: "keel", Option: "vcpus", Msg: "bad"}, "[keel] vcpus: bad"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
	}
	w := Warning{File: "nova.conf", Line: 7, Group: "DEFAULT", Option: "debug", Msg: "recognised Nova option, not used by keel"}
	if got := w.String(); got != "nova.conf:7: [DEFAULT] debug: recognised Nova option, not used by keel" {
		t.Errorf("warning: %q", got)
	}
}

func TestEveryErrorReported(t *testing.T) {
	_, warns, err := Parse("keel.conf", []byte("[DEFAULT]\nreserved_host_cpus = x\ndebug = true\n[scheduler]\nmax_attempts = 0\n"))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "keel.conf:2: ") || !strings.HasPrefix(lines[1], "keel.conf:5: ") {
		t.Errorf("errors: %q", lines)
	}
	if len(warns) != 1 || warns[0].Line != 3 {
		t.Errorf("warnings are returned with errors: %v", warns)
	}
}

func TestWarnings(t *testing.T) {
	text := `[DEFAULT]
debug = true
control_exchange = openstack
no_such_option = 1
initial_cpu_allocation_ratio = 8.0
host_subset_size = 2
Host = a
report_interval = 5
report_interval = 6

[api_database]
connection = mysql+pymysql://nova@localhost/nova_api

[placement]
region_name = RegionOne

[api_database]
connection = again

[frobnicate]
x = 1

[default]
host = b

[keel]
data_dir = /srv/keel
[DEFAULT]
state_path = /srv/nova
[ DEFAULT ]
host = c
`
	cfg, warns := mustParse(t, text)
	want := []struct {
		line          int
		group, option string
		msg           string
	}{
		{2, "DEFAULT", "debug", "recognised Nova option, not used by keel"},
		{3, "DEFAULT", "control_exchange", "recognised Nova option, not used by keel"},
		{4, "DEFAULT", "no_such_option", "unknown option, ignored"},
		{5, "DEFAULT", "initial_cpu_allocation_ratio", "recognised Nova option, not used by keel; keel applies cpu_allocation_ratio"},
		{6, "DEFAULT", "host_subset_size", "unknown option, ignored; keel reads host_subset_size in [filter_scheduler]"},
		{7, "DEFAULT", "Host", "did you mean host? (option names are case-sensitive)"},
		{9, "DEFAULT", "report_interval", "set again; this value replaces the one on line 8"},
		{11, "api_database", "", "recognised Nova group, not used by keel"},
		{14, "placement", "", "recognised Nova group, not used by keel"},
		{20, "frobnicate", "", "unknown group"},
		{23, "default", "", "did you mean [DEFAULT]?"},
		{29, "DEFAULT", "state_path", "also set as [keel] data_dir on line 27"},
		{30, " default ", "", "spaces inside the brackets are part of the name"},
	}
	if len(warns) != len(want) {
		t.Errorf("%d warnings, want %d:", len(warns), len(want))
		for _, w := range warns {
			t.Log(w)
		}
	}
	for i, w := range want {
		if i >= len(warns) {
			break
		}
		g := warns[i]
		if g.File != "keel.conf" || g.Line != w.line || g.Group != w.group || g.Option != w.option || !strings.Contains(g.Msg, w.msg) {
			t.Errorf("warning %d: %v\nwant line %d, [%s] %s: %q", i, g, w.line, w.group, w.option, w.msg)
		}
	}
	if cfg.Default.ReportInterval != 6*time.Second {
		t.Errorf("the last value should win: report_interval %v", cfg.Default.ReportInterval)
	}
	if cfg.Keel.DataDir != "/srv/nova" || cfg.Origin("keel", "data_dir").Line != 29 {
		t.Errorf("data_dir %q from %v, want /srv/nova from line 29", cfg.Keel.DataDir, cfg.Origin("keel", "data_dir"))
	}
	if h := cfg.Default.Host; h == "a" || h == "b" || h == "c" {
		t.Errorf("host set from a misspelled option or group: %q", cfg.Default.Host)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keel.conf")
	if err := os.WriteFile(path, []byte("\uFEFF[scheduler]\r\nmax_attempts = 7\r\n[DEFAULT]\r\nnope = 1\r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, warns, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scheduler.MaxAttempts != 7 {
		t.Errorf("max_attempts %d", cfg.Scheduler.MaxAttempts)
	}
	if len(warns) != 1 || warns[0].File != path || warns[0].Line != 4 {
		t.Errorf("warnings %v", warns)
	}
	if _, _, err := Load(filepath.Join(dir, "missing.conf")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestSet(t *testing.T) {
	cfg, _ := mustParse(t, "[filter_scheduler]\nhost_subset_size = 3\nram_weight_multiplier = 2.0\n")
	file := cfg
	for _, s := range [][3]string{
		{"filter_scheduler", "host_subset_size", " 5 "},
		{"filter_scheduler", "enabled_filters", "ComputeFilter,IoOpsFilter"},
		{"filter_scheduler", "shuffle_best_same_weighed_hosts", "on"},
		{"DEFAULT", "state_path", "/tmp/k"},
		{"Keel", "vcpus", "8"},
		{"keel", "fake_spawn_seconds", "2"},
		{"identity", "token_ttl", "60"},
	} {
		if err := cfg.Set(s[0], s[1], s[2]); err != nil {
			t.Fatalf("Set(%q, %q, %q): %v", s[0], s[1], s[2], err)
		}
	}
	if cfg.FilterScheduler.HostSubsetSize != 5 || cfg.FilterScheduler.Options["ram_weight_multiplier"] != 2.0 ||
		!reflect.DeepEqual(cfg.FilterScheduler.EnabledFilters, []string{"ComputeFilter", "IoOpsFilter"}) ||
		!cfg.FilterScheduler.ShuffleBestSameWeighedHosts || cfg.Keel.DataDir != "/tmp/k" || cfg.Keel.VCPUs != 8 ||
		cfg.Keel.FakeSpawnTime != 2*time.Second || cfg.API.TokenTTL != time.Minute {
		t.Errorf("after Set: %+v", cfg)
	}
	if o := cfg.Origin("filter_scheduler", "host_subset_size"); !o.Flag || o.String() != "command line" {
		t.Errorf("origin of a flag: %v", o)
	}
	if o := cfg.Origin("filter_scheduler", "ram_weight_multiplier"); o != (Origin{File: "keel.conf", Line: 3}) {
		t.Errorf("origin of a file value: %v", o)
	}
	// The copy taken before Set keeps its values and origins.
	if file.FilterScheduler.HostSubsetSize != 3 || file.Origin("filter_scheduler", "host_subset_size").Line != 2 {
		t.Errorf("Set changed a copy: %d from %v", file.FilterScheduler.HostSubsetSize, file.Origin("filter_scheduler", "host_subset_size"))
	}
	// Set on a Config from Default (no origins yet) works.
	d := Default()
	if err := d.Set("scheduler", "max_attempts", "4"); err != nil || d.Scheduler.MaxAttempts != 4 || !d.Origin("scheduler", "max_attempts").Flag {
		t.Errorf("Set on Default: %v, %d", err, d.Scheduler.MaxAttempts)
	}

	for _, c := range []struct {
		group, option, value string
		msg                  string
	}{
		{"filter_scheduler", "host_subset_size", "0", "[filter_scheduler] host_subset_size: must be at least 1, got 0"},
		{"filter_scheduler", "host_subset_size", "two", `[filter_scheduler] host_subset_size: invalid integer "two"`},
		{"filter_scheduler", "enabled_filters", "CoreFilter", `unknown filter "CoreFilter"`},
		{"filter_scheduler", "nope", "1", "[filter_scheduler] nope: unknown option"},
		{"DEFAULT", "max_attempts", "1", "unknown option; keel reads max_attempts in [scheduler]"},
		{"DEFAULT", "debug", "true", "[DEFAULT] debug: recognised Nova option, not used by keel"},
		{"placement", "region_name", "x", "recognised Nova option, not used by keel"},
		{"nowhere", "x", "1", "[nowhere] x: unknown group"},
	} {
		before := values(cfg)
		err := cfg.Set(c.group, c.option, c.value)
		var e *Error
		if !errors.As(err, &e) || e.File != "" || e.Line != 0 || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Set(%s, %s, %s) = %v, want an *Error containing %q", c.group, c.option, c.value, err, c.msg)
		}
		if !reflect.DeepEqual(values(cfg), before) {
			t.Errorf("a failed Set changed the config")
		}
	}
}

// TestSetEveryOption sets every option, under each of its names, to the
// default Options documents: that text is accepted and means the default.
func TestSetEveryOption(t *testing.T) {
	d := Default()
	cfg := Default()
	for _, o := range Options() {
		if err := cfg.Set(o.Group, o.Name, o.Default); err != nil {
			t.Errorf("Set(%s, %s, default %q): %v", o.Group, o.Name, o.Default, err)
		}
		for _, a := range o.Aliases {
			g, n, ok := strings.Cut(strings.TrimPrefix(a, "["), "] ")
			if !ok {
				t.Fatalf("alias %q is not \"[group] name\"", a)
			}
			if err := cfg.Set(g, n, o.Default); err != nil {
				t.Errorf("Set(%s, %s): %v", g, n, err)
			}
		}
	}
	if !reflect.DeepEqual(values(cfg), values(d)) {
		t.Errorf("setting every default changed the config:\n%+v\n%+v", cfg, d)
	}
}

func TestOptions(t *testing.T) {
	seen := map[string]bool{}
	opts := Options()
	for _, o := range opts {
		k := o.Group + "." + o.Name
		if seen[k] {
			t.Errorf("%s listed twice", k)
		}
		seen[k] = true
		if o.Help == "" || o.Type == "" {
			t.Errorf("%s: no help or type", k)
		}
		if _, ok := ignoredOption(o.Group, o.Name); ok || ignoredGroups[o.Group] {
			t.Errorf("%s is both read and in the ignored table", k)
		}
	}
	for _, k := range []string{
		"DEFAULT.host", "DEFAULT.update_resources_interval", "DEFAULT.reserved_host_memory_mb", "DEFAULT.reserved_host_disk_mb",
		"DEFAULT.reserved_host_cpus", "DEFAULT.cpu_allocation_ratio", "DEFAULT.ram_allocation_ratio", "DEFAULT.disk_allocation_ratio",
		"DEFAULT.max_concurrent_live_migrations", "DEFAULT.service_down_time", "DEFAULT.report_interval",
		"filter_scheduler.host_subset_size", "filter_scheduler.enabled_filters", "filter_scheduler.weight_classes",
		"filter_scheduler.ram_weight_multiplier", "filter_scheduler.cpu_weight_multiplier", "filter_scheduler.disk_weight_multiplier",
		"filter_scheduler.io_ops_weight_multiplier", "filter_scheduler.build_failure_weight_multiplier",
		"filter_scheduler.num_instances_weight_multiplier", "filter_scheduler.soft_affinity_weight_multiplier",
		"filter_scheduler.soft_anti_affinity_weight_multiplier", "filter_scheduler.shuffle_best_same_weighed_hosts",
		"filter_scheduler.max_instances_per_host", "filter_scheduler.max_io_ops_per_host", "scheduler.max_attempts",
		"libvirt.live_migration_bandwidth", "libvirt.live_migration_downtime", "libvirt.live_migration_completion_timeout",
		"libvirt.live_migration_permit_post_copy", "libvirt.live_migration_timeout_action",
		"keel.listen", "keel.data_dir", "keel.nats_url", "keel.nats_listen", "keel.db", "keel.fake_spawn_seconds",
		"keel.vcpus", "keel.memory_mb", "keel.disk_gb", "keel.policy", "api.token_ttl",
	} {
		if !seen[k] {
			t.Errorf("%s missing from Options", k)
		}
	}
	byName := map[string]OptionInfo{}
	for _, o := range opts {
		byName[o.Group+"."+o.Name] = o
	}
	if o := byName["filter_scheduler.weight_classes"]; o.Default != allWeighers || o.Type != "list" {
		t.Errorf("weight_classes: %+v", o)
	}
	if o := byName["filter_scheduler.host_subset_size"]; o.Default != "1" || o.Min != "1" || o.Type != "integer" {
		t.Errorf("host_subset_size: %+v", o)
	}
	if o := byName["filter_scheduler.build_failure_weight_multiplier"]; o.Default != "1000000.0" || o.Min != "" {
		t.Errorf("build_failure_weight_multiplier: %+v", o)
	}
	if o := byName["keel.policy"]; !reflect.DeepEqual(o.Choices, []string{"legacy", "dest-update", "claim"}) || o.Default != "claim" {
		t.Errorf("policy: %+v", o)
	}
	if o := byName["keel.data_dir"]; !reflect.DeepEqual(o.Aliases, []string{"[DEFAULT] state_path"}) {
		t.Errorf("data_dir aliases: %v", o.Aliases)
	}
	if o := byName["DEFAULT.host"]; o.Default != Default().Default.Host {
		t.Errorf("host default %q", o.Default)
	}
}

func TestSample(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSample(&buf); err != nil {
		t.Fatal(err)
	}
	sample := buf.String()

	// As written, every option commented out: the defaults, no warnings.
	cfg, warns := mustParse(t, sample)
	if len(warns) != 0 || !reflect.DeepEqual(values(cfg), values(Default())) {
		t.Errorf("sample: warnings %v, config %+v", warns, cfg)
	}

	// Every option line uncommented: still the defaults (host aside: its
	// default depends on the machine, and the sample shows a placeholder).
	optionLine := regexp.MustCompile(`^#([a-z_]+) =( |$)`)
	var lines []string
	set := map[string]bool{}
	for l := range strings.SplitSeq(sample, "\n") {
		if m := optionLine.FindStringSubmatch(l); m != nil {
			set[m[1]] = true
			if m[1] != "host" {
				l = l[1:]
			}
		}
		lines = append(lines, l)
	}
	cfg, warns = mustParse(t, strings.Join(lines, "\n"))
	if len(warns) != 0 {
		t.Errorf("uncommented sample: warnings %v", warns)
	}
	if !reflect.DeepEqual(values(cfg), values(Default())) {
		t.Errorf("uncommented sample:\n%+v\nwant\n%+v", values(cfg), values(Default()))
	}
	if cfg.Origin("keel", "nats_url").IsDefault() || cfg.Origin("filter_scheduler", "weight_classes").IsDefault() {
		t.Error("the uncommented sample did not set every option")
	}
	for _, o := range Options() {
		if !set[o.Name] {
			t.Errorf("%s missing from the sample", o.Name)
		}
	}
	if !strings.Contains(sample, "#host = <current_hostname>\n") || !strings.Contains(sample, "# Also accepted as [DEFAULT] state_path.\n") {
		t.Error("sample lacks the host placeholder or an alias note")
	}
}

func TestSchedulerConfig(t *testing.T) {
	// Every option of the scheduler's registry is a [filter_scheduler]
	// option (or of its own group: [metrics] weight_multiplier), with the
	// registry's default.
	multipliers := scheduler.WeigherOptions()
	groupOf := func(so scheduler.Option) string {
		if so.Group != "" {
			return so.Group
		}
		return "filter_scheduler"
	}
	for _, so := range append(scheduler.WeigherOptions(), scheduler.FilterOptions()...) {
		o := lookup(groupOf(so), so.Name)
		if o == nil {
			t.Errorf("%s: not a [filter_scheduler] option", so.Name)
			continue
		}
		d := Default()
		if got, want := o.get(&d), formatNum(so.Default); strings.TrimSuffix(got, ".0") != want {
			t.Errorf("%s: default %s, the registry's %s", so.Name, got, want)
		}
	}
	// One at a time: that multiplier changes, every other keeps Nova's
	// default.
	for i, m := range multipliers {
		v := float64(i) + 0.25
		cfg, _ := mustParse(t, "["+groupOf(m)+"]\n"+m.Name+" = "+formatFloat(v)+"\n")
		want := scheduler.DefaultConfig()
		want.Options[m.Name] = v
		if got := cfg.SchedulerConfig(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v:\n got %+v\nwant %+v", m.Name, v, got, want)
		}
	}
	// The rest of the options.
	cfg, _ := mustParse(t, `[filter_scheduler]
host_subset_size = 4
enabled_filters = ComputeFilter,NumInstancesFilter
weight_classes = RAMWeigher
shuffle_best_same_weighed_hosts = true
max_instances_per_host = 20
max_io_ops_per_host = 3
[scheduler]
max_attempts = 6
[DEFAULT]
service_down_time = 0
`)
	want := scheduler.DefaultConfig()
	want.HostSubsetSize = 4
	want.EnabledFilters = []string{"ComputeFilter", "NumInstancesFilter"}
	want.Weighers = []string{"RAMWeigher"}
	want.ShuffleBestSameWeighedHosts = true
	want.Options["max_instances_per_host"] = 20
	want.Options["max_io_ops_per_host"] = 3
	want.MaxAttempts = 6
	want.ServiceDownTime = 0
	got := cfg.SchedulerConfig()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	// The result shares no slices with the Config.
	got.EnabledFilters[0] = "x"
	if cfg.FilterScheduler.EnabledFilters[0] != "ComputeFilter" {
		t.Error("SchedulerConfig shares enabled_filters with the Config")
	}
	got.Options["max_io_ops_per_host"] = 99
	if cfg.FilterScheduler.Options["max_io_ops_per_host"] != 3 {
		t.Error("SchedulerConfig shares the filters' and weighers' options with the Config")
	}
	// Set on a copy leaves the original's options alone.
	cp := cfg
	if err := cp.Set("filter_scheduler", "max_io_ops_per_host", "5"); err != nil {
		t.Fatal(err)
	}
	if cfg.FilterScheduler.Options["max_io_ops_per_host"] != 3 || cp.FilterScheduler.Options["max_io_ops_per_host"] != 5 {
		t.Errorf("after Set on a copy: original %v, copy %v", cfg.FilterScheduler.Options, cp.FilterScheduler.Options)
	}
}

func TestHostConfig(t *testing.T) {
	d := Default()
	got := d.HostConfig("rp-1")
	want := compute.HostConfig{
		Host: d.Default.Host, ProviderUUID: "rp-1", VCPUs: 32, MemoryMB: 131072, LocalGB: 2000,
		CPUAllocationRatio: 4.0, RAMAllocationRatio: 1.0, DiskAllocationRatio: 1.0,
		ReservedHostMemoryMB: 512, ReservedHostDiskMB: 0, WriteDestRecord: true, LostGuestTimeout: 300 * time.Second,
	}
	if got != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}

	cfg, _ := mustParse(t, `[DEFAULT]
host = h1
cpu_allocation_ratio = 16.0
ram_allocation_ratio = 1.5
disk_allocation_ratio = 2.0
reserved_host_memory_mb = 4096
reserved_host_disk_mb = 10240
[keel]
vcpus = 64
memory_mb = 262144
disk_gb = 500
policy = legacy
lost_guest_timeout = 120
`)
	got = cfg.HostConfig("rp-2")
	want = compute.HostConfig{
		Host: "h1", ProviderUUID: "rp-2", VCPUs: 64, MemoryMB: 262144, LocalGB: 500,
		CPUAllocationRatio: 16.0, RAMAllocationRatio: 1.5, DiskAllocationRatio: 2.0,
		ReservedHostMemoryMB: 4096, ReservedHostDiskMB: 10240, WriteDestRecord: false, LostGuestTimeout: 2 * time.Minute,
	}
	if got != want {
		t.Errorf("set:\n got %+v\nwant %+v", got, want)
	}

	// 0.0 means the default ratio, as in Nova; dest-update writes the
	// destination's record.
	cfg, _ = mustParse(t, "[DEFAULT]\ncpu_allocation_ratio = 0.0\nram_allocation_ratio = 0\ndisk_allocation_ratio = 0\n[keel]\npolicy = dest-update\n")
	got = cfg.HostConfig("rp-3")
	if got.CPUAllocationRatio != 4.0 || got.RAMAllocationRatio != 1.0 || got.DiskAllocationRatio != 1.0 || !got.WriteDestRecord {
		t.Errorf("zero ratios: %+v", got)
	}
}

// TestCommittedSampleIsCurrent keeps etc/keel.conf.sample, which
// docs/configuration.md links, equal to what WriteSample prints. Regenerate it with
// `go run ./cmd/keel config sample > etc/keel.conf.sample`.
func TestCommittedSampleIsCurrent(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join("..", "..", "etc", "keel.conf.sample"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSample(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, b.Bytes()) {
		t.Fatal("etc/keel.conf.sample is out of date: run `go run ./cmd/keel config sample > etc/keel.conf.sample`")
	}
}

// TestNotificationOptions: Nova's options route notifications to
// RabbitMQ; [DEFAULT] transport_url serves when the group names none, and
// a driver or URL keel cannot use is refused.
func TestNotificationOptions(t *testing.T) {
	if url := Default().RabbitURL(); url != "" {
		t.Errorf("default sends to %q, want nowhere (Nova's default driver sends none)", url)
	}
	cfg, warns := mustParse(t, `[DEFAULT]
transport_url = rabbit://guest:guest@10.0.0.1:5672/
[oslo_messaging_notifications]
driver = messagingv2
retry = -1
[notifications]
versioned_notifications_topics = versioned_notifications,audit
notify_on_state_change = vm_and_task_state
`)
	if cfg.RabbitURL() != "rabbit://guest:guest@10.0.0.1:5672/" || fmt.Sprint(cfg.Notifications.Topics) != "[versioned_notifications audit]" || len(warns) != 2 {
		t.Errorf("RabbitURL %q topics %v warnings %v", cfg.RabbitURL(), cfg.Notifications.Topics, warns)
	}
	cfg, _ = mustParse(t, "[oslo_messaging_notifications]\ndriver = messagingv2\ntransport_url = rabbit://u:p@mq:5673/nova\n[notifications]\nnotification_format = unversioned\n")
	if cfg.RabbitURL() != "" {
		t.Errorf("unversioned sends to %q", cfg.RabbitURL())
	}
	for _, bad := range []string{
		"[oslo_messaging_notifications]\ndriver = messaging\n",
		"[oslo_messaging_notifications]\ntransport_url = kafka://k:9092/\n",
		"[notifications]\nversioned_notifications_topics =\n",
	} {
		if _, _, err := Parse("keel.conf", []byte(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
}
