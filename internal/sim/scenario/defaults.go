package scenario

import (
	"fmt"
	"strconv"

	"keel/internal/scheduler"
)

// KnownPolicies are the host-view policies a scenario may run, in report
// order (the default when policies is empty).
var KnownPolicies = func() []string {
	out := make([]string, len(scheduler.Policies))
	for i, p := range scheduler.Policies {
		out[i] = string(p)
	}
	return out
}()

// KnownFilters and KnownWeighers are the names a scenario may use: the
// scheduler's own lists.
var (
	KnownFilters  = scheduler.KnownFilters
	KnownWeighers = scheduler.KnownWeighers
)

// MaxDuration is the longest run the simulator accepts, in seconds (a
// year: virtual time is kept in nanoseconds).
const MaxDuration = 365 * 24 * 3600.0

// Workload kinds.
const (
	KindBoot    = "boot"
	KindDelete  = "delete"
	KindMigrate = "migrate"
)

// KnownKinds are the workload kinds.
var KnownKinds = []string{KindBoot, KindDelete, KindMigrate}

// Defaults ApplyDefaults fills in.
const (
	DefaultHostSubsetSize              = 1
	DefaultMaxAttempts                 = 3
	DefaultUpdateResourcesInterval     = 60
	DefaultReservedHostMemoryMB        = 512
	DefaultMigrationBandwidthMiBps     = 1024.0
	DefaultMaxConcurrentLiveMigrations = 1
	DefaultFirst                       = 1
	DefaultMinDigits                   = 2
	DefaultCPUAllocationRatio          = 4.0
	DefaultRAMAllocationRatio          = 1.0
	DefaultDiskAllocationRatio         = 1.0
	DefaultZone                        = "nova"
	DefaultInFlight                    = 1
	DefaultServiceDownTime             = 60.0
	DefaultReportInterval              = 10.0
)

// ApplyDefaults replaces every unset (zero) option with its default. It is
// idempotent; Parse calls it after validation.
//
//	policies                       → legacy, dest-update, claim
//	scheduler.host_subset_size     → 1; max_attempts → 3
//	scheduler.service_down_time    → 60 (when absent; 0 is kept)
//	compute.report_interval        → 10
//	compute.update_resources_interval → 60
//	compute.reserved_host_memory_mb   → 512 (when absent; 0 is kept)
//	compute.migration_bandwidth_mib_s → 1024
//	compute.max_concurrent_live_migrations → 1
//	hosts: first → 1, digits → max(2, digits of the last number),
//	       cpu ratio → 4.0, ram and disk ratios → 1.0, zone → "nova"
//	drain: in_flight → 1, disable → true
//	workload: end → duration; a boot's flavors → every flavor, weight 1
//
// Scheduler filters, weighers and multipliers stay as written (nil / empty
// means Nova's default, which the scheduler package applies).
func (s *Scenario) ApplyDefaults() {
	if len(s.Policies) == 0 {
		s.Policies = append([]string(nil), KnownPolicies...)
	}

	sc := &s.Scheduler
	if sc.HostSubsetSize == 0 {
		sc.HostSubsetSize = DefaultHostSubsetSize
	}
	if sc.MaxAttempts == 0 {
		sc.MaxAttempts = DefaultMaxAttempts
	}
	if sc.ServiceDownTime == nil {
		v := DefaultServiceDownTime
		sc.ServiceDownTime = &v
	}

	c := &s.Compute
	if c.UpdateResourcesInterval == 0 {
		c.UpdateResourcesInterval = DefaultUpdateResourcesInterval
	}
	if c.ReservedHostMemoryMB == nil {
		v := int64(DefaultReservedHostMemoryMB)
		c.ReservedHostMemoryMB = &v
	}
	if c.MigrationBandwidthMiBps == 0 {
		c.MigrationBandwidthMiBps = DefaultMigrationBandwidthMiBps
	}
	if c.MaxConcurrentLiveMigrations == 0 {
		c.MaxConcurrentLiveMigrations = DefaultMaxConcurrentLiveMigrations
	}
	if c.ReportInterval == nil {
		v := DefaultReportInterval
		c.ReportInterval = &v
	}

	for i := range s.HostGroups {
		s.HostGroups[i] = s.HostGroups[i].withDefaults()
	}

	for i := range s.Drains {
		d := &s.Drains[i]
		if d.InFlight == 0 {
			d.InFlight = DefaultInFlight
		}
		if d.Disable == nil {
			t := true
			d.Disable = &t
		}
	}

	for i := range s.Workloads {
		w := &s.Workloads[i]
		if w.End == 0 {
			w.End = s.Duration
		}
		if w.Kind == KindBoot && len(w.Flavors) == 0 && len(s.Flavors) > 0 {
			w.Flavors = make(map[string]float64, len(s.Flavors))
			for _, f := range s.Flavors {
				w.Flavors[f.Name] = 1
			}
		}
	}
}

// withDefaults returns g with its unset fields defaulted.
func (g HostGroup) withDefaults() HostGroup {
	if g.Name != "" && g.Count == 0 {
		g.Count = 1
	}
	if g.First == 0 && g.Name == "" {
		g.First = DefaultFirst
	}
	if g.Digits == 0 && g.Name == "" {
		g.Digits = defaultDigits(g.First, g.Count)
	}
	if g.CPUAllocationRatio == 0 {
		g.CPUAllocationRatio = DefaultCPUAllocationRatio
	}
	if g.RAMAllocationRatio == 0 {
		g.RAMAllocationRatio = DefaultRAMAllocationRatio
	}
	if g.DiskAllocationRatio == 0 {
		g.DiskAllocationRatio = DefaultDiskAllocationRatio
	}
	if g.Zone == "" {
		g.Zone = DefaultZone
	}
	return g
}

// defaultDigits is max(2, digits of the group's last number).
func defaultDigits(first, count int) int {
	last := first + count - 1
	return max(DefaultMinDigits, len(strconv.Itoa(max(last, 0))))
}

// HostNames returns the group's host names: Prefix followed by First,
// First+1, … zero-padded to Digits (defaults applied if unset), e.g. h01,
// h02, … or node0998, node0999, node1000.
func (g HostGroup) HostNames() []string {
	g = g.withDefaults()
	if g.Name != "" {
		return []string{g.Name}
	}
	if g.Count <= 0 {
		return nil
	}
	names := make([]string, g.Count)
	for i := range names {
		names[i] = fmt.Sprintf("%s%0*d", g.Prefix, g.Digits, g.First+i)
	}
	return names
}

// HostSpec is one host of the scenario with its group's sizes, defaults
// applied.
type HostSpec struct {
	Name  string
	Group int // index in Scenario.HostGroups

	VCPUs               int64
	CPUAllocationRatio  float64
	MemoryMB            int64
	RAMAllocationRatio  float64
	DiskGB              int64
	DiskAllocationRatio float64
	Zone                string

	// Instances is the group's map (flavor name → count at t=0), shared by
	// every host of the group: do not modify.
	Instances map[string]int
	// AuditPhase is this host's own phase: the group's audit_phase, or with
	// audit_spread, i × interval / n for host i of the group's n (0 when
	// audits are disabled).
	AuditPhase float64
	Disabled   bool
	// Children are the group's child providers (shared: do not modify).
	Children []Child
	// Traits are the group's traits (shared: do not modify).
	Traits []string
	// ReservedMemoryMB and ReservedDiskMB are what the host reserves: the
	// group's override, else [compute]'s (defaults applied).
	ReservedMemoryMB int64
	ReservedDiskMB   int64
}

// Hosts returns every host, group by group in file order.
func (s *Scenario) Hosts() []HostSpec {
	n := 0
	for _, g := range s.HostGroups {
		n += max(g.Count, 0)
	}
	interval := s.Compute.UpdateResourcesInterval
	if interval == 0 {
		interval = DefaultUpdateResourcesInterval
	}
	out := make([]HostSpec, 0, n)
	reservedMB := int64(DefaultReservedHostMemoryMB)
	if v := s.Compute.ReservedHostMemoryMB; v != nil {
		reservedMB = *v
	}
	for gi, g := range s.HostGroups {
		g = g.withDefaults()
		rmb, rdisk := reservedMB, s.Compute.ReservedHostDiskMB
		if g.ReservedHostMemoryMB != nil {
			rmb = *g.ReservedHostMemoryMB
		}
		if g.ReservedHostDiskMB != nil {
			rdisk = *g.ReservedHostDiskMB
		}
		for i, name := range g.HostNames() {
			phase := g.AuditPhase
			if g.AuditSpread {
				phase = 0
				if interval > 0 {
					phase = float64(i) * float64(interval) / float64(g.Count)
				}
			}
			out = append(out, HostSpec{
				Name:                name,
				Group:               gi,
				VCPUs:               g.VCPUs,
				CPUAllocationRatio:  g.CPUAllocationRatio,
				MemoryMB:            g.MemoryMB,
				RAMAllocationRatio:  g.RAMAllocationRatio,
				DiskGB:              g.DiskGB,
				DiskAllocationRatio: g.DiskAllocationRatio,
				Zone:                g.Zone,
				Instances:           g.Instances,
				AuditPhase:          phase,
				Disabled:            g.Disabled,
				Children:            g.Children,
				Traits:              g.Traits,
				ReservedMemoryMB:    rmb,
				ReservedDiskMB:      rdisk,
			})
		}
	}
	return out
}

// FlavorByName returns the flavor called name.
func (s *Scenario) FlavorByName(name string) (Flavor, bool) {
	for _, f := range s.Flavors {
		if f.Name == name {
			return f, true
		}
	}
	return Flavor{}, false
}
