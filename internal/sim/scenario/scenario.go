// Package scenario reads the simulator's scenario files (TOML): hosts in
// groups, flavors, initial instances, scheduler and compute options with
// Nova's names, and the workload (drains, boots, deletes, random live
// migrations, enable/disable events). A malformed file is refused with the
// file, line and reason.
package scenario

// Scenario is one parsed scenario file. Times are seconds from t=0.
type Scenario struct {
	Name string `toml:"name"`
	// Seed seeds every random choice (scheduler subset pick, workload).
	Seed int64 `toml:"seed"`
	// Duration is when the run ends, in seconds; events due at exactly
	// Duration (audits included) still run.
	Duration float64 `toml:"duration"`
	// Policies to run; empty means all three: legacy, dest-update, claim.
	Policies []string `toml:"policies"`

	Scheduler Scheduler `toml:"scheduler"`
	Compute   Compute   `toml:"compute"`

	Flavors    []Flavor    `toml:"flavor"`
	HostGroups []HostGroup `toml:"hosts"`
	// Shared are sharing providers (MISC_SHARES_VIA_AGGREGATE): a pool
	// of resources the hosts of some groups take from, as a shared
	// storage's DISK_GB.
	Shared []Shared `toml:"shared"`
	// Instances are initial instances placed one by one (as keel sim
	// export writes a live cloud's), after each host's group instances.
	Instances    []Instance    `toml:"instance"`
	ServerGroups []ServerGroup `toml:"server_group"`
	Aggregates   []Aggregate   `toml:"aggregate"`
	Events       []Event       `toml:"event"`
	Drains       []Drain       `toml:"drain"`
	Workloads    []Workload    `toml:"workload"`
	// Metrics is measured usage: MetricsWeigher's [metrics] options and
	// the agents' reports (see Metrics).
	Metrics Metrics `toml:"metrics"`
}

// Metrics is the [metrics] section: what MetricsWeigher weighs and how
// the simulated agents report measured usage, per policy — legacy only at
// each periodic audit (Nova's compute_monitors), dest-update also on
// both hosts as soon as a live migration lands, claim every
// report_interval with the scheduler assuming each claim's load at once.
// Measured usage comes from the fake driver's workload models (a
// flavor's workload, else Workload).
type Metrics struct {
	WeightSetting       []string `toml:"weight_setting"`
	Required            *bool    `toml:"required"`
	WeightOfUnavailable *float64 `toml:"weight_of_unavailable"`
	// MaxAge is keel's max_age in seconds (claim policy only: legacy and
	// dest-update weigh any age, as Nova does); ReportInterval the claim
	// policy's report cadence (default 10).
	MaxAge         *float64 `toml:"max_age"`
	ReportInterval *float64 `toml:"report_interval"`
	// Workload is the default workload model of the guests.
	Workload string `toml:"workload"`
}

// Enabled reports whether the scenario measures usage.
func (m Metrics) Enabled() bool { return len(m.WeightSetting) > 0 || m.Workload != "" }

// Scheduler holds Nova's scheduler options; zero values mean Nova's
// defaults (applied by the scheduler package, not here), except that
// pointers distinguish "unset" from an explicit 0 / false. ApplyDefaults
// sets host_subset_size 0 → 1 and max_attempts 0 → 3 (Nova's defaults) and
// leaves the rest as written.
type Scheduler struct {
	HostSubsetSize              int      `toml:"host_subset_size"`
	ShuffleBestSameWeighedHosts bool     `toml:"shuffle_best_same_weighed_hosts"`
	MaxAttempts                 int      `toml:"max_attempts"`
	EnabledFilters              []string `toml:"enabled_filters"`
	Weighers                    []string `toml:"weighers"` // default: all keel has

	// Options are the filters' and weighers' own options the file sets
	// (ram_weight_multiplier, max_io_ops_per_host, …: every option of the
	// scheduler's registry is a key of [scheduler]); an option not written
	// is absent and takes Nova's default.
	Options map[string]float64 `toml:"-"`
	// ServiceDownTime is [DEFAULT] service_down_time: a host whose last
	// heartbeat is older is down (ComputeFilter refuses it); 0 disables
	// the check. ApplyDefaults sets 60 when unset.
	ServiceDownTime *float64 `toml:"service_down_time"`
}

// Compute holds the agents' options (Nova's [DEFAULT] names).
type Compute struct {
	// UpdateResourcesInterval: seconds between periodic audits; 0 means 60,
	// negative disables them.
	UpdateResourcesInterval int `toml:"update_resources_interval"`
	// ReservedHostMemoryMB defaults to 512 when unset.
	ReservedHostMemoryMB *int64 `toml:"reserved_host_memory_mb"`
	ReservedHostDiskMB   int64  `toml:"reserved_host_disk_mb"`
	// MigrationBandwidthMiBps is the fake driver's copy speed; 0 means 1024
	// (1 GiB/s). Migration time = RAM ÷ bandwidth.
	MigrationBandwidthMiBps float64 `toml:"migration_bandwidth_mib_s"`
	// SpawnSeconds is how long a boot takes in the fake driver.
	SpawnSeconds float64 `toml:"spawn_seconds"`
	// MaxConcurrentLiveMigrations per source host; 0 means 1 (Nova's default).
	MaxConcurrentLiveMigrations int `toml:"max_concurrent_live_migrations"`
	// ReportInterval is [DEFAULT] report_interval: seconds between a host's
	// heartbeats on the virtual clock. ApplyDefaults sets 10 when unset.
	ReportInterval *float64 `toml:"report_interval"`
}

// Flavor is an instance size.
type Flavor struct {
	Name   string `toml:"name"`
	VCPUs  int64  `toml:"vcpus"`
	RAMMB  int64  `toml:"ram"`
	DiskGB int64  `toml:"disk"`
	// ExtraSpecs are the flavor's extra specs: resources:CLASS=N,
	// resourcesN:CLASS=N, trait:NAME=required|forbidden, traitN:…,
	// group_policy, as Nova reads them into Placement request groups.
	ExtraSpecs map[string]string `toml:"extra_specs"`
	// Workload is the flavor's workload model (package workload: the
	// extra spec keel:workload).
	Workload string `toml:"workload"`
}

// Child is a provider under each host of a group (a NUMA cell, a
// physical GPU): named HOST_NAME, with inventories and traits of its own.
type Child struct {
	Name string `toml:"name"`
	// Resources maps a resource class (standard or CUSTOM_…) to its total.
	Resources map[string]int64 `toml:"resources"`
	Traits    []string         `toml:"traits"`
}

// Shared is a sharing provider: its inventories are usable by every host
// of the groups it names (one aggregate holds them all).
type Shared struct {
	Name      string           `toml:"name"`
	Resources map[string]int64 `toml:"resources"`
	Traits    []string         `toml:"traits"`
	// Groups are the prefixes of the [[hosts]] groups sharing it.
	Groups []string `toml:"groups"`
}

// HostGroup is Count hosts of one size, named Prefix + zero-padded number
// (First, First+1, …; Digits wide, default 2 or as wide as needed).
type HostGroup struct {
	// Name, instead of Prefix and a number, names a single host (Count is
	// then 1).
	Name   string `toml:"name"`
	Prefix string `toml:"prefix"`
	Count  int    `toml:"count"`
	First  int    `toml:"first"` // default 1
	Digits int    `toml:"digits"`

	VCPUs               int64   `toml:"vcpus"`
	CPUAllocationRatio  float64 `toml:"cpu_allocation_ratio"` // default 4.0 (Nova's initial_cpu_allocation_ratio)
	MemoryMB            int64   `toml:"memory_mb"`
	RAMAllocationRatio  float64 `toml:"ram_allocation_ratio"` // default 1.0
	DiskGB              int64   `toml:"disk_gb"`
	DiskAllocationRatio float64 `toml:"disk_allocation_ratio"` // default 1.0
	Zone                string  `toml:"zone"`                  // default "nova"

	// Instances maps flavor name to how many instances each host starts
	// with at t=0 (created in flavor order of the [[flavor]] list, round by
	// round: one of each flavor, then again, so creation order interleaves).
	Instances map[string]int `toml:"instances"`
	// AuditPhase is when, in seconds after t=0, each host's periodic audit
	// first falls due after the one that ran at t=0 minus the interval;
	// i.e. audits run at AuditPhase + k × interval. "spread" is expressed by
	// AuditSpread = true instead: host i of the group's n gets phase
	// i × interval / n (HostSpec.AuditPhase holds each host's phase).
	AuditPhase  float64 `toml:"audit_phase"`
	AuditSpread bool    `toml:"audit_spread"`
	// Disabled hosts start disabled (ComputeFilter rejects them).
	Disabled bool `toml:"disabled"`
	// Children are providers under each host's own ([[hosts.child]]).
	Children []Child `toml:"child"`
	// Traits are the hosts' placement traits (a flavor's
	// trait:NAME=required asks for them).
	Traits []string `toml:"traits"`
	// ReservedHostMemoryMB and ReservedHostDiskMB override [compute]'s
	// reserved amounts for these hosts.
	ReservedHostMemoryMB *int64 `toml:"reserved_host_memory_mb"`
	ReservedHostDiskMB   *int64 `toml:"reserved_host_disk_mb"`
}

// Instance is one initial instance on a named host.
type Instance struct {
	// Name is the instance's name (default: host-flavor-number).
	Name   string `toml:"name"`
	Host   string `toml:"host"`
	Flavor string `toml:"flavor"`
	// Group is the name of its [[server_group]] ("" for none).
	Group string `toml:"group"`
	// Zone is the availability zone it asked for ("" for any): its moves
	// stay in that zone.
	Zone string `toml:"zone"`
}

// ServerGroup is a server group; its members are the instances naming it.
type ServerGroup struct {
	Name string `toml:"name"`
	// Policy is affinity, anti-affinity, soft-affinity or
	// soft-anti-affinity.
	Policy string `toml:"policy"`
	// MaxServerPerHost is anti-affinity's max_server_per_host (0 means 1).
	MaxServerPerHost int `toml:"max_server_per_host"`
}

// Aggregate is a host aggregate: its metadata's availability_zone puts its
// hosts in that zone, and AggregateInstanceExtraSpecsFilter reads the rest.
type Aggregate struct {
	Name     string            `toml:"name"`
	Hosts    []string          `toml:"hosts"`
	Metadata map[string]string `toml:"metadata"`
}

// Event is a one-off change at a time.
type Event struct {
	At      float64  `toml:"at"`
	Disable []string `toml:"disable"`
	Enable  []string `toml:"enable"`
	// StopHeartbeats hosts stop reporting (a host that died, its agent
	// gone): service_down_time after their last heartbeat they are down.
	// StartHeartbeats hosts report again (at once, then every
	// report_interval).
	StopHeartbeats  []string `toml:"stop_heartbeats"`
	StartHeartbeats []string `toml:"start_heartbeats"`
}

// Drain empties hosts by live migration, Nova style: starting at Start,
// every Interval seconds it starts the next instance's migration (hosts in
// the order listed, instances in creation order) as long as fewer than
// InFlight are running (one that fails at once, with no valid host, uses
// its tick: the next waits for the next tick); Interval 0 means "as soon
// as a slot frees". The
// scheduler picks each destination unless a target host is named.
type Drain struct {
	Start    float64  `toml:"start"`
	Interval float64  `toml:"interval"`
	InFlight int      `toml:"in_flight"` // default 1
	Hosts    []string `toml:"hosts"`
	// Disable the drained hosts at Start (default true).
	Disable *bool `toml:"disable"`
	// Order is the order of the drain's moves: "given" (the default: the
	// hosts as listed, each one's instances in creation order, as Nova's
	// host-evacuate-live), or "largest" or "smallest" (most or least RAM
	// first, over all the drained hosts), as keel host drain --order.
	Order string `toml:"order"`
}

// Workload is a stream of operations at a steady rate between Start and
// End (End 0 means the scenario's end; ApplyDefaults writes it in).
type Workload struct {
	// Kind is "boot", "delete" or "migrate" (a live migration of a random
	// active instance, destination chosen by the scheduler).
	Kind  string  `toml:"kind"`
	Rate  float64 `toml:"rate"` // operations per second
	Start float64 `toml:"start"`
	End   float64 `toml:"end"`
	// Flavors weights the flavor of each boot (flavor name → weight);
	// default: all flavors, equal weight.
	Flavors map[string]float64 `toml:"flavors"`
	// Poisson makes inter-arrival times exponential instead of regular.
	Poisson bool `toml:"poisson"`
}
