package scheduler

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// Config holds Nova's scheduler options under their nova.conf names.
type Config struct {
	// EnabledFilters is [filter_scheduler] enabled_filters.
	EnabledFilters []string
	// Weighers lists the weighers to run (Nova's weight_classes; all by
	// default).
	Weighers []string
	// HostSubsetSize is [filter_scheduler] host_subset_size (default 1).
	HostSubsetSize int
	// ShuffleBestSameWeighedHosts is [filter_scheduler]
	// shuffle_best_same_weighed_hosts (default false).
	ShuffleBestSameWeighedHosts bool
	// MaxAttempts is [scheduler] max_attempts (default 3): one more than
	// the alternates a selection names; a decision ranks host_subset_size +
	// max_attempts hosts and tries each in turn while the store refuses
	// the claims.
	MaxAttempts int
	// Options are the filters' and weighers' own [filter_scheduler]
	// options by name (ram_weight_multiplier, max_io_ops_per_host, …: the
	// registry's, see WeigherOptions and FilterOptions). DefaultConfig
	// sets every one to its default; a name missing here means its default.
	Options map[string]float64
	// ServiceDownTime is [DEFAULT] service_down_time (default 60 s): a host
	// whose service has not reported for longer is down. Zero disables the
	// liveness check (the simulator's hosts never miss a heartbeat).
	ServiceDownTime time.Duration
	// Metrics are the [metrics] options MetricsWeigher and MetricFilter
	// read (weight_multiplier is in Options).
	Metrics MetricsConfig
}

// DefaultConfig returns Nova's defaults, with AvailabilityZoneFilter added
// to the default filters (Nova does that step in a Placement pre-filter
// keel does not have).
func DefaultConfig() Config {
	c := Config{
		Weighers:        append([]string(nil), KnownWeighers...),
		HostSubsetSize:  1,
		MaxAttempts:     3,
		Options:         map[string]float64{},
		ServiceDownTime: 60 * time.Second,
		Metrics:         DefaultMetricsConfig(),
	}
	for i := range filterTable {
		if filterTable[i].Default {
			c.EnabledFilters = append(c.EnabledFilters, filterTable[i].Name)
		}
	}
	for _, o := range append(WeigherOptions(), FilterOptions()...) {
		c.Options[o.Name] = o.Default
	}
	return c
}

// Option returns a filter's or weigher's option: its value in Options,
// else its default (0 for a name the registry does not have).
func (c Config) Option(name string) float64 {
	if v, ok := c.Options[name]; ok {
		return v
	}
	o, _ := LookupOption(name)
	return o.Default
}

// Clone returns a copy that shares no slice or map with c.
func (c Config) Clone() Config {
	c.EnabledFilters = slices.Clone(c.EnabledFilters)
	c.Weighers = slices.Clone(c.Weighers)
	c.Options = maps.Clone(c.Options)
	c.Metrics.WeightSetting = slices.Clone(c.Metrics.WeightSetting)
	return c
}

// Validate checks names and ranges.
func (c Config) Validate() error {
	for _, f := range c.EnabledFilters {
		if filterSpec(f) == nil {
			return fmt.Errorf("enabled_filters: unknown filter %q (known: %v)", f, KnownFilters)
		}
	}
	for i, w := range c.Weighers {
		if weigherSlot(w) < 0 {
			return fmt.Errorf("weighers: unknown weigher %q (known: %v)", w, KnownWeighers)
		}
		// A weigher listed twice would weigh twice, which its multiplier
		// says better; the ranked walk's bound counts each weigher once.
		if slices.Contains(c.Weighers[:i], w) {
			return fmt.Errorf("weighers: %s is listed twice (raise its multiplier instead)", w)
		}
	}
	names := slices.Collect(maps.Keys(c.Options))
	sort.Strings(names)
	for _, name := range names {
		o, ok := LookupOption(name)
		if !ok {
			return fmt.Errorf("unknown scheduler option %q", name)
		}
		if err := o.check(c.Options[name]); err != nil {
			return err
		}
	}
	if c.HostSubsetSize < 1 {
		return fmt.Errorf("host_subset_size must be at least 1, got %d", c.HostSubsetSize)
	}
	for _, w := range c.Metrics.WeightSetting {
		if w.Name == "" || math.IsNaN(w.Ratio) || math.IsInf(w.Ratio, 0) {
			return fmt.Errorf("[metrics] weight_setting: invalid item %s=%v", w.Name, w.Ratio)
		}
	}
	if math.IsNaN(c.Metrics.WeightOfUnavailable) || math.IsInf(c.Metrics.WeightOfUnavailable, 0) {
		return fmt.Errorf("[metrics] weight_of_unavailable must be a finite number, got %v", c.Metrics.WeightOfUnavailable)
	}
	if c.Metrics.MaxAge < 0 {
		return fmt.Errorf("[metrics] max_age must not be negative, got %v", c.Metrics.MaxAge)
	}
	if c.MaxAttempts < 1 {
		return fmt.Errorf("max_attempts must be at least 1, got %d", c.MaxAttempts)
	}
	return nil
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }
