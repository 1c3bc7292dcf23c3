package bench

import (
	"context"
	"fmt"
	"time"

	"keel/internal/compute"
)

// MetricsCost is what the metrics section measured: the keel server
// process's CPU while N agents report measured usage on keel's default
// cadence, and while the same agents report none, in alternating periods.
type MetricsCost struct {
	Hosts   int     `json:"hosts"`
	PeriodS float64 `json:"period_s"`
	// OnCores and OffCores are the server's user + system CPU, in cores,
	// of each period with the reports on and off.
	OnCores  []float64 `json:"on_cores"`
	OffCores []float64 `json:"off_cores"`
	// ReportsPerS are the reports the agents wrote per second while on.
	ReportsPerS float64 `json:"reports_per_s"`
	// Share is the mean on less the mean off: the reports' share of one
	// core; PerReportUS the same per report, in µs of server CPU.
	Share       float64 `json:"share_of_core"`
	PerReportUS float64 `json:"per_report_us"`
	Load1       float64 `json:"load1"`
}

// metricsCost runs the metrics section (issue 28's cost goal: measured
// usage from 1,000 hosts every 10 s costs the server ≤ 2 % of a core): a
// real `keel server` process, N fleet agents in this process reporting
// measured usage every [metrics] report_interval (10 s, the default;
// sampled every 2 s), the server's CPU read over periods with the
// agents' reporters running and stopped, in turn, so heartbeats and
// audits weigh the same in both.
func (r *run) metricsCost(ctx context.Context) error {
	hosts := r.size(1000, 12)
	if len(r.opts.FleetSteps) > 0 {
		hosts = r.opts.FleetSteps[0]
	}
	period := 30 * time.Second
	plan := fleetPlanFor(r.opts)
	if r.opts.Quick {
		period = 4 * time.Second
	}
	if r.opts.FleetPeriod > 0 {
		period = r.opts.FleetPeriod
	}
	g, stop, err := startFleet(ctx, "keelbench-metrics-", plan, fleetShape{Replicas: 1})
	if err != nil {
		return err
	}
	defer stop()
	srv := g.srv
	g.metrics = compute.DefaultMetricsConfig()
	if r.opts.Quick {
		g.metrics.Interval, g.metrics.Sample = time.Second, time.Second
	}
	t0 := time.Now()
	if err := g.addAgents(ctx, hosts); err != nil {
		return err
	}
	r.progress("metrics: %d agents running (%.1f s to start); %s periods, reports on and off in turn", hosts, time.Since(t0).Seconds(), period)
	reports := func() int {
		n := 0
		for _, a := range g.agents {
			_, w := a.Manager().MetricsReports()
			n += w
		}
		return n
	}
	mc := MetricsCost{Hosts: hosts, PeriodS: period.Seconds()}
	pid := srv.cmd.Process.Pid
	var onReports int
	var onSeconds float64
	for i := 0; i < 4; i++ {
		on := i%2 == 0
		for _, a := range g.agents {
			if on {
				a.Manager().StartMetrics(ctx)
			} else {
				a.Manager().StopMetrics()
			}
		}
		// The first reports after a start, and the last in flight at a
		// stop, settle before the period starts.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
		cpu0, err := procCPU(pid)
		if err != nil {
			return err
		}
		n0, w0 := reports(), time.Now()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(period):
		}
		cpu1, err := procCPU(pid)
		if err != nil {
			return err
		}
		wall := time.Since(w0).Seconds()
		cores := (cpu1 - cpu0).Seconds() / wall
		if on {
			mc.OnCores = append(mc.OnCores, cores)
			onReports += reports() - n0
			onSeconds += wall
		} else {
			mc.OffCores = append(mc.OffCores, cores)
		}
		r.progress("metrics: period %d, reports %s: server %.4f cores (load %.1f)", i+1, map[bool]string{true: "on", false: "off"}[on], cores, loadAverage())
	}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	mc.ReportsPerS = float64(onReports) / onSeconds
	mc.Share = mean(mc.OnCores) - mean(mc.OffCores)
	if mc.ReportsPerS > 0 {
		mc.PerReportUS = mc.Share / mc.ReportsPerS * 1e6
	}
	mc.Load1 = loadAverage()
	r.rep.Metrics = &mc
	r.figure("metrics_reports_share_of_core", mc.Share)
	r.figure("metrics_report_server_us", mc.PerReportUS)
	result := fmt.Sprintf("%.2f %% of one core (%.0f reports/s, %.0f µs of server CPU each); server %.3f cores with them, %.3f without",
		100*mc.Share, mc.ReportsPerS, mc.PerReportUS, mean(mc.OnCores), mean(mc.OffCores))
	cond := fmt.Sprintf("one `keel server` process (SQLite, embedded NATS); %s fleet agents (fake driver, no guests: 6 host metrics a report) in the generator, [metrics] report_interval %s, sample_interval %s; "+
		"4 periods of %s, reports on and off in turn (heartbeats every %s, audits every %s in all); the difference of the means is the reports' cost; load %.1f; ",
		commas(int64(hosts)), g.metrics.Interval, g.metrics.Sample, period, plan.Report, plan.Audit, mc.Load1)
	r.row("8", "measured-usage reports' cost on the server", result, cond+r.goal("metrics_reports_share_of_core", mc.Share <= 0.02, "1,000 hosts reporting every 10 s cost ≤ 2 % of a core"))
	return nil
}
