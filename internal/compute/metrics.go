package compute

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"keel/internal/records"
)

// Measured usage: what a host's guests really use, as the driver measures
// it, reported by the agent on its own cadence — never tied to the
// periodic audit (update_resources_interval) — and stored in the host
// record under Nova's compute_nodes.metrics names.

// Measurement is one reading of a host and its guests.
type Measurement struct {
	// At is when it was measured.
	At time.Time
	// Host are the host's metrics (records.MetricNames, then
	// records.MemoryMetricNames); a metric the
	// driver cannot measure is left out (unavailable), never zero.
	Host []records.Metric
	// Instances are the guests' usage, sorted by UUID.
	Instances []records.InstanceUsage
}

// Measurer is the part of Driver that measures what the guests use:
// fake.Driver (its workload models), qemu.Driver (the kernel's /proc) and
// libvirt.Driver (libvirtd's domain and node statistics).
type Measurer interface {
	// Measure reads the host and its guests now; ErrUnmeasured when it
	// cannot (the host's metrics are then unavailable).
	Measure(ctx context.Context) (Measurement, error)
}

// ErrUnmeasured is a driver's answer when it cannot measure.
var ErrUnmeasured = errors.New("usage cannot be measured")

// CPUMetrics builds the host CPU metrics from fractions of the host's
// CPU time (user, kernel, idle, iowait; cpu.percent is the time neither
// idle nor waiting for I/O, user + kernel), as Nova's cpu.virt_driver
// monitor names and computes them. A frequency of 0 (the kernel does not
// say) leaves cpu.frequency out: unavailable, never zero.
func CPUMetrics(at time.Time, source string, freqMHz, user, kernel, idle, iowait float64) []records.Metric {
	clamp := func(v float64) float64 { return math.Min(math.Max(v, 0), 1) }
	m := func(name string, v float64) records.Metric {
		return records.Metric{Name: name, Value: v, Timestamp: at, Source: source}
	}
	var out []records.Metric
	if freqMHz > 0 {
		out = append(out, m(records.MetricCPUFrequency, freqMHz))
	}
	return append(out,
		m(records.MetricCPUUserPercent, clamp(user)),
		m(records.MetricCPUKernelPercent, clamp(kernel)),
		m(records.MetricCPUIdlePercent, clamp(idle)),
		m(records.MetricCPUIOWaitPercent, clamp(iowait)),
		m(records.MetricCPUPercent, clamp(1-idle-iowait)),
	)
}

// MemoryMetrics builds the host memory metrics (keel.memory.total and
// keel.memory.available, MiB) from what the kernel reports. A total of 0
// (the kernel's figures could not be read) leaves both out: unavailable,
// never zero. available is kept within 0…total.
func MemoryMetrics(at time.Time, source string, totalMB, availableMB int64) []records.Metric {
	if totalMB <= 0 {
		return nil
	}
	return []records.Metric{
		{Name: records.MetricMemoryTotal, Value: float64(totalMB), Timestamp: at, Source: source},
		{Name: records.MetricMemoryAvailable, Value: float64(min(max(availableMB, 0), totalMB)), Timestamp: at, Source: source},
	}
}

// CPUTimes are a host's cumulative CPU times as its kernel counts them,
// in any one unit (clock ticks from /proc/stat, nanoseconds from
// libvirt's virNodeGetCPUStats): user (with nice), kernel (system, irq,
// softirq), idle and iowait.
type CPUTimes struct {
	User, Kernel, Idle, IOWait uint64
}

// CPUMetricsBetween builds the host CPU metrics from two readings of its
// cumulative CPU times, as Nova's cpu.virt_driver monitor does from
// libvirt's: each share of the time that passed between them. ok is
// false when no CPU time passed (or the counters went back: a reboot).
func CPUMetricsBetween(at time.Time, source string, freqMHz float64, prev, cur CPUTimes) ([]records.Metric, bool) {
	if cur.User < prev.User || cur.Kernel < prev.Kernel || cur.Idle < prev.Idle || cur.IOWait < prev.IOWait {
		return nil, false
	}
	user, kernel := float64(cur.User-prev.User), float64(cur.Kernel-prev.Kernel)
	idle, iowait := float64(cur.Idle-prev.Idle), float64(cur.IOWait-prev.IOWait)
	total := user + kernel + idle + iowait
	if total <= 0 {
		return nil, false
	}
	return CPUMetrics(at, source, freqMHz, user/total, kernel/total, idle/total, iowait/total), true
}

// MetricsConfig is when an agent reports measured usage ([metrics]
// report_interval, sample_interval, report_threshold).
type MetricsConfig struct {
	// Interval is the cadence of the reports (default 10 s); negative:
	// none (only AtAudit and AfterMove report).
	Interval time.Duration
	// Sample is how often the driver is read between two reports, so a
	// change of cpu.percent by more than Threshold is reported at once
	// (0: every Interval ÷ 5; at least Interval: only at the cadence).
	Sample time.Duration
	// Threshold is the change of cpu.percent (a fraction) that is
	// reported at once (default 0.10).
	Threshold float64
	// AtAudit also measures at every periodic audit (Nova's
	// compute_monitors, which only the audit runs: the simulator's legacy
	// policy).
	AtAudit bool
	// AfterMove also measures on both hosts as soon as a live migration
	// lands (the simulator's dest-update policy).
	AfterMove bool
}

// DefaultMetricsConfig is keel's default: every 10 s, sampled every 2 s,
// and at once on a change of 10 points of cpu.percent.
func DefaultMetricsConfig() MetricsConfig {
	return MetricsConfig{Interval: 10 * time.Second, Sample: 2 * time.Second, Threshold: 0.10}
}

// metricsState is the manager's reporter: the last report's cpu.percent
// and time, and the timer of the next sample.
type metricsState struct {
	cfg      MetricsConfig
	lastCPU  float64
	hasLast  bool
	lastAt   time.Time
	timer    interface{ Stop() bool }
	stopped  bool
	reports  int
	measured int
	// heartbeat is the heartbeat's interval when the heartbeat carries
	// the cadence's reports (CarryMetricsOnHeartbeat); 0: the sampler
	// sends them itself.
	heartbeat time.Duration
}

// carried tells whether the heartbeat carries the cadence's reports: it
// was asked to, and the cadence is no shorter than the heartbeat's.
func (s *metricsState) carried() bool {
	return s.heartbeat > 0 && s.cfg.Interval >= s.heartbeat
}

// dueReport is the reporter's rule: report when nothing was reported yet,
// the cadence is due, availability changed, or cpu.percent moved by more
// than the threshold since the last report.
func dueReport(s *metricsState, m Measurement, available bool, now time.Time) bool {
	if !s.hasLast && s.reports == 0 {
		return true
	}
	if available != s.hasLast {
		return true
	}
	if s.cfg.Interval > 0 {
		due := s.cfg.Interval
		if s.carried() {
			// The heartbeat carries the cadence's reports; the sampler
			// sends one only when a heartbeat did not.
			due += s.heartbeat
		}
		if now.Sub(s.lastAt) >= due {
			return true
		}
	}
	if !available {
		return false
	}
	cpu, _ := metricValue(m.Host, records.MetricCPUPercent)
	return math.Abs(cpu-s.lastCPU) > s.cfg.Threshold
}

func metricValue(ms []records.Metric, name string) (float64, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// SetMetricsConfig sets when the manager reports measured usage; call it
// before StartMetrics.
func (m *Manager) SetMetricsConfig(c MetricsConfig) {
	m.metricsMu.Lock()
	defer m.metricsMu.Unlock()
	m.metrics.cfg = c
}

// CarryMetricsOnHeartbeat makes the heartbeat, sent every interval
// (report_interval), carry the cadence's reports (Heartbeat): one message
// a host and interval instead of two. The sampler still reports at once a
// change past the threshold or of availability. It has no effect when the
// cadence is shorter than interval, or reports are off. Call it before
// StartMetrics.
func (m *Manager) CarryMetricsOnHeartbeat(interval time.Duration) {
	m.metricsMu.Lock()
	defer m.metricsMu.Unlock()
	m.metrics.heartbeat = max(interval, 0)
}

// measure reads the driver now; a driver that cannot measure makes the
// metrics unavailable (an empty measurement, available false).
func (m *Manager) measure(ctx context.Context) (Measurement, bool) {
	meas, err := m.driver.Measure(ctx)
	if err != nil && !errors.Is(err, ErrUnmeasured) {
		m.log.Warn("measuring usage failed: metrics unavailable", "err", err)
	}
	if err != nil {
		return Measurement{At: m.clock.Now()}, false
	}
	return meas, true
}

// noteReportLocked records that meas is reported (metricsMu held).
func (s *metricsState) noteReportLocked(meas Measurement, available bool, now time.Time) {
	s.lastCPU, _ = metricValue(meas.Host, records.MetricCPUPercent)
	s.hasLast, s.lastAt = available, now
	s.reports++
}

// ReportMetrics measures now and writes the host's metrics when the
// reporting rule says so (or always, with force); it reports whether it
// wrote. A driver that cannot measure makes the metrics unavailable.
func (m *Manager) ReportMetrics(ctx context.Context, force bool) (bool, error) {
	meas, available := m.measure(ctx)
	now := m.clock.Now()
	m.metricsMu.Lock()
	s := &m.metrics
	s.measured++
	if !force && !dueReport(s, meas, available, now) {
		m.metricsMu.Unlock()
		return false, nil
	}
	s.noteReportLocked(meas, available, now)
	m.metricsMu.Unlock()
	if err := m.tracker.WriteMetrics(ctx, meas); err != nil {
		return false, err
	}
	return true, nil
}

// HeartbeatSender sends one heartbeat, carrying rec (nil: no report is
// due), and tells whether the server took the record: an older server
// takes the heartbeat and ignores the record (false, nil).
type HeartbeatSender func(ctx context.Context, rec *records.HostRecord) (recordTaken bool, err error)

// Heartbeat sends one heartbeat through send and, when the heartbeat
// carries the cadence's reports (CarryMetricsOnHeartbeat) and one is due
// (the last report is at least the cadence less half a heartbeat old),
// measures now and gives send the host record with the measurement, as
// WriteMetrics would write it. A server that took the heartbeat but not
// the record (an older one) gets the record in a call of its own. The
// error is the heartbeat's (store.ErrNotFound: the host's service is
// gone); a record not written is logged, as a failed report is.
func (m *Manager) Heartbeat(ctx context.Context, send HeartbeatSender) error {
	m.metricsMu.Lock()
	s := &m.metrics
	carry := s.carried() && !s.stopped && m.clock.Now().Sub(s.lastAt) >= s.cfg.Interval-s.heartbeat/2
	m.metricsMu.Unlock()
	if !carry {
		_, err := send(ctx, nil)
		return err
	}
	meas, available := m.measure(ctx)
	m.metricsMu.Lock()
	m.metrics.measured++
	m.metrics.noteReportLocked(meas, available, m.clock.Now())
	m.metricsMu.Unlock()
	var beatErr error
	err := m.tracker.writeMetrics(ctx, meas, func(ctx context.Context, rec records.HostRecord) error {
		var taken bool
		taken, beatErr = send(ctx, &rec)
		if beatErr != nil || taken {
			return beatErr
		}
		return m.tracker.store.PutHostRecord(ctx, rec)
	})
	if beatErr != nil {
		return beatErr
	}
	if err != nil {
		// The heartbeat was taken: only the measurement is late, as when
		// a report of its own fails.
		m.log.Warn("reporting measured usage failed", "err", err)
	}
	return nil
}

// StartMetrics reads the driver every sample interval and reports on the
// cadence and on large changes (MetricsConfig), on the manager's clock.
func (m *Manager) StartMetrics(ctx context.Context) {
	m.metricsMu.Lock()
	defer m.metricsMu.Unlock()
	c := m.metrics.cfg
	if c.Interval < 0 {
		return
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	every := c.Sample
	if every <= 0 {
		every = c.Interval / 5
	}
	if every <= 0 || every > c.Interval {
		every = c.Interval
	}
	if c.Threshold <= 0 {
		c.Threshold = 0.10
	}
	m.metrics.cfg, m.metrics.stopped = c, false
	var run func()
	run = func() {
		if ctx.Err() != nil {
			return
		}
		if _, err := m.ReportMetrics(ctx, false); err != nil {
			m.log.Warn("reporting measured usage failed", "err", err)
		}
		m.metricsMu.Lock()
		defer m.metricsMu.Unlock()
		if !m.metrics.stopped {
			m.metrics.timer = m.clock.AfterFunc(every, run)
		}
	}
	m.metrics.timer = m.clock.AfterFunc(0, run)
}

// StopMetrics stops the reports StartMetrics started.
func (m *Manager) StopMetrics() {
	m.metricsMu.Lock()
	defer m.metricsMu.Unlock()
	m.metrics.stopped = true
	if m.metrics.timer != nil {
		m.metrics.timer.Stop()
	}
}

// MetricsReports returns how many times the manager measured and how many
// reports it wrote.
func (m *Manager) MetricsReports() (measured, reports int) {
	m.metricsMu.Lock()
	defer m.metricsMu.Unlock()
	return m.metrics.measured, m.metrics.reports
}

// reportAfter measures after a step when the configuration asks for it
// (AtAudit, AfterMove).
func (m *Manager) reportAfter(ctx context.Context, audit bool) {
	m.metricsMu.Lock()
	c := m.metrics.cfg
	m.metricsMu.Unlock()
	if (audit && c.AtAudit) || (!audit && c.AfterMove) {
		if _, err := m.ReportMetrics(ctx, true); err != nil {
			m.log.Warn("reporting measured usage failed", "err", err)
		}
	}
}

// WriteMetrics writes a measurement into the host record: the record the
// tracker last wrote, with its metrics and instance usage replaced, so a
// report never changes the usage the record shows (under the legacy
// policy that changes only at a spawn or an audit).
func (t *Tracker) WriteMetrics(ctx context.Context, m Measurement) error {
	return t.writeMetrics(ctx, m, t.store.PutHostRecord)
}

// writeMetrics is WriteMetrics with put writing the record.
func (t *Tracker) writeMetrics(ctx context.Context, m Measurement, put func(context.Context, records.HostRecord) error) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	t.mu.Lock()
	t.metrics, t.usage = m.Host, m.Instances
	rec := t.record
	if rec.Host == "" {
		rec = t.computeLocked()
	}
	rec.Metrics, rec.InstanceUsage = m.Host, m.Instances
	t.record = rec
	t.mu.Unlock()
	if err := put(ctx, rec); err != nil {
		return fmt.Errorf("writing the measured usage of %s: %w", t.cfg.Host, err)
	}
	return nil
}
