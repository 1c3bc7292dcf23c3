package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"keel/internal/compute/workload"
	"keel/internal/identity"
	"keel/internal/notify"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// OptionInfo describes one option, for --help text and documentation.
type OptionInfo struct {
	Group string
	Name  string
	// Type is string, integer, float, boolean, list, seconds,
	// milliseconds, or host:port.
	Type string
	// Default is the default as it would be written in the file.
	Default string
	Help    string
	// Choices lists the accepted values, when there is a fixed set.
	Choices []string
	// Min is the smallest accepted value of a number ("" when unbounded).
	Min string
	// Aliases lists other names accepted for the option, as "[group] name".
	Aliases []string
}

// Options lists every option keel reads, group by group, in the order of
// the sample file.
func Options() []OptionInfo {
	d := Default()
	out := make([]OptionInfo, 0, len(options))
	for _, o := range options {
		info := OptionInfo{
			Group: o.group, Name: o.name, Type: o.typ, Default: o.get(&d),
			Help: o.help, Choices: slices.Clone(o.choices),
		}
		if o.shown != "" {
			info.Default = o.shown
		}
		if o.hasMin {
			info.Min = formatNum(o.min)
		}
		for _, a := range o.aliases {
			info.Aliases = append(info.Aliases, "["+a.group+"] "+a.name)
		}
		out = append(out, info)
	}
	return out
}

type optKey struct{ group, name string }

// option is one entry of the table: how to parse a value into a Config
// and how to write it back.
type option struct {
	group, name string
	typ         string
	help        string
	aliases     []optKey
	choices     []string
	hasMin      bool
	min         float64
	check       func(raw string) error // on the trimmed text, before parsing
	shown       string                 // the default as documented, when not get(Default())
	sample      string                 // the default as the sample file writes it, when not shown
	set         func(c *Config, raw string) error
	get         func(c *Config) string
}

func (o *option) key() optKey { return optKey{o.group, o.name} }

func (o *option) alias(group, name string) *option {
	o.aliases = append(o.aliases, optKey{group, name})
	return o
}

func (o *option) atLeast(n float64) *option { o.hasMin, o.min = true, n; return o }

func (o *option) oneOf(choices ...string) *option {
	o.choices = choices
	o.check = func(raw string) error {
		if !slices.Contains(choices, raw) {
			return fmt.Errorf("invalid value %q (one of: %s)", raw, strings.Join(choices, ", "))
		}
		return nil
	}
	return o
}

func (o *option) checked(f func(raw string) error) *option { o.check = f; return o }

func (o *option) documented(shown, sample string) *option {
	o.shown, o.sample = shown, sample
	return o
}

// field makes an option for a field of type T. num, when not nil, gives
// the number atLeast compares.
func field[T any](group, name, typ string, ptr func(*Config) *T, parse func(string) (T, error),
	format func(T) string, num func(T) float64, help string) *option {
	o := &option{group: group, name: name, typ: typ, help: help}
	o.set = func(c *Config, raw string) error {
		if o.check != nil {
			if err := o.check(raw); err != nil {
				return err
			}
		}
		v, err := parse(raw)
		if err != nil {
			return err
		}
		if o.hasMin && num != nil && num(v) < o.min {
			return fmt.Errorf("must be at least %s, got %s", formatNum(o.min), raw)
		}
		*ptr(c) = v
		return nil
	}
	o.get = func(c *Config) string { return format(*ptr(c)) }
	return o
}

func strOpt(group, name string, ptr func(*Config) *string, help string) *option {
	return field(group, name, "string", ptr, parseString, formatString, nil, help)
}

func addrOpt(group, name string, ptr func(*Config) *string, help string) *option {
	return field(group, name, "host:port", ptr, parseString, formatString, nil, help).checked(checkAddr)
}

func intOpt(group, name string, ptr func(*Config) *int, help string) *option {
	return field(group, name, "integer", ptr, parseInt, strconv.Itoa, func(v int) float64 { return float64(v) }, help)
}

func floatOpt(group, name string, ptr func(*Config) *float64, help string) *option {
	return field(group, name, "float", ptr, parseFloat, formatFloat, func(v float64) float64 { return v }, help)
}

func boolOpt(group, name string, ptr func(*Config) *bool, help string) *option {
	return field(group, name, "boolean", ptr, parseBool, strconv.FormatBool, nil, help)
}

func listOpt(group, name string, ptr func(*Config) *[]string, resolve func([]string) ([]string, error), help string) *option {
	parse := func(raw string) ([]string, error) { return resolve(parseList(raw)) }
	return field(group, name, "list", ptr, parse, formatList, nil, help)
}

// secondsOpt and millisOpt are durations written as whole seconds or
// milliseconds.
func secondsOpt(group, name string, ptr func(*Config) *time.Duration, help string) *option {
	return durationOpt(group, name, "seconds", time.Second, ptr, help)
}

func millisOpt(group, name string, ptr func(*Config) *time.Duration, help string) *option {
	return durationOpt(group, name, "milliseconds", time.Millisecond, ptr, help)
}

func durationOpt(group, name, typ string, unit time.Duration, ptr func(*Config) *time.Duration, help string) *option {
	parse := func(raw string) (time.Duration, error) {
		n, err := parseInt(raw)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: want whole %s, e.g. 60%s", raw, typ, commentHint(raw))
		}
		if int64(n) > math.MaxInt64/int64(unit) || int64(n) < math.MinInt64/int64(unit) {
			return 0, fmt.Errorf("duration %s %s is out of range", raw, typ)
		}
		return time.Duration(n) * unit, nil
	}
	format := func(d time.Duration) string { return strconv.FormatInt(int64(d/unit), 10) }
	num := func(d time.Duration) float64 { return float64(d / unit) }
	return field(group, name, typ, ptr, parse, format, num, help)
}

func parseString(raw string) (string, error) { return raw, nil }
func formatString(s string) string           { return s }

func parseInt(raw string) (int, error) {
	if raw == "" {
		return 0, errors.New("empty value; want an integer")
	}
	n, err := strconv.ParseInt(raw, 10, 0)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("integer %s is out of range", raw)
		}
		return 0, fmt.Errorf("invalid integer %q%s", raw, commentHint(raw))
	}
	return int(n), nil
}

func parseFloat(raw string) (float64, error) {
	if raw == "" {
		return 0, errors.New("empty value; want a number")
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("invalid number %q%s", raw, commentHint(raw))
	}
	return f, nil
}

// formatFloat writes a float as Nova's sample does: always with a point.
func formatFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

func formatNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func parseBool(raw string) (bool, error) {
	switch strings.ToLower(raw) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0":
		return false, nil
	}
	return false, fmt.Errorf("invalid boolean %q (true/false, yes/no, on/off, 1/0)%s", raw, commentHint(raw))
}

// parseList splits on commas and trims each item; empty items are dropped.
func parseList(raw string) []string {
	out := []string{}
	for item := range strings.SplitSeq(raw, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func formatList(items []string) string { return strings.Join(items, ",") }

// commentHint explains the likely mistake of an inline comment.
func commentHint(raw string) string {
	if strings.ContainsAny(raw, "#;") {
		return " (comments must be on a line of their own)"
	}
	return ""
}

func checkAddr(raw string) error {
	if _, port, err := net.SplitHostPort(raw); err != nil {
		return fmt.Errorf("invalid address %q: want host:port", raw)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("invalid port in %q", raw)
	}
	return nil
}

func checkHost(raw string) error {
	if raw == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("invalid host name %q: no spaces or control characters", raw)
	}
	return nil
}

func checkTransportURL(raw string) error {
	if raw == "" {
		return nil
	}
	_, err := notify.ParseTransportURL(raw)
	return err
}

func nonEmptyList(items []string) ([]string, error) {
	if len(items) == 0 {
		return nil, errors.New("must name at least one topic")
	}
	return items, nil
}

func checkBaseURL(raw string) error {
	if raw == "" {
		return nil
	}
	if _, err := identity.ParseService("x:x=" + raw); err != nil {
		return fmt.Errorf("invalid URL %q: want http(s)://host:port", raw)
	}
	return nil
}

func resolveServices(items []string) ([]string, error) {
	for _, it := range items {
		if _, err := identity.ParseService(it); err != nil {
			return nil, err
		}
	}
	return items, nil
}

func resolveFilters(names []string) ([]string, error) {
	for _, n := range names {
		if !slices.Contains(scheduler.KnownFilters, n) {
			return nil, fmt.Errorf("unknown filter %q (known: %s)", n, strings.Join(scheduler.KnownFilters, ", "))
		}
	}
	return names, nil
}

// allWeighers is Nova's name for every weigher.
const allWeighers = "nova.scheduler.weights.all_weighers"

// resolveWeighers accepts weigher names, Nova's class paths
// (nova.scheduler.weights.ram.RAMWeigher) and all_weighers; duplicates
// are dropped.
func resolveWeighers(names []string) ([]string, error) {
	out := []string{}
	add := func(w string) {
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	for _, n := range names {
		if n == allWeighers {
			for _, w := range scheduler.KnownWeighers {
				add(w)
			}
			continue
		}
		w := n
		if strings.HasPrefix(n, "nova.scheduler.weights.") {
			w = n[strings.LastIndexByte(n, '.')+1:]
		}
		if !slices.Contains(scheduler.KnownWeighers, w) {
			return nil, fmt.Errorf("unknown weigher %q (known: %s, or %s)", n, strings.Join(scheduler.KnownWeighers, ", "), allWeighers)
		}
		add(w)
	}
	return out, nil
}

func parsePolicy(raw string) (scheduler.Policy, error) { return scheduler.ParsePolicy(raw) }

func policyNames() []string {
	out := make([]string, len(scheduler.Policies))
	for i, p := range scheduler.Policies {
		out[i] = string(p)
	}
	return out
}

// groupOrder is the order of groups in the sample file: DEFAULT, then
// alphabetical, as Nova's sample.
var groupOrder = []string{"DEFAULT", "api", "filter_scheduler", "keel", "libvirt", "metrics", "notifications", "oslo_messaging_notifications", "scheduler"}

// options is the table of every option keel reads. The filters' and
// weighers' own options come from the scheduler's registry.
var options = slices.Concat([]*option{
	// [DEFAULT]
	strOpt("DEFAULT", "host", func(c *Config) *string { return &c.Default.Host },
		"Name of this host, as the scheduler, placement and the other services know it (Nova: hostname, FQDN or IP address). Defaults to the machine's hostname.").
		checked(checkHost).documented("", "<current_hostname>"),
	intOpt("DEFAULT", "update_resources_interval", func(c *Config) *int { return &c.Default.UpdateResourcesInterval },
		"Seconds between the resource tracker's audits of this host (update_available_resource). 0 runs it at the default period of 60 seconds; a negative value disables it."),
	intOpt("DEFAULT", "reserved_host_memory_mb", func(c *Config) *int { return &c.Default.ReservedHostMemoryMB },
		"Memory in MiB kept for the host itself and not offered to instances (the reserved amount of the MEMORY_MB inventory).").atLeast(0),
	intOpt("DEFAULT", "reserved_host_disk_mb", func(c *Config) *int { return &c.Default.ReservedHostDiskMB },
		"Disk in MiB kept for the host itself (the reserved amount of the DISK_GB inventory, rounded up to whole GiB).").atLeast(0),
	intOpt("DEFAULT", "reserved_host_cpus", func(c *Config) *int { return &c.Default.ReservedHostCPUs },
		"Physical CPUs kept for the host itself. Read, but keel's VCPU inventory does not reserve them yet.").atLeast(0),
	floatOpt("DEFAULT", "cpu_allocation_ratio", func(c *Config) *float64 { return &c.Default.CPUAllocationRatio },
		"Virtual CPUs per physical CPU (the allocation ratio of the VCPU inventory). Nova leaves it unset, which means initial_cpu_allocation_ratio, 4.0; keel's default is 4.0. 0.0 also means 4.0.").atLeast(0),
	floatOpt("DEFAULT", "ram_allocation_ratio", func(c *Config) *float64 { return &c.Default.RAMAllocationRatio },
		"Virtual RAM per physical RAM (the allocation ratio of the MEMORY_MB inventory). 0.0 means 1.0.").atLeast(0),
	floatOpt("DEFAULT", "disk_allocation_ratio", func(c *Config) *float64 { return &c.Default.DiskAllocationRatio },
		"Virtual disk per physical disk (the allocation ratio of the DISK_GB inventory). 0.0 means 1.0.").atLeast(0),
	intOpt("DEFAULT", "max_concurrent_live_migrations", func(c *Config) *int { return &c.Default.MaxConcurrentLiveMigrations },
		"Live migrations a compute host runs at once; 0 means unlimited.").atLeast(0),
	secondsOpt("DEFAULT", "service_down_time", func(c *Config) *time.Duration { return &c.Default.ServiceDownTime },
		"Seconds since a service's last heartbeat after which it is down; ComputeFilter skips hosts whose service is down. 0 turns the check off (keel only).").atLeast(0),
	secondsOpt("DEFAULT", "report_interval", func(c *Config) *time.Duration { return &c.Default.ReportInterval },
		"Seconds between a service's heartbeats (updates of its service record); 0 turns them off. Keep it well below service_down_time.").atLeast(0),
	boolOpt("DEFAULT", "allow_resize_to_same_host", func(c *Config) *bool { return &c.Default.AllowResizeToSameHost },
		"Lets a resize keep the instance on its host when the scheduler finds it best (the host then holds both flavors until confirm or revert)."),
	secondsOpt("DEFAULT", "resize_confirm_window", func(c *Config) *time.Duration { return &c.Default.ResizeConfirmWindow },
		"Seconds after which a resize or cold migration left in VERIFY_RESIZE is confirmed automatically; 0 never confirms one.").atLeast(0),
	secondsOpt("DEFAULT", "instance_build_timeout", func(c *Config) *time.Duration { return &c.Default.InstanceBuildTimeout },
		"Seconds a boot may take, from the request to the agent's report, before it ends in ERROR (its guest removed, its claim given back). Nova's default 0 turns it off; keel's is 900.").atLeast(0),
	secondsOpt("DEFAULT", "shelved_offload_time", func(c *Config) *time.Duration { return &c.Default.ShelvedOffloadTime },
		"Seconds a shelved server keeps its host before it is offloaded (its guest removed, its claim given back); 0 offloads it at once, -1 never.").atLeast(-1),

	strOpt("DEFAULT", "transport_url", func(c *Config) *string { return &c.Default.TransportURL },
		"The message bus URL (rabbit://user:password@host:5672/). keel's own RPC runs over NATS; notifications go here unless [oslo_messaging_notifications] transport_url names another bus.").checked(checkTransportURL),

	// [api]
	secondsOpt("api", "token_ttl", func(c *Config) *time.Duration { return &c.API.TokenTTL },
		"Lifetime of an API token, in seconds.").atLeast(1).alias("identity", "token_ttl"),

	// [filter_scheduler]
	intOpt("filter_scheduler", "host_subset_size", func(c *Config) *int { return &c.FilterScheduler.HostSubsetSize },
		"The scheduler picks at random among this many of the best-weighed hosts, so that concurrent requests spread out; 1 always picks the best.").atLeast(1),
	listOpt("filter_scheduler", "enabled_filters", func(c *Config) *[]string { return &c.FilterScheduler.EnabledFilters }, resolveFilters,
		"Filters every request runs through, in order: "+strings.Join(scheduler.KnownFilters, ", ")+
			". ResourceFilter (keel's stand-in for placement's allocation candidates) always runs first and need not be listed. keel's default adds AvailabilityZoneFilter to Nova's, since keel has no placement pre-filter for availability zones."),
	listOpt("filter_scheduler", "weight_classes", func(c *Config) *[]string { return &c.FilterScheduler.WeightClasses }, resolveWeighers,
		"Weighers to run: weigher names ("+strings.Join(scheduler.KnownWeighers, ", ")+
			"), Nova's class paths (nova.scheduler.weights.ram.RAMWeigher), or "+allWeighers+" for every weigher keel has.").
		documented(allWeighers, ""),
}, schedulerOptions(filterSchedulerOnly(scheduler.WeigherOptions())), []*option{
	boolOpt("filter_scheduler", "shuffle_best_same_weighed_hosts", func(c *Config) *bool { return &c.FilterScheduler.ShuffleBestSameWeighedHosts },
		"Shuffle the hosts that tie for the best weight, rather than take them in host-name order."),
}, schedulerOptions(scheduler.FilterOptions()), []*option{

	// [keel]
	addrOpt("keel", "listen", func(c *Config) *string { return &c.Keel.Listen },
		"Address the API listens on."),
	strOpt("keel", "server_name", func(c *Config) *string { return &c.Keel.ServerName },
		"This keel server replica's name: it owns the live migrations it drives, and heartbeats under it. Each replica needs its own; empty uses a UUID kept in DATA_DIR/server_name."),
	strOpt("keel", "data_dir", func(c *Config) *string { return &c.Keel.DataDir },
		"Directory of keel's state (database, embedded NATS storage); a relative path is taken from the working directory. Nova's [DEFAULT] state_path is another name for it.").
		alias("DEFAULT", "state_path").checked(nonEmpty),
	strOpt("keel", "nats_url", func(c *Config) *string { return &c.Keel.NATSURL },
		"NATS server to connect to (nats://host:port), or the servers of a NATS cluster, comma-separated; empty runs an embedded server."),
	strOpt("keel", "nats_credentials", func(c *Config) *string { return &c.Keel.NATSCredentials },
		"File holding the bus user and password, as JSON {\"user\": …, \"password\": …}; empty means bus-credentials.json in data_dir (which keel server creates for its embedded NATS). With an external NATS, give every server and agent the file matching the NATS server's authorization."),
	addrOpt("keel", "nats_listen", func(c *Config) *string { return &c.Keel.NATSListen },
		"Address the embedded NATS server listens on (port 0 picks a free port); unused when nats_url is set."),
	strOpt("keel", "db", func(c *Config) *string { return &c.Keel.DB },
		"Database: a postgres:// URL for PostgreSQL, or a SQLite file path; empty means keel.db in data_dir."),
	strOpt("keel", "image_dir", func(c *Config) *string { return &c.Keel.ImageDir },
		"Directory of the image service's data and records (as Glance's file store: <id> the data, <id>.json the record); empty means images in data_dir. Several keel server replicas given one shared directory (NFS or another shared file system with working file locks) share their images; each replica at start queues again the uploads a crash left unfinished."),
	intOpt("keel", "image_size_cap", func(c *Config) *int { return &c.Keel.ImageSizeCap },
		"The largest image data an upload may store, in bytes (Glance's image_size_cap, 1 TiB); a larger upload is refused with 413 and leaves the image queued.").
		alias("DEFAULT", "image_size_cap").atLeast(1),
	strOpt("keel", "driver", func(c *Config) *string { return &c.Keel.Driver },
		"The agent's virt driver: fake (simulated guests in a state file), qemu (each guest a qemu-system-x86_64 process under TCG, running keel's own tiny guest; needs Debian's qemu-system-x86) or libvirt (each guest a domain of the host's libvirtd at [libvirt] connection_uri, running the same guest; needs libvirtd with its QEMU driver).").
		oneOf("fake", "qemu", "libvirt"),
	strOpt("keel", "qemu_binary", func(c *Config) *string { return &c.Keel.QEMUBinary },
		"The QEMU the qemu driver runs: a path, or a name looked up on PATH."),
	strOpt("keel", "qemu_args", func(c *Config) *string { return &c.Keel.QEMUArgs },
		"Extra arguments (space-separated) appended to every QEMU command line the qemu driver runs; they must be the same on every host a guest migrates between."),
	secondsOpt("keel", "fake_spawn_seconds", func(c *Config) *time.Duration { return &c.Keel.FakeSpawnTime },
		"Seconds the fake driver takes to spawn an instance; 0 spawns at once.").atLeast(0),
	secondsOpt("keel", "fake_step_seconds", func(c *Config) *time.Duration { return &c.Keel.FakeStepTime },
		"Seconds the fake driver takes for each step of a move on an agent: pre_live_migration, post_live_migration_at_destination, prep_resize, finish_resize, confirm_resize and finish_revert_resize and each lifecycle action (stop, start, reboot, …); 0 is at once.").atLeast(0),
	strOpt("keel", "fake_workload", func(c *Config) *string { return &c.Keel.FakeWorkload },
		"The workload model of a fake guest whose instance (metadata keel:workload) and flavor (extra spec keel:workload) set none: constant, diurnal or bursty with key=value settings, e.g. `diurnal cpu=10% peak=90% peak_at=14h` or `bursty cpu=0.2 peak=2 every=10m for=2m chance=0.5` (cpu and peak in vCPUs or % of the flavor's, mem in MiB or %); empty: such guests use nothing.").checked(checkWorkload),
	boolOpt("keel", "enable_pprof", func(c *Config) *bool { return &c.Keel.EnablePprof },
		"Serve Go's runtime profiles (CPU, heap, goroutines) at /debug/pprof/ on the API listener, to the admin's token only: for `go tool pprof` when measuring a replica."),
	secondsOpt("keel", "rpc_timeout", func(c *Config) *time.Duration { return &c.Keel.RPCTimeout },
		"Seconds the conductor waits for an agent's answer before taking the agent for gone.").atLeast(1),
	secondsOpt("keel", "migration_stall_timeout", func(c *Config) *time.Duration { return &c.Keel.MigrationStallTimeout },
		"Seconds a live migration's memory copy may go without a progress report from its source before the copy is aborted and the migration rolled back (a source that crashed or was cut off after an abort); 0 turns it off.").atLeast(0),
	secondsOpt("keel", "lost_guest_timeout", func(c *Config) *time.Duration { return &c.Keel.LostGuestTimeout },
		"Seconds the guest of an ACTIVE instance may be missing from its host's periodic audits before the instance is put in ERROR and its claim released. Until then each audit reports the guest missing and releases nothing, so a hypervisor listing that glitched, or an agent state file restored from an older copy, loses no claim; a guest that runs again after the instance was put in ERROR is claimed back and the instance made ACTIVE (or, if its host has no room left, stopped). Keep it several update_resources_interval long; 0 acts at the first audit that misses the guest.").atLeast(0),
	intOpt("keel", "max_concurrent_incoming_live_migrations", func(c *Config) *int { return &c.Keel.MaxConcurrentIncomingLiveMigrations },
		"Live migrations one destination host receives at once (plans and single migrations alike; [DEFAULT] max_concurrent_live_migrations caps the source side); 0 means unlimited.").atLeast(0),
	intOpt("keel", "max_concurrent_live_migrations_total", func(c *Config) *int { return &c.Keel.MaxConcurrentLiveMigrationsTotal },
		"Live migrations in the whole cloud at once (a drain's or rebalance's moves and single migrations alike); 0 means unlimited.").atLeast(0),
	secondsOpt("keel", "rebalance_interval", func(c *Config) *time.Duration { return &c.Keel.RebalanceInterval },
		"Seconds between two runs of the periodic rebalance: the rebalance planner (keel rebalance plan's, on the metric rebalance_by names) on the live cloud, its plan applied at once under the same caps as every plan; a run is skipped while any plan is approved or running. 0, the default, turns the periodic rebalance off (keel rebalance plan|apply still work).").atLeast(0),
	floatOpt("keel", "rebalance_threshold", func(c *Config) *float64 { return &c.Keel.RebalanceThreshold },
		"The periodic rebalance acts when the coefficient of variation (of RAM claimed, or of measured use: rebalance_by) over the enabled hosts is above this, and stops below half of it.").atLeast(0),
	intOpt("keel", "rebalance_max_moves", func(c *Config) *int { return &c.Keel.RebalanceMaxMoves },
		"Moves one periodic rebalance plans at most; 0 means no cap.").atLeast(0),
	strOpt("keel", "rebalance_by", func(c *Config) *string { return &c.Keel.RebalanceBy },
		"What the periodic rebalance balances: claims (the RAM claimed in placement) or measured (each host's measured use, the larger of its measured CPU and its guests' resident memory, as keel rebalance plan --by measured; hosts without a measurement within [metrics] max_age are left out, and every move still fits the claims).").
		oneOf("claims", "measured"),
	intOpt("keel", "vcpus", func(c *Config) *int { return &c.Keel.VCPUs },
		"The fake host's physical CPUs.").atLeast(1),
	intOpt("keel", "memory_mb", func(c *Config) *int { return &c.Keel.MemoryMB },
		"The fake host's memory, in MiB.").atLeast(1),
	intOpt("keel", "disk_gb", func(c *Config) *int { return &c.Keel.DiskGB },
		"The fake host's local disk, in GiB.").atLeast(0),
	field("keel", "policy", "string", func(c *Config) *scheduler.Policy { return &c.Keel.Policy }, parsePolicy,
		func(p scheduler.Policy) string { return string(p) }, nil,
		"What the weighers read: claim — allocations, exact the moment a claim commits (keel's default); dest-update — host records, with a migration's destination writing its record as soon as the instance lands; legacy — host records as Nova writes them (the destination's only at its next spawn or audit).").
		oneOf(policyNames()...),

	strOpt("keel", "internal_url", func(c *Config) *string { return &c.Keel.InternalURL },
		"Base URL (http://host:port) the token catalog lists as the internal endpoint of keel's services (identity, compute, placement, image); empty lists the public one, the URL keel listens at.").checked(checkBaseURL),
	strOpt("keel", "admin_url", func(c *Config) *string { return &c.Keel.AdminURL },
		"Base URL the token catalog lists as the admin endpoint of keel's services; empty lists the public one.").checked(checkBaseURL),
	listOpt("keel", "catalog_services", func(c *Config) *[]string { return &c.Keel.CatalogServices }, resolveServices,
		"Other services the token catalog lists, comma-separated, each TYPE:NAME=URL with its URL as its public, internal and admin endpoint: infra-optim:watcher=http://127.0.0.1:9322 lets `openstack optimize …` find Watcher through keel."),

	// [libvirt]
	intOpt("libvirt", "live_migration_bandwidth", func(c *Config) *int { return &c.Libvirt.LiveMigrationBandwidth },
		"Maximum bandwidth of a live migration, in MiB/s; 0 means unlimited, which keel's fake driver models as 1024 MiB/s (the qemu driver lifts QEMU's own cap).").atLeast(0),
	millisOpt("libvirt", "live_migration_downtime", func(c *Config) *time.Duration { return &c.Libvirt.LiveMigrationDowntime },
		"Maximum downtime of a live migration's switch-over, in milliseconds.").atLeast(100),
	secondsOpt("libvirt", "live_migration_completion_timeout", func(c *Config) *time.Duration { return &c.Libvirt.LiveMigrationCompletionTimeout },
		"Seconds per GiB of guest RAM (counting at least 2 GiB) a live migration may take before live_migration_timeout_action is taken; 0 means no timeout.").atLeast(0),
	boolOpt("libvirt", "live_migration_permit_post_copy", func(c *Config) *bool { return &c.Libvirt.LiveMigrationPermitPostCopy },
		"Allow a live migration that does not converge to switch to post-copy."),
	strOpt("libvirt", "live_migration_timeout_action", func(c *Config) *string { return &c.Libvirt.LiveMigrationTimeoutAction },
		"What to do when live_migration_completion_timeout expires: abort the migration, or force_complete it (post-copy if permitted, otherwise pause the guest).").
		oneOf("abort", "force_complete"),
	boolOpt("libvirt", "live_migration_permit_auto_converge", func(c *Config) *bool { return &c.Libvirt.LiveMigrationPermitAutoConverge },
		"Let the libvirt driver throttle the guest's vCPUs when a live migration does not converge (only when post-copy is not used)."),
	strOpt("libvirt", "connection_uri", func(c *Config) *string { return &c.Libvirt.ConnectionURI },
		"The libvirtd the libvirt driver manages, e.g. qemu:///system or qemu+unix:///system?socket=/run/libvirt/libvirt-sock; {host} in it is replaced with the agent's host name (keel dev runs several agents on one configuration).").checked(nonEmpty),
	strOpt("libvirt", "virt_type", func(c *Config) *string { return &c.Libvirt.VirtType },
		"The libvirt driver's domain type: qemu (TCG, no /dev/kvm needed) or kvm.").
		oneOf("qemu", "kvm"),
	strOpt("libvirt", "live_migration_scheme", func(c *Config) *string { return &c.Libvirt.LiveMigrationScheme },
		"Transport a source's libvirtd uses to reach this host's for a live migration: qemu+SCHEME://ADDR/system.").
		oneOf("tcp", "tls", "ssh"),
	strOpt("libvirt", "live_migration_inbound_addr", func(c *Config) *string { return &c.Libvirt.LiveMigrationInboundAddr },
		"Address (IP or name) other hosts' libvirtd reach this host's at for live migrations, also used for QEMU's migration stream; empty means the host's name."),

	// [metrics]
	secondsOpt("metrics", "report_interval", func(c *Config) *time.Duration { return &c.Metrics.ReportInterval },
		"Seconds between an agent's reports of measured usage (the metrics MetricsWeigher weighs, the instances' usage), never tied to update_resources_interval; 0 turns them off.").atLeast(0),
	secondsOpt("metrics", "sample_interval", func(c *Config) *time.Duration { return &c.Metrics.SampleInterval },
		"Seconds between two readings of the driver between reports: a reading whose cpu.percent moved by more than report_threshold is reported at once.").atLeast(1),
	floatOpt("metrics", "report_threshold", func(c *Config) *float64 { return &c.Metrics.ReportThreshold },
		"A change of the host's cpu.percent (a fraction: 0.10 is 10 points) that an agent reports at once rather than at its next report_interval.").atLeast(0),
	listOpt("metrics", "weight_setting", func(c *Config) *[]string { return &c.Metrics.WeightSetting }, checkWeightSetting,
		"MetricsWeigher's metrics and ratios, name=ratio comma-separated (cpu.percent=-1.0 prefers the least busy hosts); a host's weight is the sum of ratio × value. Names: "+strings.Join(records.MetricNames, ", ")+" (Nova's; the percents are fractions, 0.25 is 25 %) and keel's "+strings.Join(records.MemoryMetricNames, ", ")+" (the host's memory as its kernel reports it, MiB)."),
	boolOpt("metrics", "required", func(c *Config) *bool { return &c.Metrics.Required },
		"Whether a host lacking a metric of weight_setting (or whose measurement is older than max_age) fails the decision, as Nova's raises; false weighs it weight_of_unavailable. Enable MetricFilter to skip such hosts instead. A metric of weight_setting that no host will report ([keel] driver does not measure it, or report_interval is 0) stops the server at start when true, and is a warning when false."),
	floatOpt("metrics", "weight_of_unavailable", func(c *Config) *float64 { return &c.Metrics.WeightOfUnavailable },
		"The weight of a host lacking a metric of weight_setting when required is false."),
	secondsOpt("metrics", "max_age", func(c *Config) *time.Duration { return &c.Metrics.MaxAge },
		"Seconds after which a measurement counts as unavailable (keel's; Nova weighs any age); 0: no bound.").atLeast(0),
}, schedulerOptions(metricsOnly(scheduler.WeigherOptions())), []*option{

	// [notifications]
	strOpt("notifications", "notification_format", func(c *Config) *string { return &c.Notifications.Format },
		"Which notifications to send: versioned (Nova's versioned notifications, keel's default), both (the same: keel has no legacy ones), or unversioned (Nova's default, which keel does not send: nothing goes to RabbitMQ).").
		oneOf("versioned", "both", "unversioned"),
	listOpt("notifications", "versioned_notifications_topics", func(c *Config) *[]string { return &c.Notifications.Topics }, nonEmptyList,
		"Topics versioned notifications go to, each as topic.priority on the nova exchange (versioned_notifications.info, .error)."),

	// [oslo_messaging_notifications]
	strOpt("oslo_messaging_notifications", "driver", func(c *Config) *string { return &c.Notifications.Driver },
		"messagingv2 sends Nova's versioned notifications to RabbitMQ at transport_url, in oslo.messaging's v2 envelope; noop (or unset, Nova's default) sends none there. keel's own bus (keel.notify.<event_type>) carries them either way.").
		oneOf("", "messagingv2", "noop"),
	strOpt("oslo_messaging_notifications", "transport_url", func(c *Config) *string { return &c.Notifications.TransportURL },
		"The RabbitMQ notifications go to (rabbit://user:password@host:5672/vhost; several hosts comma-separated are tried in turn); empty means [DEFAULT] transport_url.").checked(checkTransportURL),

	// [scheduler]
	intOpt("scheduler", "max_attempts", func(c *Config) *int { return &c.Scheduler.MaxAttempts },
		"Claims tried per scheduling decision: the chosen host, then the next best when a claim is refused.").atLeast(1),
})

// filterSchedulerOnly and metricsOnly split the registry's options by
// group.
func filterSchedulerOnly(opts []scheduler.Option) []scheduler.Option {
	return slices.DeleteFunc(opts, func(o scheduler.Option) bool { return o.Group != "" })
}

func metricsOnly(opts []scheduler.Option) []scheduler.Option {
	return slices.DeleteFunc(opts, func(o scheduler.Option) bool { return o.Group != "metrics" })
}

func checkWorkload(raw string) error {
	if raw == "" {
		return nil
	}
	_, err := workload.Parse(raw)
	return err
}

func checkWeightSetting(items []string) ([]string, error) {
	if _, err := scheduler.ParseWeightSetting(items); err != nil {
		return nil, err
	}
	return items, nil
}

// schedulerOptions makes [filter_scheduler] options of the scheduler
// registry's options: a number (a whole one for an Integer option) with
// the registry's minimum, kept in FilterSchedulerGroup.Options.
func schedulerOptions(opts []scheduler.Option) []*option {
	out := make([]*option, 0, len(opts))
	for _, so := range opts {
		group := "filter_scheduler"
		if so.Group != "" {
			group = so.Group
		}
		o := &option{group: group, name: so.Name, typ: "float", help: so.Help}
		parse := parseFloat
		format := formatFloat
		if so.Integer {
			o.typ = "integer"
			parse = func(raw string) (float64, error) {
				n, err := parseInt(raw)
				return float64(n), err
			}
			format = func(f float64) string { return strconv.FormatInt(int64(f), 10) }
		}
		if so.HasMin {
			o.atLeast(so.Min)
		}
		o.set = func(c *Config, raw string) error {
			v, err := parse(raw)
			if err != nil {
				return err
			}
			if o.hasMin && v < o.min {
				return fmt.Errorf("must be at least %s, got %s", formatNum(o.min), raw)
			}
			opts := maps.Clone(c.FilterScheduler.Options)
			if opts == nil {
				opts = map[string]float64{}
			}
			opts[so.Name] = v
			c.FilterScheduler.Options = opts
			return nil
		}
		o.get = func(c *Config) string {
			if v, ok := c.FilterScheduler.Options[so.Name]; ok {
				return format(v)
			}
			return format(so.Default)
		}
		out = append(out, o)
	}
	return out
}

func nonEmpty(raw string) error {
	if raw == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// byKey finds an option by its canonical name or an alias; groups holds
// the groups keel reads.
var (
	byKey  = map[optKey]*option{}
	groups = map[string]bool{}
)

func init() {
	for _, o := range options {
		for _, k := range append([]optKey{o.key()}, o.aliases...) {
			if byKey[k] != nil {
				panic("config: option defined twice: [" + k.group + "] " + k.name)
			}
			byKey[k] = o
			groups[k.group] = true
		}
		if !slices.Contains(groupOrder, o.group) {
			panic("config: group not in groupOrder: " + o.group)
		}
	}
}

func lookup(group, name string) *option { return byKey[optKey{group, name}] }

// normGroup normalises a group name as oslo.config does: DEFAULT stays,
// every other name is lower-cased.
func normGroup(g string) string {
	if g == "DEFAULT" {
		return g
	}
	return strings.ToLower(g)
}

func itoa(n int) string { return strconv.Itoa(n) }
