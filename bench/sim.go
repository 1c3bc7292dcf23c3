package bench

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"keel/internal/sim"
	"keel/internal/sim/scenario"
)

// sim runs `keel sim --generate 10000 --hours 24 --policy claim` in
// process and times it.
func (r *run) sim(ctx context.Context) error {
	hosts := r.size(10000, 50)
	hours := 24.0
	if r.opts.Quick {
		hours = 0.1
	}
	sc := scenario.Generate(hosts, hours, 1)
	if err := sc.Validate(); err != nil {
		return fmt.Errorf("generated scenario: %w", err)
	}
	// As `keel sim` does: fewer collections, under a soft memory limit.
	defer sim.TuneGC(hosts)()
	// The earlier sections' garbage goes first, so the peak is the sim's.
	runtime.GC()
	debug.FreeOSMemory()
	peakOwn := sim.ResetPeakRSS()
	t0, c0 := time.Now(), cpuTime()
	rep, err := sim.Run(ctx, sc, sim.Options{Policies: []string{"claim"}})
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	wall, cpu := time.Since(t0).Seconds(), (cpuTime() - c0).Seconds()
	rssMiB := float64(sim.PeakRSS()) / (1 << 20)
	rssWhat := "peak RSS"
	if !peakOwn {
		rssWhat = "peak RSS of the whole keelbench process (this kernel cannot reset it)"
	}
	p := rep.Policies[0]
	if len(p.Inconsistencies) > 0 {
		return fmt.Errorf("sim ended with inconsistent allocations: %v", p.Inconsistencies[:min(3, len(p.Inconsistencies))])
	}
	r.figure("sim_10k_24h_wall_s", wall)
	r.figure("sim_10k_24h_cpu_s", cpu)
	r.figure("sim_10k_24h_peak_rss_mib", rssMiB)
	r.row("6", fmt.Sprintf("keel sim, %s hosts × %g simulated hours", commas(int64(hosts)), hours),
		fmt.Sprintf("%.1f s wall (%s), %.1f s CPU (%s), %.0f MiB %s (%s)",
			wall, r.goal("sim_10k_24h_wall_s", wall <= 60, "≤ 60 s wall"),
			cpu, r.goal("sim_10k_24h_cpu_s", cpu <= 40, "≤ 40 s CPU"),
			rssMiB, rssWhat, r.goal("sim_10k_24h_peak_rss_mib", rssMiB <= 1024, "≤ 1 GiB")),
		fmt.Sprintf("`keel sim --generate %d --hours %g --policy claim` in process: a boot, a delete and a live migration per simulated second (%s boots, %s migrations, %s decisions), hourly audits, the real scheduler, trackers and conductor on the memory store; allocations checked exact at the end",
			hosts, hours, commas(int64(p.Boots)), commas(int64(p.Migrations)), commas(int64(p.Decisions))))
	r.progress("sim: %.1f s wall, %.1f s CPU, %.0f MiB peak RSS", wall, cpu, rssMiB)
	return nil
}
