package scenario

import (
	"fmt"
	"strconv"
	"strings"

	"keel/internal/scheduler"
	"keel/internal/suggest"
)

// Set changes one option of a parsed scenario, by its nova.conf name
// (group.option: filter_scheduler.host_subset_size, scheduler.max_attempts,
// DEFAULT.update_resources_interval, libvirt.live_migration_bandwidth, …)
// or by its path in the file (scheduler.host_subset_size,
// compute.update_resources_interval, seed, duration). Lists are
// comma-separated. Call Validate afterwards.
func (s *Scenario) Set(key, value string) error {
	group, name, ok := strings.Cut(key, ".")
	if !ok {
		group, name = "", key
	}
	sc, cp := &s.Scheduler, &s.Compute
	bad := func(err error) error { return fmt.Errorf("--set %s=%s: %w", key, value, err) }
	setInt := func(p *int) error {
		n, err := strconv.Atoi(value)
		if err != nil {
			return bad(fmt.Errorf("want an integer"))
		}
		*p = n
		return nil
	}
	setFloat := func(p *float64) error {
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return bad(fmt.Errorf("want a number"))
		}
		*p = f
		return nil
	}
	list := func() []string {
		var out []string
		for _, v := range strings.Split(value, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	switch strings.ToLower(group) {
	case "":
		switch name {
		case "seed":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return bad(fmt.Errorf("want an integer"))
			}
			s.Seed = n
			return nil
		case "duration":
			return setFloat(&s.Duration)
		}
	case "filter_scheduler", "scheduler":
		switch name {
		case "host_subset_size":
			return setInt(&sc.HostSubsetSize)
		case "max_attempts":
			return setInt(&sc.MaxAttempts)
		case "shuffle_best_same_weighed_hosts":
			b, err := strconv.ParseBool(value)
			if err != nil {
				return bad(fmt.Errorf("want true or false"))
			}
			sc.ShuffleBestSameWeighedHosts = b
			return nil
		case "enabled_filters":
			sc.EnabledFilters = list()
			return nil
		case "weight_classes", "weighers":
			sc.Weighers = list()
			return nil
		case "service_down_time":
			var v float64
			if err := setFloat(&v); err != nil {
				return err
			}
			sc.ServiceDownTime = &v
			return nil
		}
		if _, ok := scheduler.LookupOption(name); ok {
			var v float64
			if err := setFloat(&v); err != nil {
				return err
			}
			if sc.Options == nil {
				sc.Options = map[string]float64{}
			}
			sc.Options[name] = v
			return nil
		}
	case "default", "compute", "libvirt":
		switch name {
		case "service_down_time":
			return s.Set("scheduler.service_down_time", value)
		case "update_resources_interval":
			return setInt(&cp.UpdateResourcesInterval)
		case "reserved_host_memory_mb":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return bad(fmt.Errorf("want an integer"))
			}
			cp.ReservedHostMemoryMB = &n
			return nil
		case "reserved_host_disk_mb":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return bad(fmt.Errorf("want an integer"))
			}
			cp.ReservedHostDiskMB = n
			return nil
		case "max_concurrent_live_migrations":
			return setInt(&cp.MaxConcurrentLiveMigrations)
		case "report_interval":
			var v float64
			if err := setFloat(&v); err != nil {
				return err
			}
			cp.ReportInterval = &v
			return nil
		case "spawn_seconds":
			return setFloat(&cp.SpawnSeconds)
		case "migration_bandwidth_mib_s", "live_migration_bandwidth":
			return setFloat(&cp.MigrationBandwidthMiBps)
		}
	}
	if best := suggest.Closest(key, setKeys()); best != "" {
		return fmt.Errorf("--set %s: unknown option; did you mean %s?", key, best)
	}
	return fmt.Errorf("--set %s: unknown option (the scheduler's and compute options by their nova.conf names, e.g. filter_scheduler.host_subset_size, DEFAULT.update_resources_interval; or seed, duration)", key)
}

// setKeys are the keys Set takes, by their nova.conf names, for its "did
// you mean".
func setKeys() []string {
	keys := []string{"seed", "duration",
		"filter_scheduler.host_subset_size", "filter_scheduler.max_attempts", "filter_scheduler.shuffle_best_same_weighed_hosts",
		"filter_scheduler.enabled_filters", "filter_scheduler.weight_classes", "DEFAULT.service_down_time",
		"DEFAULT.update_resources_interval", "DEFAULT.reserved_host_memory_mb", "DEFAULT.reserved_host_disk_mb",
		"DEFAULT.max_concurrent_live_migrations", "DEFAULT.report_interval", "compute.spawn_seconds",
		"libvirt.live_migration_bandwidth"}
	for _, o := range append(scheduler.FilterOptions(), scheduler.WeigherOptions()...) {
		keys = append(keys, "filter_scheduler."+o.Name)
	}
	// The same by their paths in the file.
	for _, k := range keys {
		if name, ok := strings.CutPrefix(k, "filter_scheduler."); ok {
			keys = append(keys, "scheduler."+name)
		} else if name, ok := strings.CutPrefix(k, "DEFAULT."); ok {
			keys = append(keys, "compute."+name)
		}
	}
	return keys
}
