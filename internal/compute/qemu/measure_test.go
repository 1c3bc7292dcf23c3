package qemu

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/records"
)

// TestMeasureBusyAboveIdle boots an idle guest and one that dirties
// 16 MiB forever on a busy vCPU: over the same second, the busy guest's
// QEMU measures more CPU and more resident memory than the idle one's,
// and the host reports Nova's CPU metrics and keel's memory metrics (its
// total the kernel's, as sysinfo(2) says too).
func TestMeasureBusyAboveIdle(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, Config{})
	idle := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-0000000000a1", Name: "idle", Metadata: map[string]string{"keel_guest": "idle"},
		Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
	busy := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-0000000000a2", Name: "busy", Metadata: map[string]string{"keel_guest": "dirty-16"},
		Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
	for _, inst := range []records.Instance{idle, busy} {
		spawned := make(chan error, 1)
		d.Spawn(ctx, inst, func(err error) { spawned <- err })
		if err := waitDone(t, spawned, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Both run their program (the busy one has passed over its memory).
	waitRising(t, d, idle.UUID, 0)
	waitRising(t, d, busy.UUID, waitRising(t, d, busy.UUID, 0))

	if _, err := d.Measure(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	m, err := d.Measure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	use := map[string]records.InstanceUsage{}
	for _, u := range m.Instances {
		use[u.UUID] = u
	}
	i, b := use[idle.UUID], use[busy.UUID]
	cpu, _ := metricOf(m.Host, records.MetricCPUPercent)
	t.Logf("idle guest: %.3f CPUs, %d MiB; busy guest: %.3f CPUs, %d MiB; host cpu.percent %.2f", i.VCPUsBusy, i.MemoryMB, b.VCPUsBusy, b.MemoryMB, cpu)
	if len(m.Instances) != 2 || i.UUID == "" || b.UUID == "" {
		t.Fatalf("measured guests %+v, want the two", m.Instances)
	}
	if b.VCPUsBusy <= i.VCPUsBusy || b.VCPUsBusy < 0.05 {
		t.Errorf("busy guest %.3f CPUs, idle guest %.3f: want the busy one measurably higher", b.VCPUsBusy, i.VCPUsBusy)
	}
	if b.MemoryMB < i.MemoryMB+8 || i.MemoryMB <= 0 {
		t.Errorf("busy guest %d MiB resident, idle guest %d: want the one dirtying 16 MiB at least 8 MiB above", b.MemoryMB, i.MemoryMB)
	}
	var names []string
	for _, x := range m.Host {
		names = append(names, x.Name)
		if x.Source != metricSource || !x.Timestamp.Equal(m.At) {
			t.Errorf("metric %+v: want source %s at %v", x, metricSource, m.At)
		}
	}
	if want := strings.Join(records.MetricNames, ",") + "," + strings.Join(records.MemoryMetricNames, ","); strings.Join(names, ",") != want {
		t.Errorf("host metrics %v, want %v", names, want)
	}
	checkHostMemory(t, m.Host)
	if cpu <= 0 {
		t.Errorf("host cpu.percent %v while a guest spins: want above 0", cpu)
	}

	// A destroyed guest is no longer measured.
	if err := d.Destroy(ctx, busy.UUID); err != nil {
		t.Fatal(err)
	}
	m, err = d.Measure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Instances) != 1 || m.Instances[0].UUID != idle.UUID {
		t.Errorf("after the busy guest's destroy: measured %+v, want the idle guest alone", m.Instances)
	}
}

// checkHostMemory: keel.memory.total is the memory sysinfo(2) gives
// (read apart from /proc/meminfo), and keel.memory.available is within
// 0…total.
func checkHostMemory(t *testing.T, host []records.Metric) {
	t.Helper()
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	want := int64(uint64(si.Totalram)*uint64(si.Unit)) >> 20
	total, ok1 := metricOf(host, records.MetricMemoryTotal)
	avail, ok2 := metricOf(host, records.MetricMemoryAvailable)
	t.Logf("host memory: %.0f MiB, %.0f available (sysinfo: %d MiB)", total, avail, want)
	if !ok1 || !ok2 || total < float64(want-1) || total > float64(want+1) {
		t.Errorf("keel.memory.total %v (%v), available (%v): want the kernel's %d MiB", total, ok1, ok2, want)
	}
	if avail <= 0 || avail > total {
		t.Errorf("keel.memory.available %v of %v MiB: want within (0, total]", avail, total)
	}
}

func metricOf(ms []records.Metric, name string) (float64, bool) {
	for _, m := range ms {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// TestParseProc: /proc's lines as the kernel writes them, a command name
// with a parenthesis and spaces included.
func TestParseProc(t *testing.T) {
	c, ok := parseHostCPU("cpu  2553019 771728 1036197 8171833 7406 0 27149 0 0 0\n")
	want := compute.CPUTimes{User: 2553019 + 771728, Kernel: 1036197 + 27149, Idle: 8171833, IOWait: 7406}
	if !ok || c != want {
		t.Errorf("parseHostCPU = %+v %v, want %+v", c, ok, want)
	}
	if _, ok := parseHostCPU("cpu0 1 2 3 4 5 6 7\n"); ok {
		t.Error("parseHostCPU took a per-CPU line")
	}
	stat := "4242 (qemu (x) 1) S 1 4242 4242 0 -1 4194304 99 0 0 0 150 50 0 0 20 0 3 0 6294742 3133440 2048 18446744073709551615 0"
	p, ok := parseProcStat(4242, []byte(stat))
	if !ok || p.cpu != 200 || p.start != 6294742 || p.rssMB != int64(2048*4096>>20) {
		t.Errorf("parseProcStat = %+v %v, want cpu 200, start 6294742, rss 8 MiB", p, ok)
	}
	if _, ok := parseProcStat(1, []byte("1 (z) Z 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0")); ok {
		t.Error("parseProcStat took a zombie")
	}
	metrics, ok := compute.CPUMetricsBetween(time.Unix(0, 0), "t", 0, compute.CPUTimes{User: 10, Kernel: 10, Idle: 10, IOWait: 10},
		compute.CPUTimes{User: 40, Kernel: 20, Idle: 60, IOWait: 20})
	if cpu, _ := metricOf(metrics, records.MetricCPUPercent); !ok || cpu != 0.4 {
		t.Errorf("cpu.percent between the readings = %v (%v), want (30 user + 10 kernel) / 100 = 0.4", cpu, ok)
	}
	if _, has := metricOf(metrics, records.MetricCPUFrequency); has {
		t.Error("a frequency of 0 reported: want cpu.frequency unavailable")
	}
	meminfo := "MemTotal:       24683748 kB\nMemFree:         1234567 kB\nMemAvailable:   22456344 kB\nBuffers:  1 kB\n"
	if total, avail := parseMeminfo([]byte(meminfo)); total != 24683748>>10 || avail != 22456344>>10 {
		t.Errorf("parseMeminfo = %d, %d MiB, want %d, %d", total, avail, 24683748>>10, 22456344>>10)
	}
	// A kernel without MemAvailable (before 3.14), or a garbled file: the
	// host's memory is unavailable, never 0 MiB available.
	for _, bad := range []string{"MemTotal: 1024 kB\nMemFree: 512 kB\n", "MemTotal: x kB\nMemAvailable: 10 kB\n", ""} {
		if total, avail := parseMeminfo([]byte(bad)); total != 0 || avail != 0 {
			t.Errorf("parseMeminfo(%q) = %d, %d: want 0, 0 (unavailable)", bad, total, avail)
		}
	}
	if ms := compute.MemoryMetrics(time.Unix(0, 0), "t", 0, 0); len(ms) != 0 {
		t.Errorf("MemoryMetrics of an unread host = %+v, want none", ms)
	}
}
