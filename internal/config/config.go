package config

import (
	"maps"
	"os"
	"slices"
	"time"

	"keel/internal/compute"
	"keel/internal/identity"
	"keel/internal/scheduler"
)

// Config is keel's configuration: one field per group, one field per
// option. Get one from Default, Load or Parse (a zero Config has none of
// the defaults), then apply flags with Set.
type Config struct {
	Default         DefaultGroup
	FilterScheduler FilterSchedulerGroup
	Scheduler       SchedulerGroup
	Libvirt         LibvirtGroup
	Keel            KeelGroup
	API             APIGroup
	// Notifications holds [oslo_messaging_notifications] and
	// [notifications]: where keel's versioned notifications go.
	Notifications NotificationsGroup
	// Metrics is [metrics]: the agents' reports of measured usage and
	// MetricsWeigher's options (weight_multiplier is kept with the
	// registry's options, in FilterScheduler.Options).
	Metrics MetricsGroup

	// origins records where each value that is not a default came from,
	// by canonical group and option. Set copies it before writing, so
	// copies of a Config never share changes.
	origins map[optKey]Origin
}

// DefaultGroup is nova.conf's [DEFAULT] group.
type DefaultGroup struct {
	// Host is host: this host's name (default: os.Hostname).
	Host string
	// UpdateResourcesInterval is update_resources_interval, in seconds: 0
	// means the default period (60 s), a negative value disables the
	// audit. See UpdateResourcesPeriod.
	UpdateResourcesInterval int
	ReservedHostMemoryMB    int // reserved_host_memory_mb (512)
	ReservedHostDiskMB      int // reserved_host_disk_mb (0)
	// ReservedHostCPUs is reserved_host_cpus (0). compute.HostConfig has
	// no field for it yet, so HostConfig does not carry it.
	ReservedHostCPUs int
	// Allocation ratios. Nova's cpu_allocation_ratio defaults to unset,
	// meaning initial_cpu_allocation_ratio (4.0); keel's default is 4.0.
	// 0.0 means the default, as in Nova.
	CPUAllocationRatio  float64 // cpu_allocation_ratio (4.0)
	RAMAllocationRatio  float64 // ram_allocation_ratio (1.0)
	DiskAllocationRatio float64 // disk_allocation_ratio (1.0)
	// MaxConcurrentLiveMigrations is max_concurrent_live_migrations (1);
	// 0 means unlimited.
	MaxConcurrentLiveMigrations int
	ServiceDownTime             time.Duration // service_down_time (60 s)
	ReportInterval              time.Duration // report_interval (10 s)
	// InstanceBuildTimeout is instance_build_timeout (900 s; Nova's
	// default 0 turns it off, as here): a boot still building after it
	// ends in ERROR.
	InstanceBuildTimeout time.Duration
	// AllowResizeToSameHost is allow_resize_to_same_host (false).
	AllowResizeToSameHost bool
	// ResizeConfirmWindow is resize_confirm_window (0: never): a resize
	// or cold migration left in VERIFY_RESIZE this long is confirmed.
	ResizeConfirmWindow time.Duration
	// ShelvedOffloadTime is shelved_offload_time (0: a shelved server is
	// offloaded at once; negative: never).
	ShelvedOffloadTime time.Duration
	// TransportURL is transport_url: the message bus of Nova's RPC, which
	// keel does not use; notifications go to it unless
	// [oslo_messaging_notifications] transport_url names another.
	TransportURL string
}

// FilterSchedulerGroup is nova.conf's [filter_scheduler] group.
type FilterSchedulerGroup struct {
	HostSubsetSize int      // host_subset_size (1)
	EnabledFilters []string // enabled_filters
	// WeightClasses is weight_classes, as weigher names (Nova's class
	// paths and nova.scheduler.weights.all_weighers are resolved).
	WeightClasses               []string
	ShuffleBestSameWeighedHosts bool // shuffle_best_same_weighed_hosts (false)
	// Options are the filters' and weighers' own options, by name — every
	// option of the scheduler's registry (scheduler.WeigherOptions and
	// FilterOptions: ram_weight_multiplier, max_io_ops_per_host, …), each
	// an option of this group.
	Options map[string]float64
}

// SchedulerGroup is nova.conf's [scheduler] group.
type SchedulerGroup struct {
	MaxAttempts int // max_attempts (3)
}

// LibvirtGroup holds nova.conf's [libvirt] live-migration options.
type LibvirtGroup struct {
	// LiveMigrationBandwidth is live_migration_bandwidth in MiB/s; 0 means
	// unlimited, which the fake driver models as 1024 MiB/s.
	LiveMigrationBandwidth int
	// LiveMigrationDowntime is live_migration_downtime (500 ms).
	LiveMigrationDowntime time.Duration
	// LiveMigrationCompletionTimeout is live_migration_completion_timeout
	// (800 s), per GiB of guest RAM; 0 disables the timeout.
	LiveMigrationCompletionTimeout time.Duration
	LiveMigrationPermitPostCopy    bool   // live_migration_permit_post_copy (false)
	LiveMigrationTimeoutAction     string // live_migration_timeout_action: abort (default) or force_complete
	// LiveMigrationPermitAutoConverge is
	// live_migration_permit_auto_converge (false): the libvirt driver
	// throttles a guest whose copy does not converge (when post-copy is
	// not used).
	LiveMigrationPermitAutoConverge bool
	// ConnectionURI is connection_uri (qemu:///system): the libvirt
	// driver's libvirtd; "{host}" in it stands for the agent's host name
	// (keel dev runs several agents on one configuration).
	ConnectionURI string
	// VirtType is virt_type (qemu): the libvirt driver's domain type,
	// qemu (TCG) or kvm.
	VirtType string
	// LiveMigrationScheme is live_migration_scheme (tcp) and
	// LiveMigrationInboundAddr live_migration_inbound_addr (empty: the
	// host's name): a source's libvirtd reaches this host's at
	// qemu+SCHEME://ADDR/system.
	LiveMigrationScheme      string
	LiveMigrationInboundAddr string
}

// KeelGroup is the [keel] group: keel's own settings.
type KeelGroup struct {
	Listen string // listen (127.0.0.1:8080)
	// ServerName is server_name: this keel server replica's name, which
	// owns the migrations it drives (empty: a UUID kept in
	// DATA_DIR/server_name, stable across restarts of the replica).
	ServerName string
	DataDir    string // data_dir (./.keel); [DEFAULT] state_path is another name for it
	NATSURL    string // nats_url (empty: run an embedded server)
	NATSListen string // nats_listen (127.0.0.1:0)
	// NATSCredentials is nats_credentials: the bus credentials file
	// (empty: DATA_DIR/bus-credentials.json).
	NATSCredentials string
	// DB is db: a postgres:// URL, or a SQLite path; empty means keel.db in
	// DataDir.
	DB string
	// ImageDir is image_dir: the image service's directory (empty:
	// DATA_DIR/images); replicas that share one share their images.
	ImageDir string
	// ImageSizeCap is image_size_cap (1 TiB, Glance's): the largest image
	// data an upload may store, in bytes.
	ImageSizeCap int
	// Driver is driver: the agent's virt driver, fake (default), qemu or
	// libvirt.
	Driver string
	// QEMUBinary is qemu_binary (qemu-system-x86_64) and QEMUArgs
	// qemu_args (none): the qemu driver's QEMU and extra arguments.
	QEMUBinary string
	QEMUArgs   string
	// FakeSpawnTime is fake_spawn_seconds (0).
	FakeSpawnTime time.Duration
	// FakeStepTime is fake_step_seconds (0): how long the fake driver takes
	// for pre_live_migration and post_live_migration_at_destination.
	FakeStepTime time.Duration
	// FakeWorkload is fake_workload (constant cpu=25%): the workload
	// model of a fake guest whose instance and flavor set none.
	FakeWorkload string
	// RPCTimeout is rpc_timeout (30 s): how long the conductor waits for an
	// agent's answer before taking the agent for gone.
	RPCTimeout time.Duration
	// EnablePprof is enable_pprof (false): the server serves Go's runtime
	// profiles at /debug/pprof/ to the admin.
	EnablePprof bool
	// MigrationStallTimeout is migration_stall_timeout (300 s): a live
	// migration whose memory copy reports no progress for this long is
	// aborted and rolled back; 0 turns it off.
	MigrationStallTimeout time.Duration
	// LostGuestTimeout is lost_guest_timeout (300 s): how long the guest
	// of an ACTIVE instance may be missing from its host's audits before
	// the instance is put in ERROR and its claim released
	// (compute.HostConfig.LostGuestTimeout); 0 at the first audit that
	// misses it.
	LostGuestTimeout time.Duration
	// MaxConcurrentIncomingLiveMigrations is
	// max_concurrent_incoming_live_migrations (0, unlimited): live
	// migrations into one destination host at once.
	MaxConcurrentIncomingLiveMigrations int
	// MaxConcurrentLiveMigrationsTotal is
	// max_concurrent_live_migrations_total (0, unlimited): live migrations
	// in the whole cloud at once (per server replica).
	MaxConcurrentLiveMigrationsTotal int
	// RebalanceInterval is rebalance_interval (0, off): how often the
	// periodic rebalance runs the rebalance planner and applies its plan;
	// RebalanceThreshold (0.10) and RebalanceMaxMoves (0, no cap) are its
	// threshold and move cap (as keel rebalance plan's flags).
	RebalanceInterval  time.Duration
	RebalanceThreshold float64
	RebalanceMaxMoves  int
	// RebalanceBy is rebalance_by: what the periodic rebalance balances —
	// "claims" (RAM claimed in placement, the default) or "measured" (the
	// hosts' measured CPU and guests' memory, as keel rebalance plan --by
	// measured).
	RebalanceBy string
	// The fake host's size: vcpus (32), memory_mb (131072), disk_gb (2000).
	VCPUs    int
	MemoryMB int
	DiskGB   int
	// Policy is policy: what the weighers read (claim, the default;
	// dest-update; legacy).
	Policy scheduler.Policy
	// InternalURL and AdminURL are internal_url and admin_url: the base
	// URLs the catalog lists as keel's internal and admin endpoints
	// (empty: the public one). CatalogServices is catalog_services: other
	// services the catalog lists, as TYPE:NAME=URL (see CatalogOptions).
	InternalURL     string
	AdminURL        string
	CatalogServices []string
}

// MetricsGroup is the [metrics] group: Nova's MetricsWeigher options and
// keel's measured-usage reports.
type MetricsGroup struct {
	// ReportInterval is report_interval (10 s; 0 turns the reports off),
	// SampleInterval sample_interval (2 s) and ReportThreshold
	// report_threshold (0.10): an agent reports every ReportInterval, and
	// at once when a sample finds cpu.percent moved by more than
	// ReportThreshold.
	ReportInterval  time.Duration
	SampleInterval  time.Duration
	ReportThreshold float64
	// WeightSetting is weight_setting, name=ratio items.
	WeightSetting []string
	// Required is required (true); WeightOfUnavailable
	// weight_of_unavailable (-10000.0); MaxAge max_age (60 s, 0: no
	// bound).
	Required            bool
	WeightOfUnavailable float64
	MaxAge              time.Duration
}

// MetricsConfig is the agent's reporting cadence.
func (m MetricsGroup) MetricsConfig() compute.MetricsConfig {
	c := compute.MetricsConfig{Interval: m.ReportInterval, Sample: m.SampleInterval, Threshold: m.ReportThreshold}
	if m.ReportInterval <= 0 {
		c.Interval = -1
	}
	return c
}

// APIGroup is the [api] group's options keel reads.
type APIGroup struct {
	// TokenTTL is token_ttl (3600 s); [identity] token_ttl is another name
	// for it.
	TokenTTL time.Duration
}

// NotificationsGroup is nova.conf's [oslo_messaging_notifications]
// driver and transport_url and [notifications] notification_format and
// versioned_notifications_topics.
type NotificationsGroup struct {
	// Driver is driver: messagingv2 sends Nova's versioned notifications
	// to RabbitMQ; noop or empty (the default, as Nova's) sends none
	// there (keel's own bus always carries them).
	Driver string
	// TransportURL is [oslo_messaging_notifications] transport_url
	// (rabbit://user:password@host:5672/); empty means [DEFAULT]
	// transport_url.
	TransportURL string
	// Format is notification_format: versioned (keel's default; Nova's is
	// unversioned, which keel does not send) or both; unversioned sends
	// nothing to RabbitMQ.
	Format string
	// Topics is versioned_notifications_topics (versioned_notifications).
	Topics []string
}

// RabbitURL is where notifications go: [oslo_messaging_notifications]
// transport_url, else [DEFAULT]'s; empty when the driver or format sends
// none to RabbitMQ.
func (c Config) RabbitURL() string {
	n := c.Notifications
	if n.Driver != "messagingv2" || n.Format == "unversioned" {
		return ""
	}
	if n.TransportURL != "" {
		return n.TransportURL
	}
	return c.Default.TransportURL
}

// Default returns the defaults: Nova's for Nova's options.
func Default() Config {
	s := scheduler.DefaultConfig()
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return Config{
		Default: DefaultGroup{
			Host:                        host,
			ReservedHostMemoryMB:        512,
			CPUAllocationRatio:          defaultCPUAllocationRatio,
			RAMAllocationRatio:          defaultRAMAllocationRatio,
			DiskAllocationRatio:         defaultDiskAllocationRatio,
			MaxConcurrentLiveMigrations: 1,
			ServiceDownTime:             s.ServiceDownTime,
			ReportInterval:              10 * time.Second,
			InstanceBuildTimeout:        900 * time.Second,
		},
		FilterScheduler: FilterSchedulerGroup{
			HostSubsetSize:              s.HostSubsetSize,
			EnabledFilters:              s.EnabledFilters,
			WeightClasses:               s.Weighers,
			ShuffleBestSameWeighedHosts: s.ShuffleBestSameWeighedHosts,
			Options:                     s.Options,
		},
		Scheduler: SchedulerGroup{MaxAttempts: s.MaxAttempts},
		Libvirt: LibvirtGroup{
			LiveMigrationDowntime:          500 * time.Millisecond,
			LiveMigrationCompletionTimeout: 800 * time.Second,
			LiveMigrationTimeoutAction:     "abort",
			ConnectionURI:                  "qemu:///system",
			VirtType:                       "qemu",
			LiveMigrationScheme:            "tcp",
		},
		Keel: KeelGroup{
			Listen:                "127.0.0.1:8080",
			DataDir:               "./.keel",
			NATSListen:            "127.0.0.1:0",
			RPCTimeout:            30 * time.Second,
			MigrationStallTimeout: 300 * time.Second,
			LostGuestTimeout:      300 * time.Second,
			RebalanceThreshold:    0.10,
			RebalanceBy:           "claims",
			Driver:                "fake",
			QEMUBinary:            "qemu-system-x86_64",
			FakeWorkload:          "constant cpu=25%",
			VCPUs:                 32,
			MemoryMB:              131072,
			DiskGB:                2000,
			ImageSizeCap:          1 << 40,
			Policy:                scheduler.PolicyClaim,
			CatalogServices:       []string{},
		},
		API:           APIGroup{TokenTTL: 3600 * time.Second},
		Notifications: NotificationsGroup{Format: "versioned", Topics: []string{"versioned_notifications"}},
		Metrics: MetricsGroup{ReportInterval: 10 * time.Second, SampleInterval: 2 * time.Second, ReportThreshold: 0.10,
			WeightSetting: []string{}, Required: s.Metrics.Required, WeightOfUnavailable: s.Metrics.WeightOfUnavailable,
			MaxAge: s.Metrics.MaxAge},
	}
}

const (
	defaultCPUAllocationRatio  = 4.0
	defaultRAMAllocationRatio  = 1.0
	defaultDiskAllocationRatio = 1.0
	defaultUpdateResources     = 60 * time.Second
)

// CatalogOptions is what [keel] internal_url, admin_url and
// catalog_services add to the token catalog.
func (k KeelGroup) CatalogOptions() identity.CatalogOptions {
	opt := identity.CatalogOptions{InternalURL: k.InternalURL, AdminURL: k.AdminURL}
	for _, raw := range k.CatalogServices {
		// Set checked each one.
		if s, err := identity.ParseService(raw); err == nil {
			opt.Services = append(opt.Services, s)
		}
	}
	return opt
}

// UpdateResourcesPeriod is the resource tracker's audit period that
// update_resources_interval asks for: 60 s for 0, and 0 — no audit — for a
// negative value.
func (d DefaultGroup) UpdateResourcesPeriod() time.Duration {
	switch {
	case d.UpdateResourcesInterval < 0:
		return 0
	case d.UpdateResourcesInterval == 0:
		return defaultUpdateResources
	}
	return time.Duration(d.UpdateResourcesInterval) * time.Second
}

// SchedulerConfig returns the scheduler's options: [filter_scheduler],
// [scheduler] max_attempts and [DEFAULT] service_down_time.
func (c Config) SchedulerConfig() scheduler.Config {
	f := c.FilterScheduler
	// Set checked every item.
	ws, _ := scheduler.ParseWeightSetting(c.Metrics.WeightSetting)
	return scheduler.Config{
		EnabledFilters:              slices.Clone(f.EnabledFilters),
		Weighers:                    slices.Clone(f.WeightClasses),
		HostSubsetSize:              f.HostSubsetSize,
		ShuffleBestSameWeighedHosts: f.ShuffleBestSameWeighedHosts,
		MaxAttempts:                 c.Scheduler.MaxAttempts,
		Options:                     maps.Clone(f.Options),
		ServiceDownTime:             c.Default.ServiceDownTime,
		Metrics: scheduler.MetricsConfig{WeightSetting: ws, Required: c.Metrics.Required,
			WeightOfUnavailable: c.Metrics.WeightOfUnavailable, MaxAge: c.Metrics.MaxAge},
	}
}

// HostConfig returns the fake host's configuration: its size from [keel],
// allocation ratios and reserved memory and disk from [DEFAULT] (a ratio
// of 0.0 means the default, as in Nova), and whether the destination of a
// migration writes its record at once (every policy but legacy), and how
// long a guest may be missing before its instance is lost.
// reserved_host_cpus is not carried: compute.HostConfig has no field for it.
func (c Config) HostConfig(providerUUID string) compute.HostConfig {
	d := c.Default
	return compute.HostConfig{
		Host:                 d.Host,
		ProviderUUID:         providerUUID,
		VCPUs:                int64(c.Keel.VCPUs),
		MemoryMB:             int64(c.Keel.MemoryMB),
		LocalGB:              int64(c.Keel.DiskGB),
		CPUAllocationRatio:   orDefault(d.CPUAllocationRatio, defaultCPUAllocationRatio),
		RAMAllocationRatio:   orDefault(d.RAMAllocationRatio, defaultRAMAllocationRatio),
		DiskAllocationRatio:  orDefault(d.DiskAllocationRatio, defaultDiskAllocationRatio),
		ReservedHostMemoryMB: int64(d.ReservedHostMemoryMB),
		ReservedHostDiskMB:   int64(d.ReservedHostDiskMB),
		WriteDestRecord:      c.Keel.Policy != scheduler.PolicyLegacy,
		LostGuestTimeout:     c.Keel.LostGuestTimeout,
	}
}

func orDefault(ratio, def float64) float64 {
	if ratio == 0 {
		return def
	}
	return ratio
}

// Origin says where a value came from: a file line, Set, or neither (the
// default).
type Origin struct {
	File string
	Line int
	// Flag: the value was given to Set.
	Flag bool
}

// IsDefault reports whether the value is the default.
func (o Origin) IsDefault() bool { return o == Origin{} }

func (o Origin) String() string {
	switch {
	case o.Flag:
		return "command line"
	case o.File != "":
		return o.File + ":" + itoa(o.Line)
	}
	return "default"
}

// Origin returns where an option's value came from. Group and option are
// spelled as in the file; another name for an option (such as [DEFAULT]
// state_path) gives the same answer as its own.
func (c Config) Origin(group, option string) Origin {
	o := lookup(normGroup(group), option)
	if o == nil {
		return Origin{}
	}
	return c.origins[o.key()]
}
