package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"keel/internal/sim/chart"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes one block per policy, for people.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "scenario %s  seed %d  hosts %d  duration %.0fs\n", r.Scenario, r.Seed, r.Hosts, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\npolicy\tmigrations\tfailed\tshare→initially best\tstale decisions\tram cv\tvcpu cv\tram max/mean\tboots\tno valid host\taudit drift\twall")
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%d\t%.3f\t%.3f\t%.2f\t%d\t%d\t%d\t%.1fs\n",
			p.Policy, p.Migrations, p.FailedMigrations, p.ShareToInitiallyBest, p.StaleDecisions,
			p.Final.RAMCV, p.Final.VCPUCV, p.Final.RAMMaxOverMean, p.Boots, p.NoValidHost, p.DriftFound, p.WallSeconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Policies {
		best := strings.Join(p.InitiallyBest, ",")
		if best == "" {
			best = "none (no host passed the filters for the first flavor at t=0)"
		}
		fmt.Fprintf(w, "\n%s: initially best %s; destinations %s\n", p.Policy, best, topDestinations(p.Destinations, 12))
		if m := p.Final.Measured; m != nil {
			fmt.Fprintf(w, "  measured cpu.percent at the end: cv %.3f, max/mean %.2f\n", m.CPUCV, m.CPUMaxOverMean)
		}
		if p.Rebalance != nil {
			fmt.Fprintf(w, "  %s\n", p.Rebalance)
		}
		for i, s := range p.Inconsistencies {
			if i == 5 {
				fmt.Fprintf(w, "  … and %d more inconsistencies\n", len(p.Inconsistencies)-5)
				break
			}
			fmt.Fprintf(w, "  INCONSISTENT: %s\n", s)
		}
	}
	return nil
}

// topDestinations renders the n most used destinations, most first.
func topDestinations(d map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var xs []kv
	for k, v := range d {
		xs = append(xs, kv{k, v})
	}
	sort.Slice(xs, func(i, j int) bool {
		if xs[i].v != xs[j].v {
			return xs[i].v > xs[j].v
		}
		return xs[i].k < xs[j].k
	})
	var parts []string
	for i, x := range xs {
		if i == n {
			parts = append(parts, fmt.Sprintf("… %d more hosts", len(xs)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s×%d", x.k, x.v))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// WriteSVG charts every policy's RAM use over time, one panel each.
func (r *Report) WriteSVG(w io.Writer) error {
	var panels []chart.Panel
	for _, p := range r.Policies {
		if p.Timeline == nil {
			return fmt.Errorf("policy %s has no timeline: run with samples", p.Policy)
		}
		tl := p.Timeline
		panels = append(panels, chart.Panel{
			Title: fmt.Sprintf("%s — %s: RAM in use per host (share to initially best %.2f, ram cv %.3f)",
				r.Scenario, p.Policy, p.ShareToInitiallyBest, p.Final.RAMCV),
			Hosts: tl.Hosts, CapacityMB: tl.CapacityMB, Times: tl.Times, UsedMB: tl.UsedMB, Marks: tl.Audits,
		})
	}
	return chart.WriteSVG(w, panels)
}
