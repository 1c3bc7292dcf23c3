package scenario

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// Snapshot is a live cloud as keel's admin API reports it (GET
// /keel/v1/cloud): what `keel sim export` turns into a scenario file.
type Snapshot struct {
	TakenAt      time.Time             `json:"taken_at"`
	Scheduler    SnapshotScheduler     `json:"scheduler"`
	Compute      SnapshotCompute       `json:"compute"`
	Hosts        []SnapshotHost        `json:"hosts"`
	Instances    []SnapshotInstance    `json:"instances"`
	ServerGroups []records.ServerGroup `json:"server_groups"`
	Aggregates   []records.Aggregate   `json:"aggregates"`
}

// SnapshotScheduler is the scheduler's configuration in force.
type SnapshotScheduler struct {
	EnabledFilters              []string           `json:"enabled_filters"`
	Weighers                    []string           `json:"weighers"`
	HostSubsetSize              int                `json:"host_subset_size"`
	ShuffleBestSameWeighedHosts bool               `json:"shuffle_best_same_weighed_hosts"`
	MaxAttempts                 int                `json:"max_attempts"`
	Options                     map[string]float64 `json:"options"`
	ServiceDownTime             float64            `json:"service_down_time"` // seconds
}

// SchedulerSnapshot is a scheduler configuration as a snapshot holds it.
func SchedulerSnapshot(sc scheduler.Config) SnapshotScheduler {
	return SnapshotScheduler{EnabledFilters: sc.EnabledFilters, Weighers: sc.Weighers, HostSubsetSize: sc.HostSubsetSize,
		ShuffleBestSameWeighedHosts: sc.ShuffleBestSameWeighedHosts, MaxAttempts: sc.MaxAttempts,
		Options: sc.Options, ServiceDownTime: sc.ServiceDownTime.Seconds()}
}

// SnapshotCompute is the compute options the server knows (its own
// configuration: the agents run with theirs, normally the same file).
type SnapshotCompute struct {
	UpdateResourcesInterval     int     `json:"update_resources_interval"`
	MigrationBandwidthMiBps     float64 `json:"migration_bandwidth_mib_s"`
	MaxConcurrentLiveMigrations int     `json:"max_concurrent_live_migrations"`
	ReportInterval              float64 `json:"report_interval"` // seconds
	SpawnSeconds                float64 `json:"spawn_seconds"`
}

// SnapshotHost is one compute host: its provider's inventories, usage and
// traits, and its service's state.
type SnapshotHost struct {
	Name        string                `json:"name"`
	Inventories placement.Inventories `json:"inventories"`
	Used        placement.Resources   `json:"used"`
	Traits      []string              `json:"traits,omitempty"`
	Zone        string                `json:"zone"`
	Disabled    bool                  `json:"disabled"`
	ForcedDown  bool                  `json:"forced_down"`
}

// SnapshotInstance is one instance on a host.
type SnapshotInstance struct {
	UUID          string         `json:"uuid"`
	Name          string         `json:"name"`
	Host          string         `json:"host"`
	Flavor        records.Flavor `json:"flavor"`
	RequestedZone string         `json:"requested_zone,omitempty"`
	// Group is its server group's UUID.
	Group   string `json:"group,omitempty"`
	VMState string `json:"vm_state"`
}

// ExportDuration is the run length an exported scenario gets: an hour,
// for a what-if to edit.
const ExportDuration = 3600

// FromSnapshot turns a live cloud into a scenario: one [[hosts]] section
// per host (by name, with its inventories and service state), one
// [[flavor]] per flavor in use, one [[instance]] per instance on a host,
// its server groups and aggregates, and the scheduler's and compute
// options. What the simulator cannot hold is left out and said in the
// notes it returns (hosts without VCPU, MEMORY_MB or DISK_GB inventory and
// their instances). The result is validated.
func FromSnapshot(snap Snapshot) (*Scenario, []string, error) {
	var notes []string
	s := &Scenario{Name: "export", Seed: 1, Duration: ExportDuration}
	sc := snap.Scheduler
	s.Scheduler = Scheduler{EnabledFilters: slices.Clone(sc.EnabledFilters), Weighers: slices.Clone(sc.Weighers),
		HostSubsetSize: sc.HostSubsetSize, ShuffleBestSameWeighedHosts: sc.ShuffleBestSameWeighedHosts, MaxAttempts: sc.MaxAttempts,
		Options: maps.Clone(sc.Options)}
	down := sc.ServiceDownTime
	s.Scheduler.ServiceDownTime = &down
	cp := snap.Compute
	s.Compute = Compute{UpdateResourcesInterval: cp.UpdateResourcesInterval, MigrationBandwidthMiBps: cp.MigrationBandwidthMiBps,
		MaxConcurrentLiveMigrations: cp.MaxConcurrentLiveMigrations, SpawnSeconds: cp.SpawnSeconds}
	if cp.ReportInterval > 0 {
		ri := cp.ReportInterval
		s.Compute.ReportInterval = &ri
	}

	// Hosts. The most common reserved amounts go to [compute], the others
	// are per host.
	memRes, diskRes := map[int64]int{}, map[int64]int{}
	kept := map[string]bool{}
	for _, h := range snap.Hosts {
		cpu, ok1 := h.Inventories[placement.VCPU]
		mem, ok2 := h.Inventories[placement.MemoryMB]
		disk, ok3 := h.Inventories[placement.DiskGB]
		if !ok1 || !ok2 || !ok3 || cpu.Total < 1 || mem.Total < 1 || disk.Total < 1 {
			notes = append(notes, fmt.Sprintf("host %s left out: the simulator needs VCPU, MEMORY_MB and DISK_GB inventories", h.Name))
			continue
		}
		kept[h.Name] = true
		memRes[mem.Reserved]++
		diskRes[disk.Reserved*1024]++
	}
	commonMem, commonDisk := mostCommon(memRes), mostCommon(diskRes)
	s.Compute.ReservedHostMemoryMB = &commonMem
	s.Compute.ReservedHostDiskMB = commonDisk
	for _, h := range snap.Hosts {
		if !kept[h.Name] {
			continue
		}
		cpu, mem, disk := h.Inventories[placement.VCPU], h.Inventories[placement.MemoryMB], h.Inventories[placement.DiskGB]
		g := HostGroup{Name: h.Name, VCPUs: cpu.Total, CPUAllocationRatio: cpu.AllocationRatio, MemoryMB: mem.Total,
			RAMAllocationRatio: mem.AllocationRatio, DiskGB: disk.Total, DiskAllocationRatio: disk.AllocationRatio,
			Zone: h.Zone, Disabled: h.Disabled || h.ForcedDown, Traits: slices.Clone(h.Traits)}
		if mem.Reserved != commonMem {
			v := mem.Reserved
			g.ReservedHostMemoryMB = &v
		}
		if disk.Reserved*1024 != commonDisk {
			v := disk.Reserved * 1024
			g.ReservedHostDiskMB = &v
		}
		if h.ForcedDown && !h.Disabled {
			notes = append(notes, fmt.Sprintf("host %s is forced down: written as disabled", h.Name))
		}
		s.HostGroups = append(s.HostGroups, g)
	}

	// Server groups, named uniquely.
	groupName := map[string]string{}
	used := map[string]bool{}
	for _, g := range snap.ServerGroups {
		name := g.Name
		if name == "" || used[name] {
			name = strings.TrimSuffix(g.Name+"-"+short(g.UUID), "-")
			name = strings.TrimPrefix(name, "-")
		}
		used[name] = true
		groupName[g.UUID] = name
		s.ServerGroups = append(s.ServerGroups, ServerGroup{Name: name, Policy: g.Policy, MaxServerPerHost: g.MaxServerPerHost})
	}

	// Flavors in use (one name each: a name used by flavors of different
	// sizes gets its id appended), then the instances.
	flavorName := map[string]string{} // size key → scenario flavor name
	taken := map[string]bool{}
	for _, in := range snap.Instances {
		if in.Host == "" {
			continue
		}
		if !kept[in.Host] {
			notes = append(notes, fmt.Sprintf("instance %s (%s) left out: its host %s is not in the file", in.Name, in.UUID, in.Host))
			continue
		}
		f := in.Flavor
		key := flavorKey(f)
		name, ok := flavorName[key]
		if !ok {
			name = f.Name
			if name == "" || taken[name] {
				name = strings.TrimPrefix(f.Name+"-"+f.ID, "-")
			}
			for n := 2; taken[name]; n++ {
				name = f.Name + "-" + strconv.Itoa(n)
			}
			taken[name] = true
			flavorName[key] = name
			s.Flavors = append(s.Flavors, Flavor{Name: name, VCPUs: max(f.VCPUs, 1), RAMMB: max(f.RAMMB, 1), DiskGB: f.DiskGB, ExtraSpecs: maps.Clone(f.ExtraSpecs)})
		}
		s.Instances = append(s.Instances, Instance{Name: in.Name, Host: in.Host, Flavor: name, Group: groupName[in.Group], Zone: in.RequestedZone})
	}

	for _, a := range snap.Aggregates {
		var hosts []string
		for _, h := range a.Hosts {
			if kept[h] && !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
		s.Aggregates = append(s.Aggregates, Aggregate{Name: a.Name, Hosts: hosts, Metadata: maps.Clone(a.Metadata)})
	}
	if len(s.HostGroups) == 0 {
		return nil, notes, fmt.Errorf("the cloud has no host the simulator can hold")
	}
	if err := s.Validate(); err != nil {
		return nil, notes, fmt.Errorf("the exported scenario does not validate: %w", err)
	}
	return s, notes, nil
}

func short(uuid string) string {
	if len(uuid) > 8 {
		return uuid[:8]
	}
	return uuid
}

func flavorKey(f records.Flavor) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%d\x00%d\x00%d", f.Name, f.VCPUs, f.RAMMB, f.DiskGB)
	for _, k := range slices.Sorted(maps.Keys(f.ExtraSpecs)) {
		fmt.Fprintf(&b, "\x00%s=%s", k, f.ExtraSpecs[k])
	}
	return b.String()
}

// mostCommon is the value seen most often (the smallest of equals).
func mostCommon(m map[int64]int) int64 {
	var best int64
	n := -1
	for _, v := range slices.Sorted(maps.Keys(m)) {
		if m[v] > n {
			best, n = v, m[v]
		}
	}
	return best
}

// WriteTOML writes the scenario as a scenario file Parse reads back to the
// same scenario: every key that differs from its default (the scheduler's
// options all, as the cloud runs them), with a few comments.
func (s *Scenario) WriteTOML(w io.Writer, header ...string) error {
	if len(s.Events)+len(s.Drains)+len(s.Workloads) > 0 {
		return fmt.Errorf("writing scenario %s: events, drains and workloads are not written (an export has none)", s.Name)
	}
	var b tomlWriter
	for _, h := range header {
		for _, line := range strings.Split(h, "\n") {
			b.WriteString("# " + line + "\n")
		}
	}
	b.kv("name", s.Name)
	b.kv("seed", s.Seed)
	b.kv("duration", s.Duration)
	if len(s.Policies) > 0 {
		b.kv("policies", s.Policies)
	}
	b.writeScheduler(s.Scheduler)
	b.writeCompute(s.Compute)
	for _, f := range s.Flavors {
		b.WriteString("\n[[flavor]]\n")
		b.kv("name", f.Name)
		b.kv("vcpus", f.VCPUs)
		b.kv("ram", f.RAMMB)
		b.kv("disk", f.DiskGB)
		if len(f.ExtraSpecs) > 0 {
			b.kv("extra_specs", f.ExtraSpecs)
		}
	}
	for _, g := range s.HostGroups {
		b.writeHostGroup(g)
	}
	b.writeGroupsAndInstances(s)
	_, err := io.WriteString(w, b.String())
	return err
}

// tomlWriter builds a scenario file, one key = value line at a time.
type tomlWriter struct{ strings.Builder }

func (b *tomlWriter) kv(k string, v any) { fmt.Fprintf(b, "%s = %s\n", k, tomlValue(v)) }

// writeScheduler writes [scheduler]: the options set, and every per-weigher
// and per-filter option the cloud runs with.
func (b *tomlWriter) writeScheduler(sc Scheduler) {
	b.WriteString("\n[scheduler]\n")
	if sc.EnabledFilters != nil {
		b.kv("enabled_filters", sc.EnabledFilters)
	}
	if sc.Weighers != nil {
		b.kv("weighers", sc.Weighers)
	}
	if sc.HostSubsetSize != 0 {
		b.kv("host_subset_size", sc.HostSubsetSize)
	}
	b.kv("shuffle_best_same_weighed_hosts", sc.ShuffleBestSameWeighedHosts)
	if sc.MaxAttempts != 0 {
		b.kv("max_attempts", sc.MaxAttempts)
	}
	if sc.ServiceDownTime != nil {
		b.kv("service_down_time", *sc.ServiceDownTime)
	}
	for _, k := range slices.Sorted(maps.Keys(sc.Options)) {
		if o, ok := scheduler.LookupOption(k); ok && o.Integer {
			b.kv(k, int64(sc.Options[k]))
		} else {
			b.kv(k, sc.Options[k])
		}
	}
}

// writeCompute writes [compute]: the options that differ from their
// defaults.
func (b *tomlWriter) writeCompute(cp Compute) {
	b.WriteString("\n[compute]\n")
	if cp.UpdateResourcesInterval != 0 {
		b.kv("update_resources_interval", cp.UpdateResourcesInterval)
	}
	if cp.ReservedHostMemoryMB != nil {
		b.kv("reserved_host_memory_mb", *cp.ReservedHostMemoryMB)
	}
	if cp.ReservedHostDiskMB != 0 {
		b.kv("reserved_host_disk_mb", cp.ReservedHostDiskMB)
	}
	if cp.MigrationBandwidthMiBps != 0 {
		b.kv("migration_bandwidth_mib_s", cp.MigrationBandwidthMiBps)
	}
	if cp.SpawnSeconds != 0 {
		b.kv("spawn_seconds", cp.SpawnSeconds)
	}
	if cp.MaxConcurrentLiveMigrations != 0 {
		b.kv("max_concurrent_live_migrations", cp.MaxConcurrentLiveMigrations)
	}
	if cp.ReportInterval != nil {
		b.kv("report_interval", *cp.ReportInterval)
	}
}

// writeHostGroup writes one [[hosts]] group.
func (b *tomlWriter) writeHostGroup(g HostGroup) {
	b.WriteString("\n[[hosts]]\n")
	if g.Name != "" {
		b.kv("name", g.Name)
	} else {
		b.kv("prefix", g.Prefix)
		b.kv("count", g.Count)
		if g.First != 0 {
			b.kv("first", g.First)
		}
		if g.Digits != 0 {
			b.kv("digits", g.Digits)
		}
	}
	b.kv("vcpus", g.VCPUs)
	if g.CPUAllocationRatio != 0 {
		b.kv("cpu_allocation_ratio", g.CPUAllocationRatio)
	}
	b.kv("memory_mb", g.MemoryMB)
	if g.RAMAllocationRatio != 0 {
		b.kv("ram_allocation_ratio", g.RAMAllocationRatio)
	}
	b.kv("disk_gb", g.DiskGB)
	if g.DiskAllocationRatio != 0 {
		b.kv("disk_allocation_ratio", g.DiskAllocationRatio)
	}
	if g.Zone != "" {
		b.kv("zone", g.Zone)
	}
	if g.ReservedHostMemoryMB != nil {
		b.kv("reserved_host_memory_mb", *g.ReservedHostMemoryMB)
	}
	if g.ReservedHostDiskMB != nil {
		b.kv("reserved_host_disk_mb", *g.ReservedHostDiskMB)
	}
	if len(g.Traits) > 0 {
		b.kv("traits", g.Traits)
	}
	if len(g.Instances) > 0 {
		b.kv("instances", g.Instances)
	}
	if g.AuditPhase != 0 {
		b.kv("audit_phase", g.AuditPhase)
	}
	if g.AuditSpread {
		b.kv("audit_spread", true)
	}
	if g.Disabled {
		b.kv("disabled", true)
	}
}

// writeGroupsAndInstances writes the server groups, the aggregates and the
// initial instances placed by name.
func (b *tomlWriter) writeGroupsAndInstances(s *Scenario) {
	for _, g := range s.ServerGroups {
		b.WriteString("\n[[server_group]]\n")
		b.kv("name", g.Name)
		b.kv("policy", g.Policy)
		if g.MaxServerPerHost != 0 {
			b.kv("max_server_per_host", g.MaxServerPerHost)
		}
	}
	for _, a := range s.Aggregates {
		b.WriteString("\n[[aggregate]]\n")
		b.kv("name", a.Name)
		b.kv("hosts", a.Hosts)
		if len(a.Metadata) > 0 {
			b.kv("metadata", a.Metadata)
		}
	}
	for _, in := range s.Instances {
		b.WriteString("\n[[instance]]\n")
		if in.Name != "" {
			b.kv("name", in.Name)
		}
		b.kv("host", in.Host)
		b.kv("flavor", in.Flavor)
		if in.Group != "" {
			b.kv("group", in.Group)
		}
		if in.Zone != "" {
			b.kv("zone", in.Zone)
		}
	}
}

// tomlValue writes a value in TOML.
func tomlValue(v any) string {
	switch x := v.(type) {
	case string:
		return tomlString(x)
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatFloat(x, 'f', 1, 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = tomlString(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]string:
		parts := make([]string, 0, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, tomlString(k)+" = "+tomlString(x[k]))
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	case map[string]int:
		parts := make([]string, 0, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, tomlString(k)+" = "+strconv.Itoa(x[k]))
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	}
	panic(fmt.Sprintf("scenario: no TOML form for %T", v))
}

// tomlString is a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
