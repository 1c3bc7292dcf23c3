package scenario

import (
	"os"
	"strings"
	"testing"
)

// badInputs are malformed and extreme scenario files, each with the exact
// message it is refused with: the file, the line, the field and the
// reason. base() is "duration = 3600" (line 1), a flavor (lines 2–6) and
// a host group (lines 7–12); extra lines start at 13.
var badInputs = []struct {
	name string
	data []byte
	want string
}{
	// Syntax, keys and types.
	{"syntax", lines(`duration = 3600`, `seed = `), `bad.toml:2: invalid TOML: expected value but found '\n' instead`},
	{"unknown key", lines(`duration = 3600`, `durration = 5`), `bad.toml:2: durration: unknown key (did you mean "duration"?)`},
	{"string for a number", lines(`duration = "1h"`), `bad.toml:1: duration: want a number, got the string "1h"`},
	{"float for an integer", file(`[compute]`, `max_concurrent_live_migrations = 4.0`), `bad.toml:14: compute.max_concurrent_live_migrations: want an integer, got the number 4.0`},
	{"fraction for an integer", file(`[compute]`, `update_resources_interval = 1.5`), `bad.toml:14: compute.update_resources_interval: want an integer, got the number 1.5`},
	{"inf", lines(`duration = inf`), `bad.toml:1: duration: want a finite number, got +Inf`},
	{"huge integer for a float", lines(`duration = 9007199254740993`), `bad.toml:1: duration: 9007199254740993 is too large`},
	{"table for an array of tables", file(`[drain]`, `hosts = ["h01"]`), `bad.toml:13: drain: want an array of tables ([[drain]] sections), got a table`},
	{"date for a number", lines(`duration = 1979-05-27`), `bad.toml:1: duration: want a number, got a date-time`},

	// Top level.
	{"duration missing", lines(`seed = 1`), `bad.toml: duration: missing: the run's length in seconds is required`},
	{"duration zero", lines(`duration = 0`), `bad.toml:1: duration: must be > 0 seconds, got 0`},
	{"duration over a year", lines(`duration = 1e12`), `bad.toml:1: duration: 1e+12 s is more than the simulator runs (31536000 s, a year)`},
	{"policy twice", lines(`duration = 1`, `policies = ["legacy", "legacy"]`), `bad.toml:2: policies[1]: policy "legacy" is listed twice`},
	{"unknown policy", lines(`duration = 1`, `policies = ["fast"]`), `bad.toml:2: policies[0]: unknown policy "fast" (known: legacy, dest-update, claim)`},

	// Scheduler.
	{"service_down_time negative", file(`[scheduler]`, `service_down_time = -1`), `bad.toml:14: scheduler.service_down_time: must be >= 0 seconds (0 disables the liveness check), got -1`},
	{"service_down_time past a year", file(`[scheduler]`, `service_down_time = 1e12`), `bad.toml:14: scheduler.service_down_time: 1e+12 s is more than the simulator runs (31536000 s, a year)`},
	{"host_subset_size huge", file(`[scheduler]`, `host_subset_size = 4611686018427387904`), `bad.toml:14: scheduler.host_subset_size: must be between 0 and 100000 (0 means 1), got 4611686018427387904`},
	{"max_attempts huge", file(`[scheduler]`, `max_attempts = 4611686018427387904`), `bad.toml:14: scheduler.max_attempts: must be between 0 and 1000 (0 means 3), got 4611686018427387904`},
	{"unknown filter", file(`[scheduler]`, `enabled_filters = ["RamFilter"]`), `bad.toml:14: scheduler.enabled_filters[0]: unknown filter "RamFilter" (known: ComputeFilter, AvailabilityZoneFilter, ComputeCapabilitiesFilter, ImagePropertiesFilter, ServerGroupAntiAffinityFilter, ServerGroupAffinityFilter, SameHostFilter, DifferentHostFilter, AggregateInstanceExtraSpecsFilter, NumInstancesFilter, IoOpsFilter, MetricFilter, ResourceFilter)`},
	{"limit below its minimum", file(`[scheduler]`, `max_instances_per_host = 0`), `bad.toml:14: scheduler.max_instances_per_host: must be >= 1, got 0`},

	// Compute.
	{"report_interval zero", file(`[compute]`, `report_interval = 0`), `bad.toml:14: compute.report_interval: must be >= 1 s, got 0`},
	{"report_interval past a year", file(`[compute]`, `report_interval = 1e12`), `bad.toml:14: compute.report_interval: 1e+12 s is more than the simulator runs (31536000 s, a year)`},
	{"update_resources_interval past a year", file(`[compute]`, `update_resources_interval = 1000000000000`), `bad.toml:14: compute.update_resources_interval: 1000000000000 s is more than the simulator runs (31536000 s, a year)`},
	{"spawn_seconds past a year", file(`[compute]`, `spawn_seconds = 1e12`), `bad.toml:14: compute.spawn_seconds: 1e+12 s is more than the simulator runs (31536000 s, a year)`},
	{"spawn_seconds negative", file(`[compute]`, `spawn_seconds = -1`), `bad.toml:14: compute.spawn_seconds: must be >= 0 seconds, got -1`},
	{"bandwidth too slow for a flavor", file(`[compute]`, `migration_bandwidth_mib_s = 1e-12`), `bad.toml:14: compute.migration_bandwidth_mib_s: at 1e-12 MiB/s a live migration of flavor "m1.small" (2048 MiB) takes 2.05e+15 s, more than the simulator runs (31536000 s, a year)`},
	{"bandwidth negative", file(`[compute]`, `migration_bandwidth_mib_s = -1`), `bad.toml:14: compute.migration_bandwidth_mib_s: must be > 0 MiB/s (0 means 1024), got -1`},
	{"concurrent migrations huge", file(`[compute]`, `max_concurrent_live_migrations = 4611686018427387904`), `bad.toml:14: compute.max_concurrent_live_migrations: must be between 0 and 10000 (0 means 1), got 4611686018427387904`},
	{"reserved disk huge", file(`[compute]`, `reserved_host_disk_mb = 9223372036854775807`), `bad.toml:12: hosts[0].disk_gb: 2000 GiB leaves nothing after compute.reserved_host_disk_mb = 9223372036854775807`},

	// Flavors.
	{"flavor vcpus missing", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `ram = 1`), `bad.toml:2: flavor[0].vcpus: missing: a size in VCPU (> 0) is required`},
	{"flavor ram missing", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 1`), `bad.toml:2: flavor[0].ram: missing: a size in MiB (> 0) is required`},
	{"flavor vcpus 2^62", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 4611686018427387904`, `ram = 1`), `bad.toml:4: flavor[0].vcpus: 4611686018427387904 VCPU is more than the simulator allows (2147483647, Placement's largest total)`},
	{"flavor ram 2^62", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 1`, `ram = 4611686018427387904`), `bad.toml:5: flavor[0].ram: 4611686018427387904 MiB is more than the simulator allows (2147483647, Placement's largest total)`},
	{"flavor disk negative", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 1`, `ram = 1`, `disk = -1`), `bad.toml:6: flavor[0].disk: must be >= 0 GiB, got -1`},

	// Hosts.
	{"host vcpus missing", lines(`duration = 1`, `[[hosts]]`, `prefix = "h"`, `count = 1`, `memory_mb = 1024`, `disk_gb = 1`), `bad.toml:2: hosts[0].vcpus: missing: a size in VCPU (> 0) is required`},
	{"host memory 2^62", lines(`duration = 1`, `[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 1`, `memory_mb = 4611686018427387904`, `disk_gb = 1`), `bad.toml:6: hosts[0].memory_mb: 4611686018427387904 MiB is more than the simulator allows (2147483647, Placement's largest total)`},
	{"ratio huge", file(`cpu_allocation_ratio = 1e300`), `bad.toml:13: hosts[0].cpu_allocation_ratio: must be > 0 and at most 1e+06, got 1e+300`},
	{"first huge", file(`first = 9223372036854775807`), `bad.toml:13: hosts[0].first: must be between 1 and 1000000000000, got 9223372036854775807`},
	{"count over the limit", lines(`duration = 1`, `[[hosts]]`, `prefix = "h"`, `count = 4611686018427387904`), `bad.toml:4: hosts[0].count: too many hosts: the scenario may have at most 100000`},
	{"instances 2^62 wrap to 0", file(`instances = { "m1.small" = 4611686018427387904 }`), `bad.toml:13: hosts[0].instances."m1.small": too many instances: a host may start with at most 2000000`},
	{"too many instances over the hosts", lines(`duration = 1`, `[[flavor]]`, `name = "t"`, `vcpus = 1`, `ram = 1`,
		`[[hosts]]`, `prefix = "h"`, `count = 1000`, `vcpus = 100000`, `memory_mb = 1000000`, `disk_gb = 1`, `instances = { "t" = 20000 }`),
		`bad.toml:12: hosts[0].instances: too many instances: 1000 hosts of 20000 each, and the scenario may start with at most 2000000`},
	{"flavor above max_unit VCPU", lines(`duration = 1`, `[[flavor]]`, `name = "big"`, `vcpus = 40`, `ram = 1024`,
		`[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 32`, `memory_mb = 131072`, `disk_gb = 100`, `instances = { "big" = 1 }`),
		`bad.toml:12: hosts[0].instances.big: flavor "big" needs 40 VCPU but a host has 32 (one allocation may not exceed the host's total, Placement's max_unit)`},
	{"flavor above max_unit RAM", lines(`duration = 1`, `[[flavor]]`, `name = "big"`, `vcpus = 1`, `ram = 4096`,
		`[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 32`, `memory_mb = 2048`, `disk_gb = 100`, `ram_allocation_ratio = 4.0`, `instances = { "big" = 1 }`),
		`bad.toml:13: hosts[0].instances.big: flavor "big" needs 4096 MiB of RAM but a host has 2048 (one allocation may not exceed the host's total, Placement's max_unit)`},
	{"flavor above max_unit disk", lines(`duration = 1`, `[[flavor]]`, `name = "big"`, `vcpus = 1`, `ram = 1`, `disk = 200`,
		`[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 32`, `memory_mb = 2048`, `disk_gb = 100`, `disk_allocation_ratio = 4.0`, `instances = { "big" = 1 }`),
		`bad.toml:14: hosts[0].instances.big: flavor "big" needs 200 GiB of disk but a host has 100 (one allocation may not exceed the host's total, Placement's max_unit)`},
	{"instances above VCPU capacity", file(`cpu_allocation_ratio = 1.0`, `instances = { "m1.small" = 33 }`), `bad.toml:14: hosts[0].instances: initial instances need 33 VCPU per host but a host offers 32 ((32 - 0 reserved) x 1)`},
	{"instances above RAM capacity", file(`instances = { "m1.small" = 64 }`), `bad.toml:13: hosts[0].instances: initial instances need 131072 MiB of RAM per host but a host offers 130560 ((131072 - 512 reserved) x 1)`},
	{"instances above disk capacity", file(`disk_allocation_ratio = 0.5`, `instances = { "m1.small" = 51 }`), `bad.toml:14: hosts[0].instances: initial instances need 1020 GiB of disk per host but a host offers 1000 ((2000 - 0 reserved) x 0.5)`},

	// Provider trees, sharing providers, extra specs.
	{"child without resources", file(`[[hosts.child]]`, `name = "gpu0"`), `bad.toml:13: hosts[0].child[0].resources: missing: at least one resource class with its total, e.g. { VGPU = 4 }`},
	{"child unknown class", file(`[[hosts.child]]`, `name = "gpu0"`, `resources = { GPUS = 1 }`), `bad.toml:15: hosts[0].child[0].resources.GPUS: unknown resource class "GPUS" (a standard one, or CUSTOM_ and capitals, digits, '_')`},
	{"child bad name", file(`[[hosts.child]]`, `name = "gpu 0"`, `resources = { VGPU = 1 }`), `bad.toml:14: hosts[0].child[0].name: must be 1 to 64 letters, digits, '_' or '-' (the provider is named HOST_NAME), got "gpu 0"`},
	{"child twice", file(`[[hosts.child]]`, `name = "g"`, `resources = { VGPU = 1 }`, `[[hosts.child]]`, `name = "g"`, `resources = { VGPU = 1 }`), `bad.toml:17: hosts[0].child[1].name: child "g" is defined twice in this group`},
	{"child bad trait", file(`[[hosts.child]]`, `name = "g"`, `resources = { VGPU = 1 }`, `traits = ["gpu"]`), `bad.toml:16: hosts[0].child[0].traits[0]: unknown trait "gpu" (a standard one, or CUSTOM_ and capitals, digits, '_')`},
	{"shared unknown group", file(`[[shared]]`, `name = "pool"`, `resources = { DISK_GB = 100 }`, `groups = ["x"]`), `bad.toml:16: shared[0].groups[0]: no [[hosts]] group has prefix "x"`},
	{"shared without groups", file(`[[shared]]`, `name = "pool"`, `resources = { DISK_GB = 100 }`), `bad.toml:13: shared[0].groups: missing: the prefixes of the [[hosts]] groups that share it`},
	{"extra specs need a group_policy", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 1`, `ram = 1`, `extra_specs = { "resources1:VGPU" = "1", "resources2:VGPU" = "1" }`,
		`[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 32`, `memory_mb = 2048`, `disk_gb = 100`), `bad.toml:6: flavor[0].extra_specs: the flavor has 2 granular resource groups but no group_policy extra spec (none or isolate)`},
	{"initial instances of a grouped flavor", lines(`duration = 1`, `[[flavor]]`, `name = "x"`, `vcpus = 1`, `ram = 1`, `extra_specs = { "resources1:VGPU" = "1" }`,
		`[[hosts]]`, `prefix = "h"`, `count = 1`, `vcpus = 32`, `memory_mb = 2048`, `disk_gb = 100`, `instances = { "x" = 1 }`), `bad.toml:13: hosts[0].instances.x: flavor "x" asks for request groups (resources…, trait…): initial instances are written on the host's own provider, so they take plain flavors; boot it with a workload`},

	{"shared group twice", file(`[[shared]]`, `name = "pool"`, `resources = { DISK_GB = 100 }`, `groups = ["h", "h"]`), `bad.toml:16: shared[0].groups[1]: group "h" is listed twice`},
	// Provider names and ids the run would build twice (accept6 D3).
	{"child named as a host", file(`[[hosts.child]]`, `name = "x"`, `resources = { VGPU = 1 }`, `[[hosts]]`, `name = "h01_x"`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`),
		`bad.toml:14: hosts[0].child[0].name: provider name "h01_x" (child "x" of host h01) is taken by host h01_x (hosts[1], line 16); rename one of them`},
	{"child id of a host", file(`[[hosts.child]]`, `name = "x"`, `resources = { VGPU = 1 }`, `[[hosts]]`, `name = "h01-x"`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`),
		`bad.toml:14: hosts[0].child[0].name: provider id "rp-h01-x" (child "x" of host h01) is taken by host h01-x (hosts[1], line 16); rename one of them`},
	{"children of two groups", file(`[[hosts.child]]`, `name = "a01_b"`, `resources = { VGPU = 1 }`, `[[hosts]]`, `prefix = "h01_a"`, `count = 1`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`, `[[hosts.child]]`, `name = "b"`, `resources = { VGPU = 1 }`),
		`bad.toml:23: hosts[1].child[0].name: provider name "h01_a01_b" (child "b" of host h01_a01) is taken by child "a01_b" of host h01 (hosts[0].child[0], line 13); rename one of them`},
	{"shared named as a host", file(`[[shared]]`, `name = "h02"`, `resources = { DISK_GB = 100 }`, `groups = ["h"]`),
		`bad.toml:14: shared[0].name: provider name "h02" (shared provider "h02") is taken by host h02 (hosts[0], line 7); rename one of them`},
	{"shared named as a child", file(`[[hosts.child]]`, `name = "x"`, `resources = { VGPU = 1 }`, `[[shared]]`, `name = "h03_x"`, `resources = { DISK_GB = 100 }`, `groups = ["h"]`),
		`bad.toml:17: shared[0].name: provider name "h03_x" (shared provider "h03_x") is taken by child "x" of host h03 (hosts[0].child[0], line 13); rename one of them`},
	{"shared id of a host", lines(`duration = 1`, `[[hosts]]`, `prefix = "shared-p"`, `count = 1`, `digits = 1`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`,
		`[[shared]]`, `name = "p1"`, `resources = { DISK_GB = 10 }`, `groups = ["shared-p"]`),
		`bad.toml:10: shared[0].name: provider id "rp-shared-p1" (shared provider "p1") is taken by host shared-p1 (hosts[0], line 2); rename one of them`},

	// Hosts (continued).
	{"named host collides", file(`[[hosts]]`, `name = "h02"`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`), `bad.toml:14: hosts[1].name: host name "h02" is also generated by hosts[0] (line 7)`},
	{"group reserves all RAM", file(`reserved_host_memory_mb = 200000`), `bad.toml:11: hosts[0].memory_mb: 131072 MiB leaves nothing after hosts[0].reserved_host_memory_mb = 200000`},
	{"UTF-16 byte-order mark", []byte("\xff\xfe"), `bad.toml: the file starts with a UTF-16 byte-order mark (FF FE): a scenario file is UTF-8 text; save it as UTF-8`},
	{"UTF-16 text", []byte("\xfe\xff\x00d\x00u"), `bad.toml: the file starts with a UTF-16 byte-order mark (FE FF): a scenario file is UTF-8 text; save it as UTF-8`},

	// What a run costs as a whole (accept6 D5): scenarios/README.md's "Limits".
	{"providers over the limit", lines(`duration = 1`, `[[hosts]]`, `prefix = "h"`, `count = 70000`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`,
		`[[hosts.child]]`, `name = "a"`, `resources = { VGPU = 1 }`, `[[hosts.child]]`, `name = "b"`, `resources = { VGPU = 1 }`),
		`bad.toml:8: hosts[0].child: too many providers: hosts, their children and the shared pools come to 210000 with this group, and the simulator allows 200000; fewer hosts or children`},
	{"operations over the limit", file(`[[workload]]`, `kind = "boot"`, `rate = 1000`),
		`bad.toml:15: workload[0].rate: the workloads ask for 3.6e+06 operations (rate × (end − start), summed) with this one, more than the simulator runs (1000000); lower a rate or shorten a workload`},
	{"operations summed", file(`[[workload]]`, `kind = "boot"`, `rate = 200`, `[[workload]]`, `kind = "delete"`, `rate = 100`),
		`bad.toml:18: workload[1].rate: the workloads ask for 1.08e+06 operations (rate × (end − start), summed) with this one, more than the simulator runs (1000000); lower a rate or shorten a workload`},
	{"audits over the limit", lines(`duration = 3600`, `[compute]`, `update_resources_interval = 1`, `[[hosts]]`, `prefix = "h"`, `count = 100000`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`),
		`bad.toml:3: compute.update_resources_interval: audits every 1 s for 3600 s audit each of 100000 hosts 3600 times, with up to 0 instances (initial and booted): 3.6e+08 host and instance audits, more than the simulator runs (200000000); raise update_resources_interval to at least 2 s, shorten duration, or set it below 0 (no audits)`},
	{"audits count the instances", file(`[compute]`, `update_resources_interval = 1`, `[[workload]]`, `kind = "boot"`, `rate = 270`, `end = 3600`),
		`bad.toml:14: compute.update_resources_interval: audits every 1 s for 3600 s audit each of 3 hosts 3600 times, with up to 972000 instances (initial and booted): 3.499e+09 host and instance audits, more than the simulator runs (200000000); raise update_resources_interval to at least 18 s, shorten duration, or set it below 0 (no audits)`},
	{"heartbeats over the limit", lines(`duration = 3600`, `[scheduler]`, `service_down_time = 1`, `[compute]`, `report_interval = 1`, `update_resources_interval = -1`,
		`[[hosts]]`, `prefix = "h"`, `count = 100000`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`),
		`bad.toml:3: scheduler.service_down_time: 100000 hosts' heartbeats, written every 1 s (report_interval 1 s, service_down_time 1 s) for 3600 s, are 3.6e+08 writes, more than the simulator runs (200000000); raise service_down_time to at least 2 s (heartbeats are written every whole number of report intervals it holds), shorten duration, or set service_down_time = 0 (no liveness check)`},
	{"measured-usage reports over the limit", lines(`duration = 3600`, `[metrics]`, `weight_setting = ["cpu.percent=-1.0"]`, `report_interval = 1`, `[compute]`, `update_resources_interval = -1`,
		`[[hosts]]`, `prefix = "h"`, `count = 100000`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`),
		`bad.toml:4: metrics.report_interval: the claim policy's measured-usage reports, every 1 s for 3600 s, measure each of 100000 hosts 3600 times, with up to 0 instances (initial and booted): 3.6e+08 host and instance measurements, more than the simulator runs (100000000); raise report_interval to at least 4 s, shorten duration, or leave claim out of policies`},
	{"measured-usage reports count the instances, at the default interval", file(`[metrics]`, `workload = "constant cpu=0.1"`, `[compute]`, `update_resources_interval = -1`, `[[workload]]`, `kind = "boot"`, `rate = 270`, `end = 3600`),
		`bad.toml:13: metrics.report_interval: the claim policy's measured-usage reports, every 10 s for 3600 s, measure each of 3 hosts 360 times, with up to 972000 instances (initial and booted): 3.499e+08 host and instance measurements, more than the simulator runs (100000000); raise report_interval to at least 35 s, shorten duration, or leave claim out of policies`},
	// 25 s would still write every 20 s: the hint names a whole number of report intervals.
	{"heartbeats over the limit, the hint a multiple of report_interval", lines(`duration = 50000`, `[scheduler]`, `service_down_time = 10`, `[compute]`, `report_interval = 10`, `update_resources_interval = -1`,
		`[[hosts]]`, `prefix = "h"`, `count = 100000`, `vcpus = 1`, `memory_mb = 1024`, `disk_gb = 1`),
		`bad.toml:3: scheduler.service_down_time: 100000 hosts' heartbeats, written every 10 s (report_interval 10 s, service_down_time 10 s) for 50000 s, are 5e+08 writes, more than the simulator runs (200000000); raise service_down_time to at least 30 s (heartbeats are written every whole number of report intervals it holds), shorten duration, or set service_down_time = 0 (no liveness check)`},

	// Events, drains, workloads.
	{"event heartbeat host unknown", file(`[[event]]`, `stop_heartbeats = ["h09"]`), `bad.toml:14: event[0].stop_heartbeats[0]: no host is named "h09"`},
	{"event heartbeats stopped and started", file(`[[event]]`, `stop_heartbeats = ["h01"]`, `start_heartbeats = ["h01"]`), `bad.toml:15: event[0].start_heartbeats[0]: host "h01" both stops and starts its heartbeats`},
	{"event does nothing", file(`[[event]]`, `at = 5`), `bad.toml:13: event[0]: the event does nothing: give disable, enable, stop_heartbeats and/or start_heartbeats = [...]`},
	{"drain interval past a year", file(`[[drain]]`, `interval = 1e12`, `hosts = ["h01"]`), `bad.toml:14: drain[0].interval: 1e+12 s is more than the simulator runs (31536000 s, a year)`},
	{"drain in_flight huge", file(`[[drain]]`, `in_flight = 4611686018427387904`, `hosts = ["h01"]`), `bad.toml:14: drain[0].in_flight: must be between 0 and 10000 (0 means 1), got 4611686018427387904`},
	{"workload rate missing", file(`[[workload]]`, `kind = "delete"`), `bad.toml:13: workload[0].rate: missing: operations per second (> 0) is required`},
	{"workload rate too high", file(`[[workload]]`, `kind = "delete"`, `rate = 1e12`), `bad.toml:15: workload[0].rate: must be at most 1000 operations per second, got 1e+12`},
	{"workload rate negative", file(`[[workload]]`, `kind = "delete"`, `rate = -1`), `bad.toml:15: workload[0].rate: must be > 0 operations per second, got -1`},
}

func TestBadInputMessages(t *testing.T) {
	// SIM_PRINT_MESSAGES=1 prints what each input gets, to review a new
	// case before its message is written in.
	gen := os.Getenv("SIM_PRINT_MESSAGES") != ""
	for _, tc := range badInputs {
		_, err := Parse("bad.toml", tc.data)
		got := "<accepted>"
		if err != nil {
			got = err.Error()
		}
		if gen {
			t.Logf("%s\t%s", tc.name, got)
			continue
		}
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		if !strings.HasPrefix(got, "bad.toml") {
			t.Errorf("%s: %q does not name the file", tc.name, got)
		}
	}
}
