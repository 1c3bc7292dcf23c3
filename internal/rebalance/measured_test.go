package rebalance

import (
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// measuredHost is a host of 8 CPUs (× 4 for the claims) and 16 GiB,
// measured pct busy at.
func measuredHost(name string, pct float64, at time.Time) Host {
	cpu := placement.NewInventory(8)
	cpu.AllocationRatio = 4
	return Host{Name: name, LastSeenUp: now, Measured: &Measured{CPUPercent: pct, At: at}, Inventories: placement.Inventories{
		placement.VCPU: cpu, placement.MemoryMB: placement.NewInventory(16384), placement.DiskGB: placement.NewInventory(2000)}}
}

// TestPlanMeasured balances measured CPU without breaking the claims: h1
// is busy (two guests spinning 3 CPUs each), h2 measures idlest but its
// RAM is fully claimed by idle guests, h3 is half busy with room. Every
// move goes h1 → h3 (h2 never passes the filters); the plan says each
// move's load on both hosts; an unmeasured guest never moves; a host
// whose measurement is older than MaxAge is not counted (nor a
// destination); the claims' metrics are as before.
func TestPlanMeasured(t *testing.T) {
	var b builder
	b.host(measuredHost("h1", 0.9, now))
	b.host(measuredHost("h2", 0.05, now))
	b.host(measuredHost("h3", 0.25, now))
	b.host(measuredHost("h4", 0.0, now.Add(-10*time.Minute))) // stale: not counted
	busy := records.Flavor{ID: "b", Name: "busy", VCPUs: 4, RAMMB: 2048, DiskGB: 20}
	fill := records.Flavor{ID: "f", Name: "fill", VCPUs: 1, RAMMB: 8192, DiskGB: 20}
	b.put("h1", busy, busy, busy) // i00001, i00002 measured at 3 CPUs; i00003 unmeasured
	b.put("h2", fill, fill)       // 16 GiB claimed: full
	b.put("h3", small)
	for i := range b.c.Instances {
		in := &b.c.Instances[i]
		switch in.UUID {
		case "i00001", "i00002":
			in.BusyCPUs, in.HasBusy = 3, true
		case "i00004", "i00005":
			in.BusyCPUs, in.HasBusy = 0.2, true
		case "i00006":
			in.BusyCPUs, in.HasBusy = 2, true
		}
	}
	p, err := New(Options{Metric: MetricMeasured, Now: now, MaxAge: time.Minute, Threshold: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := p.Plan(b.c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", plan)
	if plan.Hosts != 3 {
		t.Errorf("counted %d hosts, want 3 (h4's measurement is stale)", plan.Hosts)
	}
	if len(plan.Moves) == 0 || !(plan.After < plan.Before) {
		t.Fatalf("plan %+v: want moves lowering the measured CV", plan)
	}
	for _, m := range plan.Moves {
		if m.Source != "h1" || m.Destination != "h3" || (m.Instance != "i00001" && m.Instance != "i00002") {
			t.Errorf("move %+v: want a measured busy guest h1 → h3 (h2 has no RAM left by its claims, h4 is unmeasured)", m)
		}
		if m.Load == nil || !(m.Load.SourceAfter < m.Load.SourceBefore) || !(m.Load.DestAfter > m.Load.DestBefore) {
			t.Errorf("move %+v: want the load on both hosts before and after, the source's falling", m)
			continue
		}
		if got, want := m.Load.SourceBefore-m.Load.SourceAfter, 3.0/8; got < want-1e-9 || got > want+1e-9 {
			t.Errorf("source load fell by %.4f, want the guest's 3 of 8 CPUs (%.4f)", got, want)
		}
	}
	if plan.Moves[0].Load.SourceBefore != 0.9 || plan.Moves[0].Load.DestBefore != 0.25 {
		t.Errorf("first move's load %+v, want h1 at 0.9 and h3 at 0.25 as measured", *plan.Moves[0].Load)
	}

	// Under the claims' RAM metric the same cloud plans no measured load.
	p, _ = New(Options{Metric: MetricRAM, Now: now, Threshold: 0.05})
	plan, err = p.Plan(b.c)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range plan.Moves {
		if m.Load != nil {
			t.Errorf("ram move %+v carries a measured load", m)
		}
	}
	if _, err := New(Options{Metric: MetricMeasured, MaxAge: -time.Second}); err == nil {
		t.Error("a negative max age accepted")
	}
}

// TestPlanMeasuredMemory: measured use is the larger of measured CPU and
// the guests' resident memory. Three hosts measure the same CPU, but h1's
// two guests hold 12 of its 16 GiB resident: the plan moves one of them
// (memory-heavy, CPU-light) to a host whose guests hold little, and says
// both hosts' memory before and after.
func TestPlanMeasuredMemory(t *testing.T) {
	for _, kernel := range []bool{false, true} {
		t.Run(map[bool]string{false: "guests", true: "kernel"}[kernel], func(t *testing.T) { planMeasuredMemory(t, kernel) })
	}
}

// planMeasuredMemory: with kernel, the hosts report their memory as the
// kernel does, 32 GiB (twice the MEMORY_MB inventory), each with 8 GiB
// more in use than its guests' (the host's own): the shares are of the
// kernel's total.
func planMeasuredMemory(t *testing.T, kernel bool) {
	var b builder
	for _, h := range []struct {
		name string
		mem  int64
	}{{"h1", 12288}, {"h2", 1024}, {"h3", 1024}} {
		mh := measuredHost(h.name, 0.25, now)
		mh.Measured.MemoryMB = h.mem
		if kernel {
			mh.Measured.MemoryMB, mh.Measured.MemoryTotalMB = h.mem+8192, 32768
		}
		b.host(mh)
	}
	fat := records.Flavor{ID: "f", Name: "fat", VCPUs: 2, RAMMB: 6144, DiskGB: 20}
	b.put("h1", fat, fat) // i00001, i00002: 6 GiB resident each
	b.put("h2", small)    // i00003
	b.put("h3", small)    // i00004
	for i := range b.c.Instances {
		in := &b.c.Instances[i]
		in.HasBusy, in.BusyCPUs, in.ResidentMB = true, 0.5, 1024
		if in.Host == "h1" {
			in.ResidentMB = 6144
		}
	}
	p, err := New(Options{Metric: MetricMeasured, Now: now, MaxAge: time.Minute, Threshold: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := p.Plan(b.c)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Moves) == 0 {
		t.Fatalf("plan %+v: want a move off h1, whose guests hold 75%% of its memory (CPU is even)", plan)
	}
	m := plan.Moves[0]
	if m.Source != "h1" || m.Load == nil {
		t.Fatalf("first move %+v: want one off h1 with its load", m)
	}
	want := [4]float64{0.75, 0.375, 1024.0 / 16384, 7168.0 / 16384}
	if kernel {
		want = [4]float64{20480.0 / 32768, 14336.0 / 32768, 9216.0 / 32768, 15360.0 / 32768}
	}
	if l := m.Load; [4]float64{l.SourceMemoryBefore, l.SourceMemoryAfter, l.DestMemoryBefore, l.DestMemoryAfter} != want {
		t.Errorf("memory load %+v: want h1 %.4f → %.4f and the destination %.4f → %.4f", *l, want[0], want[1], want[2], want[3])
	}
	if l := m.Load; l.SourceBefore != 0.25 || l.SourceAfter != 0.25-0.5/8 {
		t.Errorf("CPU load %+v: want h1 0.25 → %.4f (the guest's half CPU of 8)", *l, 0.25-0.5/8)
	}
}
