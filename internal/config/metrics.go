package config

import (
	"fmt"
	"slices"
	"strings"

	"keel/internal/records"
	"keel/internal/scheduler"
)

// DriverMetrics lists, for each [keel] driver, the metrics its agents
// report: every name of records.MetricNames and records.MemoryMetricNames
// for all three — the fake driver from its guests' workload models, the
// qemu driver from the kernel's /proc/stat and /proc/meminfo
// (cpu.frequency from /proc/cpuinfo, where the kernel gives it), the
// libvirt driver from libvirtd's virNodeGetCPUStats and
// virNodeGetMemoryStats. TestDriverMetricsMatchTheDrivers keeps this
// true.
var DriverMetrics = map[string][]string{
	"fake":    allMetricNames,
	"qemu":    allMetricNames,
	"libvirt": allMetricNames,
}

var allMetricNames = slices.Concat(records.MetricNames, records.MemoryMetricNames)

// CheckMetrics checks [metrics] weight_setting against what the agents of
// this configuration ([keel] driver, [metrics] report_interval) can
// report, when MetricsWeigher (in weight_classes) or MetricFilter (in
// enabled_filters) reads it. A metric no host will report is an error
// when it would fail every decision — required = true under
// MetricsWeigher, or MetricFilter enabled (it would reject every host) —
// and a warning otherwise (every host weighs weight_of_unavailable for
// it). The error is a *Error naming where weight_setting was set.
func (c Config) CheckMetrics() (warnings []string, err error) {
	ws, _ := scheduler.ParseWeightSetting(c.Metrics.WeightSetting) // Set checked every item
	weigher := slices.Contains(c.FilterScheduler.WeightClasses, "MetricsWeigher")
	filter := slices.Contains(c.FilterScheduler.EnabledFilters, "MetricFilter")
	if len(ws) == 0 || (!weigher && !filter) {
		return nil, nil
	}
	driver := c.Keel.Driver
	if driver == "" {
		driver = "fake"
	}
	reported, known := DriverMetrics[driver]
	var missing []string
	for _, w := range ws {
		if (c.Metrics.ReportInterval <= 0 || !slices.Contains(reported, w.Name)) && !slices.Contains(missing, w.Name) {
			missing = append(missing, w.Name)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	var why string
	switch {
	case c.Metrics.ReportInterval <= 0:
		why = "[metrics] report_interval = 0 turns the agents' reports off"
	case !known:
		why = fmt.Sprintf("[keel] driver = %s reports no metrics", driver)
	case len(reported) == 0:
		why = fmt.Sprintf("[keel] driver = %s cannot measure its guests yet: its hosts report no metrics", driver)
	default:
		why = fmt.Sprintf("[keel] driver = %s reports %s", driver, strings.Join(reported, ", "))
	}
	what := fmt.Sprintf("no host will report %s (%s)", strings.Join(missing, ", "), why)
	origin := c.Origin("metrics", "weight_setting")
	fail := func(msg string) error {
		return &Error{File: origin.File, Line: origin.Line, Group: "metrics", Option: "weight_setting", Msg: msg}
	}
	switch {
	case weigher && c.Metrics.Required:
		return nil, fail(what + ": with [metrics] required = true every scheduling decision would fail with no valid host. " +
			"Remove it from weight_setting, or set [metrics] required = false to weigh such hosts weight_of_unavailable")
	case filter:
		return nil, fail(what + ": MetricFilter (in [filter_scheduler] enabled_filters) would reject every host. " +
			"Remove it from weight_setting, or MetricFilter from enabled_filters")
	}
	return []string{"[metrics] weight_setting: " + what + fmt.Sprintf(": every host weighs weight_of_unavailable (%g) for it, so MetricsWeigher ranks no host by it", c.Metrics.WeightOfUnavailable)}, nil
}
