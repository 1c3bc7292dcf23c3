package libvirt

import (
	"context"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"keel/internal/records"
)

// TestMeasureBusyAboveIdle boots an idle guest and one dirtying 16 MiB
// forever on a busy vCPU: over the same second, libvirt's statistics say
// the busy one used more CPU and has more resident memory; the host
// reports Nova's CPU metrics and keel's memory metrics (the total what
// virNodeGetInfo says, the available part within it); another agent on the same libvirtd
// measures none of them; a destroyed guest is no longer measured.
func TestMeasureBusyAboveIdle(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, "h01", Config{})
	idle := instance("5a1f0c6e-0000-4000-8000-0000000000a1", "idle")
	busy := instance("5a1f0c6e-0000-4000-8000-0000000000a2", "dirty-16")
	spawn(t, d, idle)
	spawn(t, d, busy)
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
	var cpu float64
	var names []string
	for _, x := range m.Host {
		names = append(names, x.Name)
		if x.Name == records.MetricCPUPercent {
			cpu = x.Value
		}
		if x.Source != metricSource || !x.Timestamp.Equal(m.At) {
			t.Errorf("metric %+v: want source %s at %v", x, metricSource, m.At)
		}
	}
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
	if want := strings.Join(records.MetricNames, ",") + "," + strings.Join(records.MemoryMetricNames, ","); strings.Join(names, ",") != want {
		t.Errorf("host metrics %v, want %v", names, want)
	}
	l, err := d.lv()
	if err != nil {
		t.Fatal(err)
	}
	_, memKiB, _, _, _, _, _, _, err := l.NodeGetInfo()
	if err != nil {
		t.Fatal(err)
	}
	var total, avail float64
	for _, x := range m.Host {
		switch x.Name {
		case records.MetricMemoryTotal:
			total = x.Value
		case records.MetricMemoryAvailable:
			avail = x.Value
		}
	}
	t.Logf("host memory: %.0f MiB, %.0f available (virNodeGetInfo: %d MiB)", total, avail, memKiB>>10)
	if want := float64(memKiB >> 10); total < want-1 || total > want+1 {
		t.Errorf("keel.memory.total %v MiB, virNodeGetInfo %v MiB: want the same", total, want)
	}
	if avail <= 0 || avail > total {
		t.Errorf("keel.memory.available %v of %v MiB: want within (0, total]", avail, total)
	}
	if cpu <= 0 {
		t.Errorf("host cpu.percent %v while a guest spins: want above 0", cpu)
	}

	other, err := New(ctx, Config{URI: d.cfg.URI, Host: "h01-other", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	om, err := other.Measure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(om.Instances) != 0 {
		t.Errorf("another agent on the same libvirtd measures %+v, want none of h01's guests", om.Instances)
	}

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

// TestHostMemory: virNodeGetMemoryStats' fields (KiB) as keel's memory
// metrics: available is free + buffers + cached, never above the total;
// no total is unavailable.
func TestHostMemory(t *testing.T) {
	f := func(name string, v uint64) golibvirt.NodeGetMemoryStats {
		return golibvirt.NodeGetMemoryStats{Field: name, Value: v}
	}
	total, avail := hostMemory([]golibvirt.NodeGetMemoryStats{f("total", 8<<20), f("free", 1<<20), f("buffers", 1<<10), f("cached", 2<<20)})
	if total != 8<<10 || avail != 3<<10+1 {
		t.Errorf("hostMemory = %d, %d MiB, want 8192, 3073", total, avail)
	}
	if total, avail := hostMemory([]golibvirt.NodeGetMemoryStats{f("free", 1<<20)}); total != 0 || avail != 0 {
		t.Errorf("hostMemory without a total = %d, %d: want 0, 0 (unavailable)", total, avail)
	}
	if _, avail := hostMemory([]golibvirt.NodeGetMemoryStats{f("total", 1<<20), f("free", 2<<20)}); avail != 1<<10 {
		t.Errorf("available above the total: %d MiB, want the total", avail)
	}
}
