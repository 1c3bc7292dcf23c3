package compute_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"keel/internal/clock"
	"keel/internal/compute"
	"keel/internal/compute/fake"
	"keel/internal/records"
	"keel/internal/store/memory"
)

// TestMetricsCadence: the agent reports its measured usage every
// report_interval on the manager's clock, at once (at the next sample)
// when cpu.percent moves by more than the threshold, never between
// otherwise; a report never changes the usage the record shows; a driver
// that cannot measure makes the metrics unavailable (absent), never 0.
func TestMetricsCadence(t *testing.T) {
	clk := clock.NewVirtual(clock.Epoch)
	st := memory.New()
	cfg := compute.HostConfig{Host: "h1", ProviderUUID: "rp-h1", VCPUs: 8, MemoryMB: 16384, LocalGB: 100}
	drv, err := fake.New(fake.Config{Clock: clk, HostCPUs: 8, Workload: "bursty cpu=0 peak=4 every=60s for=20s chance=1"})
	if err != nil {
		t.Fatal(err)
	}
	drv.AddGuest(compute.Guest{UUID: "vm", Flavor: records.Flavor{Name: "f", VCPUs: 4, RAMMB: 1024}, State: compute.GuestRunning})
	tr := compute.NewTracker(cfg, st, drv, clk)
	tr.Track("vm", records.Flavor{VCPUs: 4, RAMMB: 1024})
	if err := tr.WriteRecord(ctx); err != nil {
		t.Fatal(err)
	}
	m := compute.NewManager("h1", drv, tr, nil, nil, clk, nil)
	m.SetMetricsConfig(compute.MetricsConfig{Interval: 10 * time.Second, Sample: 2 * time.Second, Threshold: 0.10})
	m.StartMetrics(ctx)
	defer m.StopMetrics()

	var reportsAt []int
	last := time.Time{}
	var cpus []float64
	for s := 0; s <= 120; s++ {
		clk.Advance(time.Second)
		rec, err := st.GetHostRecord(ctx, "h1")
		if err != nil {
			t.Fatal(err)
		}
		if rec.VCPUsUsed != 4 || rec.RunningVMs != 1 {
			t.Fatalf("a metrics report changed the record's usage: %+v", rec)
		}
		if mt, ok := rec.Metric(records.MetricCPUPercent); ok && mt.Timestamp != last {
			last = mt.Timestamp
			reportsAt = append(reportsAt, int(mt.Timestamp.Sub(clock.Epoch)/time.Second))
			cpus = append(cpus, mt.Value)
			if len(rec.InstanceUsage) != 1 || rec.InstanceUsage[0].UUID != "vm" || rec.InstanceUsage[0].MemoryMB != 512 {
				t.Errorf("instance usage %+v", rec.InstanceUsage)
			}
		}
	}
	// The burst's start within each minute comes from the seed; between
	// reports at most report_interval passes, and a burst (0 → 50 %) or
	// its end is reported at the first sample that sees it.
	for i := 1; i < len(reportsAt); i++ {
		gap := reportsAt[i] - reportsAt[i-1]
		if gap > 10 || gap < 2 {
			t.Errorf("reports at %v s: a gap of %d s", reportsAt, gap)
		}
		if gap < 10 && cpus[i] == cpus[i-1] {
			t.Errorf("an early report (after %d s) without a change: %v at %v", gap, cpus, reportsAt)
		}
	}
	changes := 0
	for i := 1; i < len(cpus); i++ {
		if cpus[i] != cpus[i-1] {
			changes++
		}
	}
	if changes < 3 {
		t.Errorf("two minutes of 20 s bursts seen as %d changes: %v at %v", changes, cpus, reportsAt)
	}

	// A driver that cannot measure (no HostCPUs): unavailable, not 0.
	blind, _ := fake.New(fake.Config{Clock: clk})
	m2 := compute.NewManager("h1", blind, tr, nil, nil, clk, nil)
	if _, err := m2.ReportMetrics(ctx, true); err != nil {
		t.Fatal(err)
	}
	rec, _ := st.GetHostRecord(ctx, "h1")
	if len(rec.Metrics) != 0 || len(rec.InstanceUsage) != 0 {
		t.Errorf("unmeasurable host reported %+v", rec.Metrics)
	}
}

// TestFakeHostMemory: the fake driver reports the host's memory as a
// kernel would — keel.memory.total its memory, keel.memory.available what
// its guests' workload models do not touch (a paused guest's memory stays
// touched), after Nova's CPU metrics — and leaves both out (unavailable,
// never 0) when it is given no memory.
func TestFakeHostMemory(t *testing.T) {
	clk := clock.NewVirtual(clock.Epoch)
	drv, err := fake.New(fake.Config{Clock: clk, HostCPUs: 8, HostMemoryMB: 16384, Workload: "constant cpu=1 mem=1000"})
	if err != nil {
		t.Fatal(err)
	}
	drv.AddGuest(compute.Guest{UUID: "a", Flavor: records.Flavor{Name: "f", VCPUs: 2, RAMMB: 2048}, State: compute.GuestRunning})
	drv.AddGuest(compute.Guest{UUID: "b", Flavor: records.Flavor{Name: "f", VCPUs: 2, RAMMB: 2048}, State: compute.GuestPaused})
	drv.AddGuest(compute.Guest{UUID: "c", Flavor: records.Flavor{Name: "f", VCPUs: 2, RAMMB: 2048}, State: compute.GuestStopped})
	m, err := drv.Measure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range m.Host {
		names = append(names, x.Name)
	}
	if want := append(append([]string{}, records.MetricNames...), records.MemoryMetricNames...); !slices.Equal(names, want) {
		t.Errorf("host metrics %v, want %v", names, want)
	}
	total, _ := metricIn(m.Host, records.MetricMemoryTotal)
	avail, _ := metricIn(m.Host, records.MetricMemoryAvailable)
	if total != 16384 || avail != 16384-2*1000 {
		t.Errorf("keel.memory.total %v, available %v: want 16384 and 16384 − 2 × 1000 (the running and the paused guest)", total, avail)
	}

	// MemoryMB (the spawn limit) stands in for HostMemoryMB.
	drv2, _ := fake.New(fake.Config{Clock: clk, HostCPUs: 8, MemoryMB: 4096})
	m, _ = drv2.Measure(ctx)
	if total, ok := metricIn(m.Host, records.MetricMemoryTotal); !ok || total != 4096 {
		t.Errorf("keel.memory.total with MemoryMB 4096: %v %v", total, ok)
	}

	// No memory given: the CPU is measured, the memory unavailable.
	drv3, _ := fake.New(fake.Config{Clock: clk, HostCPUs: 8})
	m, _ = drv3.Measure(ctx)
	for _, name := range records.MemoryMetricNames {
		if v, ok := metricIn(m.Host, name); ok {
			t.Errorf("a host without memory reported %s = %v: want it unavailable", name, v)
		}
	}
	if _, ok := metricIn(m.Host, records.MetricCPUPercent); !ok {
		t.Error("cpu.percent unavailable on a host without memory")
	}
}

func metricIn(ms []records.Metric, name string) (float64, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// TestHeartbeatCarriesReports: with the heartbeat carrying the cadence's
// reports, the sampler leaves them to it (it reports on the cadence only
// when no heartbeat carried one for a heartbeat interval more); a
// heartbeat due a report hands the host record, measured now, to its
// sender; and a server that takes the heartbeat but not the record (one
// from before heartbeats carried records) gets it in a put_host_record of
// its own.
func TestHeartbeatCarriesReports(t *testing.T) {
	clk := clock.NewVirtual(clock.Epoch)
	st := memory.New()
	cfg := compute.HostConfig{Host: "h1", ProviderUUID: "rp-h1", VCPUs: 8, MemoryMB: 16384, LocalGB: 100}
	drv, err := fake.New(fake.Config{Clock: clk, HostCPUs: 8})
	if err != nil {
		t.Fatal(err)
	}
	tr := compute.NewTracker(cfg, st, drv, clk)
	if err := tr.WriteRecord(ctx); err != nil {
		t.Fatal(err)
	}
	m := compute.NewManager("h1", drv, tr, nil, nil, clk, nil)
	m.SetMetricsConfig(compute.MetricsConfig{Interval: 10 * time.Second, Sample: 2 * time.Second, Threshold: 0.10})
	m.CarryMetricsOnHeartbeat(10 * time.Second)
	m.StartMetrics(ctx)
	defer m.StopMetrics()
	clk.Advance(0) // the first report, at once
	if _, reports := m.MetricsReports(); reports != 1 {
		t.Fatalf("%d reports at the start, want 1", reports)
	}
	// 18 s without a heartbeat: the sampler sends no cadence report.
	clk.Advance(18 * time.Second)
	if _, reports := m.MetricsReports(); reports != 1 {
		t.Errorf("%d reports after 18 s, want still 1: the heartbeat carries the cadence's", reports)
	}

	// A heartbeat to a server that takes records: it carries one,
	// measured now, and nothing else is written.
	var carried []*records.HostRecord
	newServer := func(_ context.Context, rec *records.HostRecord) (bool, error) {
		carried = append(carried, rec)
		return rec != nil, nil
	}
	before, _ := st.GetHostRecord(ctx, "h1")
	if err := m.Heartbeat(ctx, newServer); err != nil {
		t.Fatal(err)
	}
	if len(carried) != 1 || carried[0] == nil {
		t.Fatalf("the heartbeat carried %v, want the host record", carried)
	}
	if mt, ok := carried[0].Metric(records.MetricCPUPercent); !ok || !mt.Timestamp.Equal(clk.Now()) {
		t.Errorf("the carried record's cpu.percent %+v (%v), want one measured now (%v)", mt, ok, clk.Now())
	}
	if after, _ := st.GetHostRecord(ctx, "h1"); !reflect.DeepEqual(after, before) {
		t.Errorf("the agent wrote the record itself although the heartbeat carried it")
	}
	// The next heartbeat, 4 s later, is not due one (the last report is
	// less than the cadence less half a heartbeat old).
	clk.Advance(4 * time.Second)
	if err := m.Heartbeat(ctx, newServer); err != nil || len(carried) != 2 || carried[1] != nil {
		t.Errorf("a heartbeat 4 s after a report: err %v, carried %v, want a plain heartbeat", err, carried)
	}

	// A server from before: it took the heartbeat, ignored the record;
	// the agent writes the record apart.
	clk.Advance(6 * time.Second)
	oldServer := func(_ context.Context, rec *records.HostRecord) (bool, error) { return false, nil }
	if err := m.Heartbeat(ctx, oldServer); err != nil {
		t.Fatal(err)
	}
	got, _ := st.GetHostRecord(ctx, "h1")
	if mt, ok := got.Metric(records.MetricCPUPercent); !ok || !mt.Timestamp.Equal(clk.Now()) {
		t.Errorf("after a heartbeat an older server took without its record, the stored cpu.percent is %+v (%v), want one measured now (%v)", mt, ok, clk.Now())
	}
}
