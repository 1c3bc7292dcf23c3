package libvirt

import (
	"context"
	"strings"
	"testing"
	"time"

	"keel/internal/records"
)

// TestMeasureBusyAboveIdle boots an idle guest and one dirtying 16 MiB
// forever on a busy vCPU: over the same second, libvirt's statistics say
// the busy one used more CPU and has more resident memory; the host
// reports Nova's CPU metrics; another agent on the same libvirtd
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
	if strings.Join(names, ",") != strings.Join(records.MetricNames, ",") {
		t.Errorf("host metrics %v, want %v", names, records.MetricNames)
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
