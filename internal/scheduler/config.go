package scheduler

import (
	"fmt"
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
	// MaxAttempts is [scheduler] max_attempts: claims tried per decision
	// (default 3).
	MaxAttempts int

	RAMWeightMultiplier              float64 // default 1.0
	CPUWeightMultiplier              float64 // default 1.0
	DiskWeightMultiplier             float64 // default 1.0
	IOOpsWeightMultiplier            float64 // default -1.0
	BuildFailureWeightMultiplier     float64 // default 1000000.0
	NumInstancesWeightMultiplier     float64 // default 0.0
	SoftAffinityWeightMultiplier     float64 // default 1.0
	SoftAntiAffinityWeightMultiplier float64 // default 1.0

	// MaxInstancesPerHost is NumInstancesFilter's limit (default 50).
	MaxInstancesPerHost int
	// MaxIOOpsPerHost is IoOpsFilter's limit (default 8).
	MaxIOOpsPerHost int
	// ServiceDownTime is [DEFAULT] service_down_time (default 60 s): a host
	// whose service has not reported for longer is down. Zero disables the
	// liveness check (the simulator's hosts never miss a heartbeat).
	ServiceDownTime time.Duration
}

// Filter names keel implements. ResourceFilter is always applied first and
// need not be listed.
var KnownFilters = []string{
	"ComputeFilter", "AvailabilityZoneFilter", "ComputeCapabilitiesFilter",
	"ImagePropertiesFilter", "ServerGroupAntiAffinityFilter",
	"ServerGroupAffinityFilter", "SameHostFilter", "DifferentHostFilter",
	"AggregateInstanceExtraSpecsFilter", "NumInstancesFilter", "IoOpsFilter",
	"ResourceFilter",
}

// KnownWeighers are the weigher names keel implements.
var KnownWeighers = []string{
	"RAMWeigher", "CPUWeigher", "DiskWeigher", "IoOpsWeigher",
	"BuildFailureWeigher", "NumInstancesWeigher",
	"ServerGroupSoftAffinityWeigher", "ServerGroupSoftAntiAffinityWeigher",
}

// DefaultConfig returns Nova's defaults, with AvailabilityZoneFilter added
// to the default filters (Nova does that step in a Placement pre-filter
// keel does not have).
func DefaultConfig() Config {
	return Config{
		EnabledFilters: []string{
			"ComputeFilter", "AvailabilityZoneFilter", "ComputeCapabilitiesFilter",
			"ImagePropertiesFilter", "ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter",
		},
		Weighers:                         append([]string(nil), KnownWeighers...),
		HostSubsetSize:                   1,
		MaxAttempts:                      3,
		RAMWeightMultiplier:              1.0,
		CPUWeightMultiplier:              1.0,
		DiskWeightMultiplier:             1.0,
		IOOpsWeightMultiplier:            -1.0,
		BuildFailureWeightMultiplier:     1000000.0,
		NumInstancesWeightMultiplier:     0.0,
		SoftAffinityWeightMultiplier:     1.0,
		SoftAntiAffinityWeightMultiplier: 1.0,
		MaxInstancesPerHost:              50,
		MaxIOOpsPerHost:                  8,
		ServiceDownTime:                  60 * time.Second,
	}
}

// Validate checks names and ranges.
func (c Config) Validate() error {
	for _, f := range c.EnabledFilters {
		if !contains(KnownFilters, f) {
			return fmt.Errorf("enabled_filters: unknown filter %q (known: %v)", f, KnownFilters)
		}
	}
	for _, w := range c.Weighers {
		if !contains(KnownWeighers, w) {
			return fmt.Errorf("weighers: unknown weigher %q (known: %v)", w, KnownWeighers)
		}
	}
	if c.HostSubsetSize < 1 {
		return fmt.Errorf("host_subset_size must be at least 1, got %d", c.HostSubsetSize)
	}
	if c.MaxAttempts < 1 {
		return fmt.Errorf("max_attempts must be at least 1, got %d", c.MaxAttempts)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
