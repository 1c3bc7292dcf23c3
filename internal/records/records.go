// Package records holds the compute records keel's store keeps besides
// placement's: host records (Nova's compute_nodes rows), services,
// instances, flavors and migration records. They are plain data; the
// packages that own their behaviour (compute, migration, conductor) act on
// them. Every state is a named string type with its constants (VMState,
// TaskState, MigrationStatus, MigrationPhase, BuildPhase, ActionPhase,
// PlanState, MoveState), so a state spelt wrong does not compile.
package records

import (
	"time"

	"keel/internal/placement"
)

// HostRecord is a host's resource record, as Nova's compute_nodes row: what
// the host's resource tracker last wrote. The scheduler's weighers read it
// under the legacy and dest-update view policies.
type HostRecord struct {
	Host         string `json:"host"`
	ProviderUUID string `json:"provider_uuid"`

	VCPUs        int64 `json:"vcpus"`
	VCPUsUsed    int64 `json:"vcpus_used"`
	MemoryMB     int64 `json:"memory_mb"`
	MemoryMBUsed int64 `json:"memory_mb_used"` // includes reserved_host_memory_mb
	LocalGB      int64 `json:"local_gb"`
	LocalGBUsed  int64 `json:"local_gb_used"` // includes reserved_host_disk_mb
	FreeRAMMB    int64 `json:"free_ram_mb"`
	FreeDiskGB   int64 `json:"free_disk_gb"`
	RunningVMs   int64 `json:"running_vms"`
	NumIOOps     int64 `json:"num_io_ops"`
	// FailedBuilds counts the spawns that failed here since the last one
	// that succeeded (Nova's failed_builds stat, which BuildFailureWeigher
	// reads).
	FailedBuilds int64 `json:"failed_builds"`

	CPUAllocationRatio  float64 `json:"cpu_allocation_ratio"`
	RAMAllocationRatio  float64 `json:"ram_allocation_ratio"`
	DiskAllocationRatio float64 `json:"disk_allocation_ratio"`

	// Metrics are the host's measured values under Nova's
	// compute_nodes.metrics names (cpu.percent, …; see MetricNames) and
	// the host's memory under keel's (MemoryMetricNames), as
	// the agent last reported them: a name missing is unavailable, never
	// zero. InstanceUsage is each guest's measured usage in the same
	// report. Both are written by the agent's metrics reporter on its own
	// cadence (compute.MetricsConfig), never tied to the periodic audit.
	Metrics       []Metric        `json:"metrics,omitempty"`
	InstanceUsage []InstanceUsage `json:"instance_usage,omitempty"`

	UpdatedAt time.Time `json:"updated_at"`
}

// Metric is one measured value of a host, as Nova's MonitorMetric holds
// it: the *.percent values are fractions (0.25 is 25 %), as Nova's
// cpu.virt_driver monitor reports them, cpu.frequency is in MHz and
// keel.memory.* in MiB.
type Metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Timestamp is when it was measured (not when it was stored).
	Timestamp time.Time `json:"timestamp"`
	// Source is what measured it: the driver (fake.Driver,
	// qemu.Driver), or "keel.claim" for a value the scheduler adjusted
	// by a claim it made since.
	Source string `json:"source"`
}

// The host metrics' names: Nova's compute_nodes.metrics names.
const (
	MetricCPUPercent       = "cpu.percent"
	MetricCPUUserPercent   = "cpu.user.percent"
	MetricCPUKernelPercent = "cpu.kernel.percent"
	MetricCPUIdlePercent   = "cpu.idle.percent"
	MetricCPUIOWaitPercent = "cpu.iowait.percent"
	MetricCPUFrequency     = "cpu.frequency"
)

// MetricNames lists the host CPU metrics keel's drivers report under
// Nova's names, in the order they are stored.
var MetricNames = []string{MetricCPUFrequency, MetricCPUUserPercent, MetricCPUKernelPercent,
	MetricCPUIdlePercent, MetricCPUIOWaitPercent, MetricCPUPercent}

// keel's own host metrics: the host's memory as its kernel reports it
// (/proc/meminfo's MemTotal and MemAvailable, or libvirtd's
// virNodeGetMemoryStats), in MiB. Nova's compute_nodes.metrics has no
// memory names (its MonitorMetricType lists cpu.* and numa.membw.*
// only), hence the keel. prefix; they are stored beside the cpu.*
// metrics, after them, and weighed like them when weight_setting names
// them.
const (
	MetricMemoryTotal     = "keel.memory.total"
	MetricMemoryAvailable = "keel.memory.available"
)

// MemoryMetricNames lists keel's host memory metrics, in the order they
// are stored (after MetricNames).
var MemoryMetricNames = []string{MetricMemoryTotal, MetricMemoryAvailable}

// InstanceUsage is one guest's measured usage.
type InstanceUsage struct {
	UUID string `json:"uuid"`
	// VCPUsBusy is the CPU the guest used, in physical CPUs busy (1.5:
	// one and a half CPUs' worth of time per second).
	VCPUsBusy float64 `json:"vcpus_busy"`
	// MemoryMB is the guest's resident memory.
	MemoryMB  int64     `json:"memory_mb"`
	Timestamp time.Time `json:"timestamp"`
}

// Metric returns the named metric, if the host reported it.
func (h HostRecord) Metric(name string) (Metric, bool) {
	for _, m := range h.Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// Used returns the record's usage as placement resources, reserved amounts
// excluded, so it compares with allocations.
func (h HostRecord) Used(reservedMemMB, reservedDiskGB int64) placement.Resources {
	return placement.Resources{
		placement.VCPU:     h.VCPUsUsed,
		placement.MemoryMB: h.MemoryMBUsed - reservedMemMB,
		placement.DiskGB:   h.LocalGBUsed - reservedDiskGB,
	}
}

// Service is a compute agent's liveness and admin state.
type Service struct {
	Host           string    `json:"host"`
	Binary         string    `json:"binary"`
	Disabled       bool      `json:"disabled"`
	DisabledReason string    `json:"disabled_reason,omitempty"`
	ForcedDown     bool      `json:"forced_down"`
	Zone           string    `json:"zone"`
	LastSeenUp     time.Time `json:"last_seen_up"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// ServerBinary is the binary of the service records keel server replicas
// heartbeat (their Host is ServerServiceHost of the replica's name). They
// live beside the compute services but are not compute services: the
// compute API, the scheduler and the agents' metrics skip them.
const ServerBinary = "keel-server"

// ServerServiceHost is the service record key of a keel server replica:
// prefixed so it can never collide with a compute host's name.
func ServerServiceHost(name string) string { return ServerBinary + ":" + name }

// IsCompute reports whether s is a compute agent's service (not a keel
// server replica's heartbeat).
func (s Service) IsCompute() bool { return s.Binary != ServerBinary }

// Flavor is an instance size.
type Flavor struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	VCPUs      int64             `json:"vcpus"`
	RAMMB      int64             `json:"ram"`
	DiskGB     int64             `json:"disk"`
	ExtraSpecs map[string]string `json:"extra_specs,omitempty"`
	// Description is Nova's flavor description (microversion 2.55).
	Description string `json:"description,omitempty"`
	// Private is os-flavor-access:is_public false: only admins and the
	// projects in Projects see and boot it.
	Private bool `json:"private,omitempty"`
	// Projects are the projects given access to a private flavor.
	Projects []string `json:"projects,omitempty"`
}

// Resources is what an instance of this flavor claims in placement.
func (f Flavor) Resources() placement.Resources {
	r := placement.Resources{}
	if f.VCPUs > 0 {
		r[placement.VCPU] = f.VCPUs
	}
	if f.RAMMB > 0 {
		r[placement.MemoryMB] = f.RAMMB
	}
	if f.DiskGB > 0 {
		r[placement.DiskGB] = f.DiskGB
	}
	return r
}

// VMState is an instance's vm_state (Nova's names).
type VMState string

// Instance VM states (Nova's vm_state).
const (
	VMBuilding VMState = "building"
	VMActive   VMState = "active"
	VMError    VMState = "error"
	VMResized  VMState = "resized" // a resize or cold migration awaits confirm or revert
	VMDeleted  VMState = "deleted"
)

// TaskState is an instance's task_state (Nova's names; "" for none).
type TaskState string

// Instance task states used by keel (Nova's task_state).
const (
	TaskNone       TaskState = ""
	TaskMigrating  TaskState = "migrating"
	TaskScheduling TaskState = "scheduling"
	// A cold migration's or resize's task states, Nova's names.
	TaskResizePrep       TaskState = "resize_prep"
	TaskResizeReverting  TaskState = "resize_reverting"
	TaskResizeConfirming TaskState = "resize_confirming"
	TaskRebuilding       TaskState = "rebuilding" // an evacuation rebuilds it elsewhere
	TaskSpawning         TaskState = "spawning"
	TaskDeleting         TaskState = "deleting"
)

// MoveTask reports whether t is the task of a move, one a migration
// record carries (live, cold, resize or evacuation): a server that set it
// and died before recording its migration leaves it with none.
func MoveTask(t TaskState) bool {
	switch t {
	case TaskMigrating, TaskResizePrep, TaskResizeReverting, TaskResizeConfirming, TaskRebuilding:
		return true
	}
	return false
}

// Instance is a virtual machine's record.
type Instance struct {
	UUID      string `json:"uuid"`
	Name      string `json:"name"`
	ProjectID string `json:"project_id"`
	UserID    string `json:"user_id"`
	Host      string `json:"host"`
	Zone      string `json:"availability_zone"`
	Flavor    Flavor `json:"flavor"`
	// ResizeFlavor is the other flavor of a resize in progress: the new
	// one from the decision until the guest runs with it, then the old
	// one until confirm or revert (nil otherwise). Quotas count the
	// larger of the two (quota.Of), as the hosts hold both meanwhile.
	ResizeFlavor *Flavor `json:"resize_flavor,omitempty"`
	// ImageRef is the image the instance was booted from, as the client
	// named it ("" for none; the fake driver boots any image).
	ImageRef string `json:"image_ref,omitempty"`
	// Hints are the scheduler hints given at boot (nil for none).
	Hints *SchedulerHints `json:"scheduler_hints,omitempty"`
	// What the user gave at create or update and the compute API shows
	// back: metadata, description, access addresses and disk config.
	Metadata    map[string]string `json:"metadata,omitempty"`
	Description string            `json:"description,omitempty"`
	AccessIPv4  string            `json:"access_ip_v4,omitempty"`
	AccessIPv6  string            `json:"access_ip_v6,omitempty"`
	DiskConfig  string            `json:"disk_config,omitempty"`
	// Hostname is the guest's hostname (OS-EXT-SRV-ATTR:hostname): asked
	// for at create, update or rebuild (2.90), else the name sanitized at
	// create ("" for a record from before it was kept: the view derives
	// it from the name).
	Hostname string `json:"hostname,omitempty"`
	// KeyName is the key pair the server was booted with ("" for none),
	// and KeyData its public key as the guest would receive it.
	KeyName string `json:"key_name,omitempty"`
	KeyData string `json:"key_data,omitempty"`
	// ReservationID is shared by the servers of one create request;
	// LaunchIndex is each one's place in it.
	ReservationID string `json:"reservation_id,omitempty"`
	LaunchIndex   int    `json:"launch_index,omitempty"`
	// Tags are the server's tags (compute API 2.26), in the order added.
	Tags []string `json:"tags,omitempty"`
	// TrustedCerts are the ids of the certificates the server's image
	// must be signed with (trusted_image_certificates, 2.63), kept and
	// shown as Nova does with [glance] verify_glance_signatures off, its
	// default: keel verifies no image signature (it has no key manager).
	TrustedCerts []string  `json:"trusted_certs,omitempty"`
	VMState      VMState   `json:"vm_state"`
	TaskState    TaskState `json:"task_state"`
	Fault        string    `json:"fault,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// Version increments on every update; an update naming a stale version
	// fails with a conflict (optimistic concurrency between servers).
	Version int64 `json:"version"`

	// The boot's own record (package boot), while the instance builds:
	// BuildPhase is the step in flight ("" once the boot ended);
	// BuildAttempts counts the hosts claimed; RequestedZone and ForcedHost
	// are what the request asked, kept so a resumed boot asks the same;
	// Owner is the keel server replica driving the boot.
	BuildPhase    BuildPhase `json:"build_phase,omitempty"`
	BuildAttempts int        `json:"build_attempts,omitempty"`
	RequestedZone string     `json:"requested_zone,omitempty"`
	ForcedHost    string     `json:"forced_host,omitempty"`
	// RequestedHost is the one host the next boot of a shelved-offloaded
	// instance considers, still through the filters (Nova's
	// requested_destination; an admin's unshelve with a host, 2.91).
	// Every unshelve sets it, to "" when it names no host.
	RequestedHost string `json:"requested_host,omitempty"`
	Owner         string `json:"owner,omitempty"`

	// Lifecycle is the lock and the lifecycle action in flight (package
	// lifecycle).
	Lifecycle
}

// MigrationStatus is a migration's status (Nova's names).
type MigrationStatus string

// MigrationPhase is a migration state machine's own step inside a status
// (package migration names them).
type MigrationPhase string

// BuildPhase is a boot's step in flight (package boot names them; "" once
// the boot ended).
type BuildPhase string

// Migration statuses, Nova's names.
const (
	MigrationAccepted  MigrationStatus = "accepted"
	MigrationQueued    MigrationStatus = "queued"
	MigrationPreparing MigrationStatus = "preparing"
	MigrationRunning   MigrationStatus = "running"
	MigrationCompleted MigrationStatus = "completed"
	MigrationError     MigrationStatus = "error"
	MigrationFailed    MigrationStatus = "failed"
	MigrationCancelled MigrationStatus = "cancelled"

	// A cold migration's or resize's statuses, Nova's names.
	MigrationPreMigrating  MigrationStatus = "pre-migrating"
	MigrationMigrating     MigrationStatus = "migrating"
	MigrationPostMigrating MigrationStatus = "post-migrating"
	MigrationFinished      MigrationStatus = "finished" // the server is VERIFY_RESIZE
	MigrationConfirming    MigrationStatus = "confirming"
	MigrationConfirmed     MigrationStatus = "confirmed"
	MigrationReverting     MigrationStatus = "reverting"
	MigrationReverted      MigrationStatus = "reverted"
	// MigrationDone is an evacuation's status once the instance runs on
	// its destination while its source is still down (Nova's "done").
	MigrationDone MigrationStatus = "done"
)

// MigrationStatuses are every status a migration can have, live ones
// first, in the order a migration passes them.
var MigrationStatuses = []MigrationStatus{
	MigrationAccepted, MigrationQueued, MigrationPreparing, MigrationRunning, MigrationCompleted,
	MigrationError, MigrationFailed, MigrationCancelled,
	MigrationPreMigrating, MigrationMigrating, MigrationPostMigrating, MigrationFinished,
	MigrationConfirming, MigrationConfirmed, MigrationReverting, MigrationReverted, MigrationDone,
}

// Migration types (records.Migration.Type), Nova's names.
const (
	MigrationTypeLive   = "live-migration"
	MigrationTypeCold   = "migration"
	MigrationTypeResize = "resize"
	MigrationTypeEvac   = "evacuation"
)

// MigrationTerminal reports whether a status ends a migration.
func MigrationTerminal(status MigrationStatus) bool {
	switch status {
	case MigrationCompleted, MigrationError, MigrationFailed, MigrationCancelled, MigrationConfirmed, MigrationReverted:
		return true
	}
	return false
}

// MigrationInProgress reports whether a migration in status still
// involves its hosts as Nova reckons when it refuses to delete a compute
// service (migration_get_in_progress_by_host_and_node): not terminal and
// not an evacuation's done; finished (VERIFY_RESIZE) is in progress.
func MigrationInProgress(status MigrationStatus) bool {
	return !MigrationTerminal(status) && status != MigrationDone
}

// Migration is a live migration's record: the source of truth for a move in
// flight, so recovery after a restart can finish or roll it back.
type Migration struct {
	ID            int64           `json:"id"`
	UUID          string          `json:"uuid"` // also the migration consumer's UUID
	InstanceUUID  string          `json:"instance_uuid"`
	Type          string          `json:"migration_type"`
	SourceHost    string          `json:"source_compute"`
	DestHost      string          `json:"dest_compute"`
	RequestedHost string          `json:"requested_host,omitempty"`
	Status        MigrationStatus `json:"status"`
	// Phase is the state machine's own step inside a status (see package
	// migration); it is what recovery resumes from.
	Phase MigrationPhase `json:"phase"`
	// TriedHosts are destinations already claimed and given up on.
	TriedHosts []string `json:"tried_hosts,omitempty"`
	// Interrupted: the migration ended because keel itself restarted —
	// the server's recovery rolled it back before its copy, or the
	// source agent's restart cut its copy short — not for anything its
	// destination did: a plan tries its move again without counting the
	// attempt or avoiding that destination.
	Interrupted bool   `json:"interrupted,omitempty"`
	Attempts    int    `json:"attempts"`
	Error       string `json:"error,omitempty"`
	// Outcome is the terminal status a rollback in progress will end in
	// (failed, cancelled or error).
	Outcome MigrationStatus `json:"outcome,omitempty"`
	// AbortRequested is set by an abort that arrives while a step is in
	// flight; the machine honours it at the next step.
	AbortRequested bool `json:"abort_requested,omitempty"`
	// ForceComplete is set by a force complete of the copy (it is done by
	// the source's driver; the record says it was asked).
	ForceComplete bool `json:"force_complete,omitempty"`
	// OldFlavor and NewFlavor are a cold migration's or resize's flavors
	// (the same for a cold migration): the source side holds the old one,
	// the destination the new one, until confirm or revert.
	OldFlavor *Flavor `json:"old_flavor,omitempty"`
	NewFlavor *Flavor `json:"new_flavor,omitempty"`
	// OldVMState is the vm_state a cold migration or resize started from
	// (Nova's old_vm_state): a stopped server's guest is not started on
	// the destination, stays stopped through confirm, and a revert brings
	// it back stopped. Empty means active.
	OldVMState VMState `json:"old_vm_state,omitempty"`
	// Owner is the keel server replica that drives the migration: the one
	// that created it or took it over (see conductor.Config.Owner). Empty
	// for a migration no replica claims (a single server without
	// ownership, or one written before owners existed).
	Owner string `json:"owner,omitempty"`
	// PlanMove names the plan move this migration was started for (nil
	// for a migration an operator asked for): a restarted executor finds
	// a move's migration by it, so a move is never started twice.
	PlanMove *MoveRef `json:"plan_move,omitempty"`
	// AvoidHosts are never chosen as the destination (a drain's draining
	// hosts, destinations at their incoming cap).
	AvoidHosts []string `json:"avoid_hosts,omitempty"`

	MemoryTotalBytes     int64     `json:"memory_total_bytes"`
	MemoryProcessedBytes int64     `json:"memory_processed_bytes"`
	MemoryRemainingBytes int64     `json:"memory_remaining_bytes"`
	CreatedAt            time.Time `json:"created_at"`
	UpdatedAt            time.Time `json:"updated_at"`
	Version              int64     `json:"version"`
}

// Aggregate is a compute host aggregate (Nova's os-aggregates): a named set
// of hosts with metadata. Its "availability_zone" metadata puts its hosts
// in that zone; its other metadata feeds AggregateInstanceExtraSpecsFilter.
type Aggregate struct {
	ID        int64             `json:"id"`
	UUID      string            `json:"uuid"`
	Name      string            `json:"name"`
	Hosts     []string          `json:"hosts"`
	Metadata  map[string]string `json:"metadata"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// AggregateZoneKey is the metadata key naming an aggregate's availability
// zone.
const AggregateZoneKey = "availability_zone"

// Zone returns the aggregate's availability zone ("" for none).
func (a Aggregate) Zone() string { return a.Metadata[AggregateZoneKey] }

// Server group policies (Nova's names).
const (
	PolicyAffinity         = "affinity"
	PolicyAntiAffinity     = "anti-affinity"
	PolicySoftAffinity     = "soft-affinity"
	PolicySoftAntiAffinity = "soft-anti-affinity"
)

// ServerGroup is a server group (Nova's os-server-groups): instances the
// scheduler places together or apart according to Policy.
type ServerGroup struct {
	UUID      string `json:"uuid"`
	Name      string `json:"name"`
	ProjectID string `json:"project_id"`
	UserID    string `json:"user_id"`
	Policy    string `json:"policy"`
	// MaxServerPerHost is the anti-affinity rule max_server_per_host (0:
	// not set, which means 1).
	MaxServerPerHost int `json:"max_server_per_host,omitempty"`
	// Members are the instances in the group, in the order they joined.
	Members   []string  `json:"members"`
	CreatedAt time.Time `json:"created_at"`
	// Placements counts the members placed so far: each boot's late check
	// bumps it with a versioned update, which orders the placements of one
	// group across keel server replicas (see conductor.confirmGroup).
	Placements int64 `json:"placements,omitempty"`
}

// SchedulerHints are the scheduler hints an instance was booted with
// (os:scheduler_hints); they apply to every later scheduling of it too.
type SchedulerHints struct {
	// Group is the server group's UUID.
	Group string `json:"group,omitempty"`
	// SameHost and DifferentHost name instances (UUIDs).
	SameHost      []string `json:"same_host,omitempty"`
	DifferentHost []string `json:"different_host,omitempty"`
}

// InstanceAction is one user request on an instance (create, delete,
// live-migration, …) as the compute API's os-instance-actions shows it:
// who asked, when, and the request id. Actions outlive their instance.
type InstanceAction struct {
	InstanceUUID string    `json:"instance_uuid"`
	RequestID    string    `json:"request_id"`
	Action       string    `json:"action"`
	UserID       string    `json:"user_id"`
	ProjectID    string    `json:"project_id"`
	StartTime    time.Time `json:"start_time"`
	// MigrationID links a live-migration action to its migration, whose
	// status gives the action's outcome.
	MigrationID int64 `json:"migration_id,omitempty"`
	// Message is the failure reason of an action refused or failed at once.
	Message string `json:"message,omitempty"`
}
