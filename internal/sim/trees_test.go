package sim

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/sim/scenario"
)

// TestGPUTreesScenario runs scenarios/gpu-trees.toml (hosts with pGPU
// children, a shared DISK_GB pool) and checks the end state: the audit
// finds nothing, every GPU server holds one VGPU on a pGPU of its own
// host, every pGPU's usage is its servers' count, the pool took the disks
// that did not fit locally, and no GPU server is on a host without GPUs.
func TestGPUTreesScenario(t *testing.T) {
	ctx := context.Background()
	sc, err := scenario.Load(filepath.Join("..", "..", "scenarios", "gpu-trees.toml"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := build(ctx, sc, scheduler.PolicyClaim)
	if err != nil {
		t.Fatal(err)
	}
	end := w.clock.Now().Add(secs(sc.Duration))
	w.scheduleHeartbeats(ctx)
	w.scheduleAudits(ctx)
	w.scheduleEvents(ctx)
	w.scheduleDrains(ctx)
	w.scheduleWorkloads(ctx, end)
	for w.clock.Step(end) {
	}
	w.clock.RunUntil(end)
	if problems, err := w.checkConsistency(ctx); err != nil || len(problems) > 0 {
		t.Fatalf("audit at the end: %v %v", problems, err)
	}
	insts, err := w.store.ListInstances(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	perGPU := map[string]int64{}
	gpus := 0
	for _, in := range insts {
		if in.VMState != records.VMActive || in.Flavor.Name != "g1.small" {
			continue
		}
		gpus++
		if !strings.HasPrefix(in.Host, "g") || in.Host == "g01" {
			t.Errorf("GPU server %s on %s (g01 was drained; h hosts have no GPU)", in.Name, in.Host)
		}
		c, err := w.store.GetConsumer(ctx, in.UUID)
		if err != nil {
			t.Fatal(err)
		}
		var on []string
		for p, r := range c.Allocations {
			if r["VGPU"] > 0 {
				on = append(on, p)
				perGPU[p] += r["VGPU"]
			}
		}
		if len(on) != 1 || !strings.HasPrefix(on[0], "rp-"+in.Host+"-pgpu") || c.Allocations[on[0]]["VGPU"] != 1 {
			t.Errorf("GPU server %s on %s holds VGPU on %v (%v), want 1 on one of its host's pGPUs", in.Name, in.Host, on, c.Allocations)
		}
	}
	if gpus < 15 {
		t.Errorf("%d GPU servers active at the end, want the workload's (about 24)", gpus)
	}
	sums, err := w.store.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if strings.Contains(s.UUID, "-pgpu") && s.Usage["VGPU"] != perGPU[s.UUID] {
			t.Errorf("%s: VGPU usage %d, its servers hold %d", s.Name, s.Usage["VGPU"], perGPU[s.UUID])
		}
		if s.UUID == "rp-shared-pool" && s.Usage[placement.DiskGB] == 0 {
			t.Errorf("the shared pool holds no disk: the small local disks should have overflowed into it")
		}
	}
}

// TestSpreadFiguresAreOverHosts runs scenarios/gpu-trees.toml and checks
// that every spread figure is over hosts, each host's tree summed: the
// pGPU children and the shared pool are no hosts (they were counted as
// hosts with 0 MiB, which made RAM CV 1.171 and max/mean 3.05 of hosts
// whose own figures are 0.195 and 1.34).
func TestSpreadFiguresAreOverHosts(t *testing.T) {
	sc, err := scenario.Load(filepath.Join("..", "..", "scenarios", "gpu-trees.toml"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), sc, Options{Samples: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Policies {
		var names []string
		var ram []float64
		for h, mb := range p.Final.RAMUsedMB {
			names = append(names, h)
			ram = append(ram, float64(mb))
		}
		slices.Sort(names)
		if want := []string{"g02", "g03", "g04", "h01", "h02", "h03", "h04"}; !slices.Equal(names, want) {
			t.Errorf("%s: final.ram_used_mb lists %v, want the enabled hosts %v", p.Policy, names, want)
		}
		got, mean := cv(ram)
		if math.Abs(got-p.Final.RAMCV) > 1e-12 || math.Abs(maxOf(ram)/mean-p.Final.RAMMaxOverMean) > 1e-12 {
			t.Errorf("%s: RAM CV %.3f, max/mean %.2f; the hosts' own are %.3f, %.2f", p.Policy, p.Final.RAMCV, p.Final.RAMMaxOverMean, got, maxOf(ram)/mean)
		}
		if p.Final.RAMCV > 0.5 {
			t.Errorf("%s: RAM CV %.3f: hosts with 0 MiB (children, pools) counted", p.Policy, p.Final.RAMCV)
		}
		if want := []string{"g01", "g02", "g03", "g04", "h01", "h02", "h03", "h04"}; !slices.Equal(p.Timeline.Hosts, want) {
			t.Errorf("%s: the timeline charts %v, want the hosts %v", p.Policy, p.Timeline.Hosts, want)
		}
	}
}
