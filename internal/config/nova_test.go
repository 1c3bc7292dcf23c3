package config

import (
	"slices"
	"testing"
)

// TestParseNovaDefaultFilters: a nova.conf that does not set
// enabled_filters runs Nova 26's default filters, without keel's
// AvailabilityZoneFilter; one that sets them runs those.
func TestParseNovaDefaultFilters(t *testing.T) {
	cfg, _, err := ParseNova("nova.conf", []byte("[filter_scheduler]\nhost_subset_size = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.SchedulerConfig().EnabledFilters; !slices.Equal(got, NovaDefaultFilters) || slices.Contains(got, "AvailabilityZoneFilter") {
		t.Errorf("enabled_filters %v, want Nova's defaults %v", got, NovaDefaultFilters)
	}
	if cfg.FilterScheduler.HostSubsetSize != 3 {
		t.Errorf("host_subset_size %d, want 3", cfg.FilterScheduler.HostSubsetSize)
	}
	cfg, _, err = ParseNova("nova.conf", []byte("[filter_scheduler]\nenabled_filters = ComputeFilter,AvailabilityZoneFilter\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.FilterScheduler.EnabledFilters; !slices.Equal(got, []string{"ComputeFilter", "AvailabilityZoneFilter"}) {
		t.Errorf("enabled_filters %v, want the file's", got)
	}
	if got := NovaDefaults().SchedulerConfig().EnabledFilters; !slices.Equal(got, NovaDefaultFilters) {
		t.Errorf("NovaDefaults' enabled_filters %v", got)
	}
}
