package rebalance

import (
	"fmt"
	"math"
	"time"

	"keel/internal/scheduler"
)

// Metric is the usage the imbalance is computed on.
type Metric string

// The metrics.
const (
	MetricRAM  Metric = "ram"
	MetricVCPU Metric = "vcpu"
	MetricDisk Metric = "disk"
	// MetricMax is each host's largest normalised usage of the three.
	MetricMax Metric = "max"
	// MetricMeasured is each host's measured use: the larger of the CPUs
	// its agent last measured busy (cpu.percent) over its CPUs (the VCPU
	// inventory's total, before the allocation ratio) and its memory in
	// use as its kernel reports it (keel.memory.total − available, of the
	// total), or, where the host does not report that, the memory its
	// guests were measured resident in over the MEMORY_MB inventory's
	// total. A host with no measurement within Options.MaxAge is neither counted nor a
	// destination, and only instances with a measured usage move; the
	// filters still check every move against the claims.
	MetricMeasured Metric = "measured"
)

// ParseMetric checks a metric name.
func ParseMetric(s string) (Metric, error) {
	switch m := Metric(s); m {
	case MetricRAM, MetricVCPU, MetricDisk, MetricMax, MetricMeasured:
		return m, nil
	}
	return "", fmt.Errorf("unknown metric %q (ram, vcpu, disk, max or measured)", s)
}

// DefaultThreshold is the CV above which a plan acts.
const DefaultThreshold = 0.10

// Options tune a plan.
type Options struct {
	// Metric is what is balanced (default ram).
	Metric Metric
	// Threshold: plan only when the CV is above it, and stop once it is
	// below half of it (hysteresis). 0 means DefaultThreshold.
	Threshold float64
	// MaxMoves caps the plan (0: no cap).
	MaxMoves int
	// MinGain is the least a move must lower the CV by. 0 means
	// Threshold ÷ (20 × hosts counted): bringing the CV down by the
	// threshold takes on the order of one move per host, and a move worth
	// less than a twentieth of that share is not worth its copy (0.0005
	// on 10 hosts at the default threshold, 5·10⁻⁷ on 10,000).
	MinGain float64
	// Scheduler holds the filters in force (enabled_filters and their
	// options, service_down_time). The zero Config means
	// scheduler.DefaultConfig().
	Scheduler scheduler.Config
	// Now is the time the plan is made for: ComputeFilter's heartbeat age
	// and the cooldown are measured from it.
	Now time.Time
	// Cooldown and MovedAt: an instance that moved (MovedAt: instance UUID
	// → when) less than Cooldown before Now is not moved again.
	Cooldown time.Duration
	MovedAt  map[string]time.Time
	// Exclude are hosts that are never a destination nor counted (hosts
	// being drained).
	Exclude []string
	// MaxAge bounds MetricMeasured's measurements: a host measured longer
	// than this before Now counts as unmeasured (0: no bound; keel passes
	// [metrics] max_age).
	MaxAge time.Duration
	// Seed orders moves that are exactly as good, so that a given seed and
	// cloud always give the same plan.
	Seed uint64
}

// withDefaults fills the defaults in and checks the values.
func (o Options) withDefaults() (Options, error) {
	if o.Metric == "" {
		o.Metric = MetricRAM
	}
	if _, err := ParseMetric(string(o.Metric)); err != nil {
		return o, err
	}
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	switch {
	case bad(o.Threshold):
		return o, fmt.Errorf("threshold must be a number ≥ 0, got %v", o.Threshold)
	case bad(o.MinGain):
		return o, fmt.Errorf("min gain must be a number ≥ 0, got %v", o.MinGain)
	case o.MaxMoves < 0:
		return o, fmt.Errorf("max moves must be ≥ 0 (0: no cap), got %d", o.MaxMoves)
	case o.MaxAge < 0:
		return o, fmt.Errorf("max age must be ≥ 0, got %s", o.MaxAge)
	case o.Cooldown < 0:
		return o, fmt.Errorf("cooldown must be ≥ 0, got %s", o.Cooldown)
	}
	if o.Threshold == 0 {
		o.Threshold = DefaultThreshold
	}
	if o.Scheduler.EnabledFilters == nil && o.Scheduler.Options == nil && o.Scheduler.HostSubsetSize == 0 {
		o.Scheduler = scheduler.DefaultConfig()
	}
	return o, nil
}
