package scenario

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"keel/internal/compute/workload"
	"keel/internal/placement"
	"keel/internal/plan"
	"keel/internal/scheduler"
)

// Bounds on what a scenario may ask for. They keep every product and sum
// the simulator computes inside int64 and every time inside time.Duration,
// and they bound what an accepted scenario costs: each of the size limits
// (hosts, providers, instances, operations) is at most a few GB of memory
// for one policy's run, and each of the work limits (audits, heartbeats)
// minutes of CPU. Each is 4 to 40 times what the generated 10,000-host day
// (keel sim --generate 10000 --hours 24) needs. scenarios/README.md lists
// them ("Limits").
const (
	// MaxHosts bounds a scenario's host count (all groups together), about
	// 10 KB each.
	MaxHosts = 100_000
	// MaxProviders bounds the resource providers: the hosts', their
	// children (count × children of every group) and the sharing pools.
	MaxProviders = 200_000
	// MaxInstances bounds the initial instances of all hosts together,
	// about 3 KB each: the generated 100,000-host day starts with 1.5
	// million (keel sim --generate 100000).
	MaxInstances = 2_000_000
	// MaxOperations bounds the workloads' operations over the run, the sum
	// of rate × (end − start): every boot is kept (an instance, ACTIVE or
	// ERROR), about 3 KB each.
	MaxOperations = 1_000_000
	// MaxAuditWork bounds the periodic audits' work over the run: each
	// host's audits (duration ÷ update_resources_interval) times the hosts
	// and the instances they may hold (initial ones and boots).
	MaxAuditWork = 200_000_000
	// MaxHeartbeats bounds the heartbeat writes over the run: hosts ×
	// duration ÷ the write interval (report_interval × ⌊service_down_time ÷
	// report_interval⌋, at least report_interval; none with
	// service_down_time 0).
	MaxHeartbeats = 200_000_000
	// MaxMeasureWork bounds the claim policy's measured-usage reports over
	// the run: each host's reports (duration ÷ [metrics] report_interval)
	// times the hosts and the instances they may hold (initial ones and
	// boots), each measured once a report (about 1.4 µs a guest).
	MaxMeasureWork = 100_000_000
	// MaxSize bounds a host's inventory totals and a flavor's sizes (VCPU,
	// MiB, GiB): Placement's largest inventory total, 2^31 - 1.
	MaxSize = math.MaxInt32
	// MaxRatio bounds an allocation ratio.
	MaxRatio = 1e6
	// MaxRate bounds a workload's operations per second.
	MaxRate = 1000.0
	// MaxFirst bounds a host group's first number.
	MaxFirst = 1_000_000_000_000
	// MaxAttempts bounds scheduler.max_attempts.
	MaxAttempts = 1000
	// MaxConcurrent bounds concurrent live migrations (per host, per drain).
	MaxConcurrent = 10_000
)

// Validate checks a scenario built in code (Generate, tests) with the rules
// Parse applies to files; errors carry no line. It accepts a scenario with
// or without defaults applied.
func (s *Scenario) Validate() error {
	if e := s.validate(s.Name, nil); e != nil {
		return e
	}
	return nil
}

// checker records the first problem found. Checks run in dependency order
// (flavors before hosts, hosts before events…), so the first problem is the
// cause rather than a consequence.
type checker struct {
	file string
	ix   *lineIndex
	err  *Error
}

func (c *checker) errf(path, format string, args ...any) {
	if c.err != nil {
		return
	}
	c.err = &Error{File: c.file, Line: c.ix.line(path), Msg: path + ": " + fmt.Sprintf(format, args...)}
}

// given reports whether path is written in the file. Without a file (a
// scenario built in code) nothing is "given", so zero means unset.
func (c *checker) given(path string) bool { return c.ix.has(path) }

// validate checks every value; ix (nil for scenarios built in code) gives
// lines and tells an explicit 0 from an absent key.
func (s *Scenario) validate(file string, ix *lineIndex) *Error {
	c := &checker{file: file, ix: ix}

	// Top level.
	switch {
	case !c.given("duration") && s.Duration == 0:
		c.errf("duration", "missing: the run's length in seconds is required")
	case !(s.Duration > 0) || math.IsInf(s.Duration, 0):
		c.errf("duration", "must be > 0 seconds, got %v", s.Duration)
	case s.Duration > MaxDuration:
		c.errf("duration", "%v s is more than the simulator runs (%.0f s, a year)", s.Duration, MaxDuration)
	}
	for i, p := range s.Policies {
		path := elem("policies", i)
		if !slices.Contains(KnownPolicies, p) {
			c.errf(path, "unknown policy %q (known: %s)", p, strings.Join(KnownPolicies, ", "))
		} else if j := slices.Index(s.Policies, p); j < i {
			c.errf(path, "policy %q is listed twice", p)
		}
	}

	s.validateScheduler(c)
	s.validateCompute(c)
	s.validateFlavors(c)
	names := s.validateHosts(c)
	if c.err != nil {
		return c.err
	}
	s.validateTrees(c)
	s.validatePlacement(c, names)
	if c.err != nil {
		return c.err
	}
	s.validateEvents(c, names)
	s.validateWorkloads(c)
	if c.err != nil {
		return c.err
	}
	s.validateCost(c)
	return c.err
}

// groupSize is a group's host count: 1 for a named host.
func groupSize(g HostGroup) int {
	if g.Name != "" {
		return 1
	}
	return g.Count
}

// checkProviderCount refuses more than MaxProviders providers (hosts,
// their children, the pools), blaming the group that crosses the limit.
func (s *Scenario) checkProviderCount(c *checker) {
	providers := len(s.Shared)
	for i, g := range s.HostGroups {
		providers += groupSize(g) * (1 + len(g.Children))
		if providers > MaxProviders {
			c.errf(elem("hosts", i)+".child", "too many providers: hosts, their children and the shared pools come to %d with this group, and the simulator allows %d; fewer hosts or children", providers, MaxProviders)
			return
		}
	}
}

// validateCost bounds what the run costs as a whole (MaxOperations, MaxAuditWork, MaxMeasureWork, MaxHeartbeats), once every value is valid
// on its own. Each message names the limit and what to change.
func (s *Scenario) validateCost(c *checker) {
	hosts, instances := 0, len(s.Instances)
	for _, g := range s.HostGroups {
		n := groupSize(g)
		hosts += n
		for _, k := range g.Instances {
			instances += n * k
		}
	}
	ops, boots := 0.0, 0.0
	for i, w := range s.Workloads {
		end := w.End
		if end == 0 {
			end = s.Duration
		}
		n := w.Rate * (end - w.Start)
		ops += n
		if w.Kind == KindBoot {
			boots += n
		}
		if ops > MaxOperations {
			c.errf(elem("workload", i)+".rate", "the workloads ask for %.4g operations (rate × (end − start), summed) with this one, more than the simulator runs (%d); lower a rate or shorten a workload", ops, MaxOperations)
			return
		}
	}
	if interval := s.Compute.UpdateResourcesInterval; interval >= 0 {
		if interval == 0 {
			interval = DefaultUpdateResourcesInterval
		}
		audits := math.Floor(s.Duration / float64(interval))
		work := audits * (float64(hosts) + float64(instances) + boots)
		if work > MaxAuditWork {
			least := math.Ceil(s.Duration * (float64(hosts) + float64(instances) + boots) / MaxAuditWork)
			c.errf("compute.update_resources_interval", "audits every %d s for %v s audit each of %d hosts %.0f times, with up to %.0f instances (initial and booted): %.4g host and instance audits, more than the simulator runs (%d); raise update_resources_interval to at least %.0f s, shorten duration, or set it below 0 (no audits)",
				interval, s.Duration, hosts, audits, float64(instances)+boots, work, MaxAuditWork, least)
			return
		}
	}
	if s.Metrics.Enabled() && (len(s.Policies) == 0 || slices.Contains(s.Policies, string(scheduler.PolicyClaim))) {
		every := DefaultReportInterval
		if v := s.Metrics.ReportInterval; v != nil {
			every = *v
		}
		reports := math.Floor(s.Duration / every)
		guests := float64(hosts) + float64(instances) + boots
		if work := reports * guests; work > MaxMeasureWork {
			c.errf("metrics.report_interval", "the claim policy's measured-usage reports, every %v s for %v s, measure each of %d hosts %.0f times, with up to %.0f instances (initial and booted): %.4g host and instance measurements, more than the simulator runs (%d); raise report_interval to at least %.0f s, shorten duration, or leave claim out of policies",
				every, s.Duration, hosts, reports, float64(instances)+boots, work, MaxMeasureWork, math.Ceil(s.Duration*guests/MaxMeasureWork))
		}
	}
	report := DefaultReportInterval
	if v := s.Compute.ReportInterval; v != nil {
		report = *v
	}
	down := DefaultServiceDownTime
	if v := s.Scheduler.ServiceDownTime; v != nil {
		down = *v
	}
	if down > 0 && report > 0 {
		every := report * math.Max(1, math.Floor(down/report))
		writes := float64(hosts) * math.Floor(s.Duration/every)
		if writes > MaxHeartbeats {
			c.errf("scheduler.service_down_time", "%d hosts' heartbeats, written every %v s (report_interval %v s, service_down_time %v s) for %v s, are %.4g writes, more than the simulator runs (%d); raise service_down_time to at least %.0f s (heartbeats are written every whole number of report intervals it holds), shorten duration, or set service_down_time = 0 (no liveness check)",
				hosts, every, report, down, s.Duration, writes, MaxHeartbeats, math.Ceil(math.Ceil(float64(hosts)*s.Duration/MaxHeartbeats)/report)*report)
		}
	}
}

func (s *Scenario) validateScheduler(c *checker) {
	sc := s.Scheduler
	if sc.HostSubsetSize < 0 || sc.HostSubsetSize > MaxHosts {
		c.errf("scheduler.host_subset_size", "must be between 0 and %d (0 means 1), got %d", MaxHosts, sc.HostSubsetSize)
	}
	if sc.MaxAttempts < 0 || sc.MaxAttempts > MaxAttempts {
		c.errf("scheduler.max_attempts", "must be between 0 and %d (0 means 3), got %d", MaxAttempts, sc.MaxAttempts)
	}
	checkNames(c, "scheduler.enabled_filters", "filter", sc.EnabledFilters, KnownFilters)
	checkNames(c, "scheduler.weighers", "weigher", sc.Weighers, KnownWeighers)
	if v := sc.ServiceDownTime; v != nil {
		checkSeconds(c, "scheduler.service_down_time", *v, 0, " (0 disables the liveness check)")
	}
	for _, name := range slices.Sorted(maps.Keys(sc.Options)) {
		o, ok := scheduler.LookupOption(name)
		v := sc.Options[name]
		switch {
		case !ok:
			c.errf("scheduler."+name, "unknown key")
		case math.IsInf(v, 0) || math.IsNaN(v):
			c.errf("scheduler."+name, "must be a finite number, got %v", v)
		case o.Integer && v != math.Trunc(v):
			c.errf("scheduler."+name, "must be a whole number, got %v", v)
		case o.HasMin && v < o.Min:
			c.errf("scheduler."+name, "must be >= %v, got %v", o.Min, v)
		}
	}
}

// checkNames refuses unknown and repeated names.
func checkNames(c *checker, path, what string, names, known []string) {
	for i, n := range names {
		p := elem(path, i)
		if !slices.Contains(known, n) {
			c.errf(p, "unknown %s %q (known: %s)", what, n, strings.Join(known, ", "))
		} else if j := slices.Index(names, n); j < i {
			c.errf(p, "%s %q is listed twice", what, n)
		}
	}
}

func (s *Scenario) validateCompute(c *checker) {
	cp := s.Compute
	if v := cp.ReservedHostMemoryMB; v != nil && *v < 0 {
		c.errf("compute.reserved_host_memory_mb", "must be >= 0, got %d", *v)
	}
	if cp.ReservedHostDiskMB < 0 {
		c.errf("compute.reserved_host_disk_mb", "must be >= 0, got %d", cp.ReservedHostDiskMB)
	}
	if cp.MigrationBandwidthMiBps < 0 {
		c.errf("compute.migration_bandwidth_mib_s", "must be > 0 MiB/s (0 means 1024), got %v", cp.MigrationBandwidthMiBps)
	}
	if v := cp.UpdateResourcesInterval; v > int(MaxDuration) {
		c.errf("compute.update_resources_interval", "%d s is more than the simulator runs (%.0f s, a year)", v, MaxDuration)
	}
	if v := cp.ReportInterval; v != nil {
		checkSeconds(c, "compute.report_interval", *v, 1, "")
	}
	checkSeconds(c, "compute.spawn_seconds", cp.SpawnSeconds, 0, "")
	if cp.MaxConcurrentLiveMigrations < 0 || cp.MaxConcurrentLiveMigrations > MaxConcurrent {
		c.errf("compute.max_concurrent_live_migrations", "must be between 0 and %d (0 means 1), got %d", MaxConcurrent, cp.MaxConcurrentLiveMigrations)
	}
}

func (s *Scenario) validateFlavors(c *checker) {
	first := map[string]int{} // name → index of its first definition
	for i, f := range s.Flavors {
		p := elem("flavor", i)
		if f.Name == "" {
			c.errf(p+".name", "missing: every flavor needs a name")
		} else if j, dup := first[f.Name]; dup {
			c.errf(p+".name", "flavor %q is defined twice (first at line %d)", f.Name, c.ix.line(elem("flavor", j)))
		} else {
			first[f.Name] = i
		}
		c.size(p+".vcpus", f.VCPUs, 1, "VCPU")
		c.size(p+".ram", f.RAMMB, 1, "MiB")
		c.size(p+".disk", f.DiskGB, 0, "GiB")
		if f.Workload != "" {
			m, err := workload.Parse(f.Workload)
			if err == nil {
				err = m.Check(f.VCPUs, f.RAMMB)
			}
			if err != nil {
				c.errf(p+".workload", "%v", err)
			}
		}
	}
	s.validateMetrics(c)
	// A live migration copies the flavor's RAM at the bandwidth: its time
	// must fit the simulator's clock.
	bw := s.Compute.MigrationBandwidthMiBps
	if bw == 0 {
		bw = DefaultMigrationBandwidthMiBps
	}
	for _, f := range s.Flavors {
		if t := float64(f.RAMMB) / bw; bw > 0 && t > MaxDuration {
			c.errf("compute.migration_bandwidth_mib_s", "at %v MiB/s a live migration of flavor %q (%d MiB) takes %.3g s, more than the simulator runs (%.0f s, a year)",
				bw, f.Name, f.RAMMB, t, MaxDuration)
		}
	}
}

// validateMetrics checks the [metrics] section.
func (s *Scenario) validateMetrics(c *checker) {
	m := s.Metrics
	if _, err := scheduler.ParseWeightSetting(m.WeightSetting); err != nil {
		c.errf("metrics.weight_setting", "%v", err)
	}
	if v := m.WeightOfUnavailable; v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
		c.errf("metrics.weight_of_unavailable", "must be a number, got %v", *v)
	}
	if v := m.MaxAge; v != nil {
		checkSeconds(c, "metrics.max_age", *v, 0, "")
	}
	if v := m.ReportInterval; v != nil {
		checkSeconds(c, "metrics.report_interval", *v, 1, "")
	}
	if m.Workload != "" {
		if _, err := workload.Parse(m.Workload); err != nil {
			c.errf("metrics.workload", "%v", err)
		}
	}
}

// size refuses a size below min (1: > 0, 0: >= 0) or above MaxSize; an
// absent required one is "missing".
func (c *checker) size(path string, v, min int64, unit string) {
	switch {
	case v == 0 && min > 0 && !c.given(path) && c.ix != nil:
		c.errf(path, "missing: a size in %s (> 0) is required", unit)
	case v < min && min > 0:
		c.errf(path, "must be > 0 %s, got %d", unit, v)
	case v < min:
		c.errf(path, "must be >= 0 %s, got %d", unit, v)
	case v > MaxSize:
		c.errf(path, "%d %s is more than the simulator allows (%d, Placement's largest total)", v, unit, MaxSize)
	}
}

// validateHosts checks the groups and returns the set of host names.
// Each group is checked in steps, in this order: its naming and traits,
// its reservations, its shape (count, numbering, sizes, ratios, zone,
// audit), its initial instances and whether they fit, and its names
// against the other groups'. The checker keeps the first error; a step
// that would multiply what an earlier one refused is not reached.
func (s *Scenario) validateHosts(c *checker) map[string]bool {
	if len(s.HostGroups) == 0 {
		c.errf("hosts", "missing: at least one [[hosts]] group is required")
		return nil
	}
	reservedMB, reservedGB := s.computeReserves()
	interval := s.Compute.UpdateResourcesInterval
	if interval == 0 {
		interval = DefaultUpdateResourcesInterval
	}

	names := map[string]bool{}
	owner := map[string]int{}
	total := 0
	instances := 0 // initial instances of every group so far
	for i, g := range s.HostGroups {
		p := elem("hosts", i)
		if c.err != nil {
			return names
		}
		named := checkHostNaming(c, p, &g)
		gReservedMB, gReservedGB := groupReserves(c, p, g, reservedMB, reservedGB)
		checkHostShape(c, p, g, total, interval)
		total += max(g.Count, 0)
		if c.err != nil {
			return names
		}
		need, perHost := s.initialInstances(c, p, g)
		if c.err != nil {
			return names
		}
		if perHost > 0 && (int64(perHost)*int64(g.Count) > MaxInstances || instances+perHost*g.Count > MaxInstances) {
			c.errf(p+".instances", "too many instances: %d hosts of %d each, and the scenario may start with at most %d", g.Count, perHost, MaxInstances)
			return names
		}
		instances += perHost * g.Count
		gd := g.withDefaults()
		s.checkInitialFit(c, p, g, gd, gReservedMB, gReservedGB, need)

		// Names, unique across groups.
		for _, n := range gd.HostNames() {
			if j, dup := owner[n]; dup {
				key := ".prefix"
				if named {
					key = ".name"
				}
				c.errf(p+key, "host name %q is also generated by hosts[%d] (line %d)", n, j, c.ix.line(elem("hosts", j)))
				return names
			}
			owner[n] = i
			names[n] = true
		}
	}
	return names
}

// computeReserves is [compute]'s reserved host memory (MiB) and disk
// (GiB, rounded up, without overflow), the defaults of every group.
func (s *Scenario) computeReserves() (mb, gb int64) {
	mb = int64(DefaultReservedHostMemoryMB)
	if v := s.Compute.ReservedHostMemoryMB; v != nil {
		mb = *v
	}
	gb = s.Compute.ReservedHostDiskMB / 1024
	if s.Compute.ReservedHostDiskMB%1024 > 0 {
		gb++
	}
	return mb, gb
}

// checkHostNaming checks that a group is one named host or a prefix, and
// its traits; a named host's count becomes 1. It reports whether the
// group is named.
func checkHostNaming(c *checker, p string, g *HostGroup) (named bool) {
	named = g.Name != "" || c.given(p+".name")
	switch {
	case named && g.Name == "":
		c.errf(p+".name", "must not be empty")
	case named && (g.Prefix != "" || c.given(p+".prefix")):
		c.errf(p+".prefix", "name and prefix exclude each other (name is one host, prefix a numbered group)")
	case named && (g.First != 0 || g.Digits != 0):
		c.errf(p+".name", "a named host takes no first or digits")
	case named && g.Count > 1:
		c.errf(p+".count", "a named host is one host, got count %d", g.Count)
	case named:
		g.Count = 1
	case g.Prefix == "" && !c.given(p+".prefix"):
		c.errf(p+".prefix", "missing: host names are prefix + number, e.g. prefix = \"h\" (or name = \"…\" for one host)")
	case g.Prefix == "":
		c.errf(p+".prefix", "must not be empty")
	}
	for j, tr := range g.Traits {
		if tr == "" {
			c.errf(elem(p+".traits", j), "must not be empty")
		} else if err := placement.ValidateCustomTrait(tr); err != nil && !placement.IsStandardTrait(tr) {
			c.errf(elem(p+".traits", j), "%q is neither a standard trait nor a CUSTOM_ one", tr)
		} else if k := slices.Index(g.Traits, tr); k < j {
			c.errf(elem(p+".traits", j), "trait %q is listed twice", tr)
		}
	}
	return named
}

// groupReserves is a group's reserved memory (MiB) and disk (GiB, rounded
// up): its own if set (and >= 0), else [compute]'s.
func groupReserves(c *checker, p string, g HostGroup, reservedMB, reservedGB int64) (mb, gb int64) {
	mb, gb = reservedMB, reservedGB
	if v := g.ReservedHostMemoryMB; v != nil {
		if *v < 0 {
			c.errf(p+".reserved_host_memory_mb", "must be >= 0, got %d", *v)
		}
		mb = *v
	}
	if v := g.ReservedHostDiskMB; v != nil {
		if *v < 0 {
			c.errf(p+".reserved_host_disk_mb", "must be >= 0, got %d", *v)
		}
		gb = *v / 1024
		if *v%1024 > 0 {
			gb++
		}
	}
	return mb, gb
}

// checkHostShape checks a group's count (total is the hosts of the groups
// before it), numbering, sizes, allocation ratios, zone and audit timing.
func checkHostShape(c *checker, p string, g HostGroup, total, interval int) {
	switch {
	case g.Count == 0 && !c.given(p+".count"):
		c.errf(p+".count", "missing: how many hosts the group has (>= 1)")
	case g.Count < 1:
		c.errf(p+".count", "must be >= 1, got %d", g.Count)
	case g.Count > MaxHosts || total+g.Count > MaxHosts:
		c.errf(p+".count", "too many hosts: the scenario may have at most %d", MaxHosts)
	}
	if g.First < 0 || g.First == 0 && c.given(p+".first") || g.First > MaxFirst {
		c.errf(p+".first", "must be between 1 and %d, got %d", MaxFirst, g.First)
	}
	if g.Digits < 0 || g.Digits > 18 {
		c.errf(p+".digits", "must be between 1 and 18 (0 means as wide as needed, at least 2), got %d", g.Digits)
	}
	c.size(p+".vcpus", g.VCPUs, 1, "VCPU")
	c.size(p+".memory_mb", g.MemoryMB, 1, "MiB")
	c.size(p+".disk_gb", g.DiskGB, 1, "GiB")
	for _, r := range []struct {
		key string
		v   float64
	}{
		{"cpu_allocation_ratio", g.CPUAllocationRatio},
		{"ram_allocation_ratio", g.RAMAllocationRatio},
		{"disk_allocation_ratio", g.DiskAllocationRatio},
	} {
		if r.v < 0 || r.v == 0 && c.given(p+"."+r.key) || r.v > MaxRatio {
			c.errf(p+"."+r.key, "must be > 0 and at most %v, got %v", MaxRatio, r.v)
		}
	}
	if g.Zone == "" && c.given(p+".zone") {
		c.errf(p+".zone", "must not be empty (the default is %q)", DefaultZone)
	}
	if g.AuditPhase < 0 {
		c.errf(p+".audit_phase", "must be >= 0, got %v", g.AuditPhase)
	} else if interval > 0 && g.AuditPhase >= float64(interval) {
		c.errf(p+".audit_phase", "must be below compute.update_resources_interval (%d), got %v", interval, g.AuditPhase)
	}
	if g.AuditSpread && (g.AuditPhase != 0 || c.given(p+".audit_phase")) {
		c.errf(p+".audit_spread", "audit_spread and audit_phase exclude each other")
	}
}

// hostNeed is what a group's initial instances take on each host.
type hostNeed struct{ vcpus, ram, disk int64 }

// initialInstances checks a group's initial instances — known flavors,
// counts >= 0, each one within a host's totals (Placement's max_unit), not
// too many — and returns what they take per host and how many there are
// per host. Counts and sizes are bounded before they are multiplied.
func (s *Scenario) initialInstances(c *checker, p string, g HostGroup) (need hostNeed, perHost int) {
	for _, fname := range slices.Sorted(maps.Keys(g.Instances)) {
		n := g.Instances[fname]
		ip := joinKey(p+".instances", fname)
		f, ok := s.FlavorByName(fname)
		switch {
		case !ok:
			c.errf(ip, "unknown flavor %q%s", fname, s.flavorList())
		case n < 0:
			c.errf(ip, "instance count must be >= 0, got %d", n)
		case n > MaxInstances || perHost+n > MaxInstances:
			c.errf(ip, "too many instances: a host may start with at most %d", MaxInstances)
		case n > 0 && f.VCPUs > g.VCPUs:
			c.errf(ip, "flavor %q needs %d VCPU but a host has %d (one allocation may not exceed the host's total, Placement's max_unit)", fname, f.VCPUs, g.VCPUs)
		case n > 0 && f.RAMMB > g.MemoryMB:
			c.errf(ip, "flavor %q needs %d MiB of RAM but a host has %d (one allocation may not exceed the host's total, Placement's max_unit)", fname, f.RAMMB, g.MemoryMB)
		case n > 0 && f.DiskGB > g.DiskGB:
			c.errf(ip, "flavor %q needs %d GiB of disk but a host has %d (one allocation may not exceed the host's total, Placement's max_unit)", fname, f.DiskGB, g.DiskGB)
		}
		if c.err != nil {
			return need, perHost
		}
		perHost += n
		need.vcpus += int64(n) * f.VCPUs
		need.ram += int64(n) * f.RAMMB
		need.disk += int64(n) * f.DiskGB
	}
	return need, perHost
}

// checkInitialFit checks that the reservations leave room on a host and
// that the initial instances fit in what its allocation ratios offer.
func (s *Scenario) checkInitialFit(c *checker, p string, g, gd HostGroup, reservedMB, reservedGB int64, need hostNeed) {
	if reservedMB >= g.MemoryMB {
		key := "compute.reserved_host_memory_mb"
		if g.ReservedHostMemoryMB != nil {
			key = p + ".reserved_host_memory_mb"
		}
		c.errf(p+".memory_mb", "%d MiB leaves nothing after %s = %d", g.MemoryMB, key, reservedMB)
	}
	if reservedGB >= g.DiskGB {
		if g.ReservedHostDiskMB != nil {
			c.errf(p+".disk_gb", "%d GiB leaves nothing after %s.reserved_host_disk_mb = %d", g.DiskGB, p, *g.ReservedHostDiskMB)
		} else {
			c.errf(p+".disk_gb", "%d GiB leaves nothing after compute.reserved_host_disk_mb = %d", g.DiskGB, s.Compute.ReservedHostDiskMB)
		}
	}
	for _, r := range []struct {
		what        string
		need, total int64
		reserved    int64
		ratio       float64
		unit        string
	}{
		{what: "VCPU", need: need.vcpus, total: g.VCPUs, ratio: gd.CPUAllocationRatio, unit: "VCPU"},
		{what: "RAM", need: need.ram, total: g.MemoryMB, reserved: reservedMB, ratio: gd.RAMAllocationRatio, unit: "MiB of RAM"},
		{what: "disk", need: need.disk, total: g.DiskGB, reserved: reservedGB, ratio: gd.DiskAllocationRatio, unit: "GiB of disk"},
	} {
		capacity := int64(math.Floor(float64(r.total-r.reserved) * r.ratio))
		if r.need > capacity {
			c.errf(p+".instances", "initial instances need %d %s per host but a host offers %d ((%d - %d reserved) x %v)",
				r.need, r.unit, capacity, r.total, r.reserved, r.ratio)
		}
	}
}

// flavorList is ", known: a, b" for error messages.
func (s *Scenario) flavorList() string {
	if len(s.Flavors) == 0 {
		return " (no [[flavor]] is defined)"
	}
	names := make([]string, len(s.Flavors))
	for i, f := range s.Flavors {
		names[i] = f.Name
	}
	return " (known: " + strings.Join(names, ", ") + ")"
}

// checkSeconds refuses a length of time (an interval, a timeout) that is
// negative, not finite or longer than the simulator runs; min is the
// smallest value allowed (0 or a positive floor) and what says what 0 means
// when it is allowed.
func checkSeconds(c *checker, path string, v, min float64, zero string) {
	switch {
	case math.IsNaN(v) || v < min:
		if min > 0 {
			c.errf(path, "must be >= %v s, got %v", min, v)
		} else {
			c.errf(path, "must be >= 0 seconds%s, got %v", zero, v)
		}
	case v > MaxDuration:
		c.errf(path, "%v s is more than the simulator runs (%.0f s, a year)", v, MaxDuration)
	}
}

// checkTime refuses a time outside [0, duration].
func (s *Scenario) checkTime(c *checker, path string, t float64) {
	if t < 0 || t > s.Duration {
		c.errf(path, "%v is outside the run [0, %v]", t, s.Duration)
	}
}

// checkHosts refuses unknown and repeated host names.
func checkHosts(c *checker, path string, list []string, names map[string]bool) {
	for j, h := range list {
		hp := elem(path, j)
		if !names[h] {
			c.errf(hp, "no host is named %q", h)
		} else if k := slices.Index(list, h); k < j {
			c.errf(hp, "host %q is listed twice", h)
		}
	}
}

func (s *Scenario) validateEvents(c *checker, names map[string]bool) {
	for i, e := range s.Events {
		p := elem("event", i)
		s.checkTime(c, p+".at", e.At)
		if len(e.Disable) == 0 && len(e.Enable) == 0 && len(e.StopHeartbeats) == 0 && len(e.StartHeartbeats) == 0 {
			c.errf(p, "the event does nothing: give disable, enable, stop_heartbeats and/or start_heartbeats = [...]")
		}
		checkHosts(c, p+".disable", e.Disable, names)
		checkHosts(c, p+".enable", e.Enable, names)
		checkHosts(c, p+".stop_heartbeats", e.StopHeartbeats, names)
		checkHosts(c, p+".start_heartbeats", e.StartHeartbeats, names)
		for j, h := range e.Enable {
			if slices.Contains(e.Disable, h) {
				c.errf(elem(p+".enable", j), "host %q is both disabled and enabled", h)
			}
		}
		for j, h := range e.StartHeartbeats {
			if slices.Contains(e.StopHeartbeats, h) {
				c.errf(elem(p+".start_heartbeats", j), "host %q both stops and starts its heartbeats", h)
			}
		}
	}
	for i, d := range s.Drains {
		p := elem("drain", i)
		s.checkTime(c, p+".start", d.Start)
		checkSeconds(c, p+".interval", d.Interval, 0, " (0 means as soon as a slot frees)")
		if d.InFlight < 0 || d.InFlight > MaxConcurrent {
			c.errf(p+".in_flight", "must be between 0 and %d (0 means 1), got %d", MaxConcurrent, d.InFlight)
		}
		if err := plan.Order(nil, d.Order); err != nil {
			c.errf(p+".order", "%v", err)
		}
		if len(d.Hosts) == 0 {
			c.errf(p+".hosts", "missing: name the hosts to drain, e.g. hosts = [\"h01\"]")
		}
		checkHosts(c, p+".hosts", d.Hosts, names)
	}
}

func (s *Scenario) validateWorkloads(c *checker) {
	for i, w := range s.Workloads {
		p := elem("workload", i)
		switch {
		case w.Kind == "":
			c.errf(p+".kind", "missing: one of %s", strings.Join(KnownKinds, ", "))
		case !slices.Contains(KnownKinds, w.Kind):
			c.errf(p+".kind", "unknown kind %q (known: %s)", w.Kind, strings.Join(KnownKinds, ", "))
		}
		switch {
		case w.Rate == 0 && !c.given(p+".rate") && c.ix != nil:
			c.errf(p+".rate", "missing: operations per second (> 0) is required")
		case !(w.Rate > 0):
			c.errf(p+".rate", "must be > 0 operations per second, got %v", w.Rate)
		case w.Rate > MaxRate:
			c.errf(p+".rate", "must be at most %v operations per second, got %v", MaxRate, w.Rate)
		}
		s.checkTime(c, p+".start", w.Start)
		if w.End != 0 || c.given(p+".end") {
			end := w.End
			if end == 0 { // an explicit 0 means the run's end, as an absent one
				end = s.Duration
			}
			switch {
			case end > s.Duration || end < 0:
				c.errf(p+".end", "%v is outside the run [0, %v]", w.End, s.Duration)
			case end <= w.Start:
				c.errf(p+".end", "must be after start (%v), got %v", w.Start, w.End)
			}
		} else if w.Start >= s.Duration {
			c.errf(p+".start", "must be before the run's end (%v), got %v", s.Duration, w.Start)
		}
		if w.Kind == KindBoot && len(s.Flavors) == 0 {
			c.errf(p+".kind", "a boot workload needs at least one [[flavor]]")
		}
		if len(w.Flavors) > 0 && w.Kind != KindBoot {
			c.errf(p+".flavors", "only a boot workload takes flavors")
		}
		var sum float64
		for _, fname := range slices.Sorted(maps.Keys(w.Flavors)) {
			wt := w.Flavors[fname]
			fp := joinKey(p+".flavors", fname)
			if _, ok := s.FlavorByName(fname); !ok {
				c.errf(fp, "unknown flavor %q%s", fname, s.flavorList())
			}
			if wt < 0 || math.IsInf(wt, 0) || math.IsNaN(wt) {
				c.errf(fp, "weight must be >= 0, got %v", wt)
			}
			sum += wt
		}
		if len(w.Flavors) > 0 && !(sum > 0) {
			c.errf(p+".flavors", "every weight is 0: no flavor could be booted")
		}
	}
}
