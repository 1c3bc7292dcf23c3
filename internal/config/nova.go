package config

import (
	"fmt"
	"slices"
	"strings"

	"keel/internal/scheduler"
	"keel/internal/sim/scenario"
)

// NovaDefaultFilters are Nova 26's (Zed's) default [filter_scheduler]
// enabled_filters. AvailabilityZoneFilter is not among them: since Xena,
// Nova checks zones in a Placement pre-filter
// ([scheduler] query_placement_for_availability_zone, default true).
// keel's own default adds it, as keel has no such pre-filter.
var NovaDefaultFilters = []string{"ComputeFilter", "ComputeCapabilitiesFilter", "ImagePropertiesFilter",
	"ServerGroupAntiAffinityFilter", "ServerGroupAffinityFilter"}

// NovaDefaults is a Nova cloud's configuration when its nova.conf is not
// given: keel's defaults, which are Nova's, but for enabled_filters,
// which are Nova's (NovaDefaultFilters).
func NovaDefaults() Config {
	cfg := Default()
	cfg.FilterScheduler.EnabledFilters = slices.Clone(NovaDefaultFilters)
	return cfg
}

// ParseNova parses a Nova cloud's own nova.conf for what its scheduler
// runs with, as keel sim export --nova-conf does: like Parse, except that
// a filter or weigher keel does not have is left out of enabled_filters
// or weight_classes with a warning naming it (Parse refuses it: keel's
// own configuration must name only what keel runs), and a file that does
// not set enabled_filters has Nova's default (NovaDefaultFilters), not
// keel's.
func ParseNova(name string, data []byte) (Config, []Warning, error) {
	var warns []Warning
	filtersSet := false
	lines := strings.Split(strings.TrimPrefix(string(data), "\uFEFF"), "\n")
	group := ""
	for i, line := range lines {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
			group = strings.ToLower(strings.TrimSpace(t[1 : len(t)-1]))
			continue
		}
		k, v, ok := strings.Cut(t, "=")
		if !ok || group != "filter_scheduler" || line != strings.TrimLeft(line, " \t") {
			continue
		}
		k = strings.TrimSpace(k)
		var known func(string) bool
		switch k {
		case "enabled_filters":
			filtersSet = true
			known = func(n string) bool { return slices.Contains(scheduler.KnownFilters, n) }
		case "weight_classes":
			known = func(n string) bool {
				return n == allWeighers || slices.Contains(scheduler.KnownWeighers, n[strings.LastIndexByte(n, '.')+1:])
			}
		default:
			continue
		}
		var kept []string
		for _, n := range parseList(v) {
			if known(n) {
				kept = append(kept, n)
				continue
			}
			warns = append(warns, Warning{File: name, Line: i + 1, Group: group, Option: k,
				Msg: fmt.Sprintf("%s is not one keel has: left out, so keel's prediction and choices do not apply it", n)})
		}
		lines[i] = k + " = " + strings.Join(kept, ",")
	}
	cfg, w, err := Parse(name, []byte(strings.Join(lines, "\n")))
	if err == nil && !filtersSet {
		cfg.FilterScheduler.EnabledFilters = slices.Clone(NovaDefaultFilters)
	}
	return cfg, append(warns, w...), err
}

// SnapshotCompute is the compute options in the simulator's terms (0
// concurrent live migrations, unlimited in Nova, is the simulator's
// largest).
func (c Config) SnapshotCompute() scenario.SnapshotCompute {
	d := c.Default
	conc := d.MaxConcurrentLiveMigrations
	if conc <= 0 {
		conc = scenario.MaxConcurrent
	}
	return scenario.SnapshotCompute{
		UpdateResourcesInterval:     d.UpdateResourcesInterval,
		MigrationBandwidthMiBps:     float64(c.Libvirt.LiveMigrationBandwidth),
		MaxConcurrentLiveMigrations: conc,
		ReportInterval:              d.ReportInterval.Seconds(),
		SpawnSeconds:                c.Keel.FakeSpawnTime.Seconds(),
	}
}
