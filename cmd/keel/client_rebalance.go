package main

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/spf13/cobra"

	"keel/internal/client"
	"keel/internal/rebalance"
)

func rebalanceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "Propose and run moves that even out the hosts' usage",
	}
	cmd.AddCommand(rebalancePlanCommand(), rebalanceApplyCommand())
	return cmd
}

func rebalancePlanCommand() *cobra.Command {
	var (
		cf *clientFlags
		o  client.RebalanceOptions
		by string
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Propose moves that lower the imbalance (stored as a recommended plan)",
		Long: `plan runs keel's rebalance planner on the live cloud (POST /keel/v1/plans
{"rebalance": …}, admin): moves that lower the coefficient of variation of
the enabled hosts' normalised usage of --metric, each checked with the
scheduler's own filters, cheapest first, every one lowering the metric,
none moving an instance moved within the last hour. It acts only above
--threshold and stops below half of it. Nothing moves: the moves are stored
as a recommended plan, which ` + "`keel rebalance apply PLAN`" + ` runs (each move
re-checked just before it starts).

--by measured evens out what the guests really use instead of what they
claim: each host's CPU as its agent last measured it (cpu.percent, within
[metrics] max_age) over its CPUs, moving only guests whose use was
measured. The claims still bound every move: a destination must pass the
same filters (RAM, vCPUs, disk left in Placement), so a host that measures
idle but has no room is never chosen. The table shows each move's load on
both hosts before and after.

On a Nova cloud (--os-cloud of a cloud that is not keel) it reads the hosts'
usage from Placement and the servers from Nova's API, applies the filters of
--nova-conf (Nova's defaults without it), and stores the plan in the local
store of --data-dir.` + clientLong,
		Example: `  keel rebalance plan
  keel rebalance plan --metric max --threshold 0.05 --max-moves 20
  keel rebalance plan --by measured`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkThreshold(o.Threshold); err != nil {
				return err
			}
			switch by {
			case "claims":
			case "measured":
				if cmd.Flags().Changed("metric") && o.Metric != string(rebalance.MetricMeasured) {
					return fmt.Errorf("--by measured evens out measured CPU; --metric %s is a claims metric: drop one of them", o.Metric)
				}
				o.Metric = string(rebalance.MetricMeasured)
			default:
				return fmt.Errorf("--by must be claims or measured, got %q", by)
			}
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			if nova, err := foreign(cmd.Context(), c); err != nil {
				return err
			} else if nova {
				if o.Metric == string(rebalance.MetricMeasured) {
					return fmt.Errorf("--by measured needs keel's measured usage: a Nova cloud's Placement and API have none (its compute_nodes.metrics are not served)")
				}
				return novaRebalancePlan(cmd, c, cf, o)
			}
			rp, p, err := c.PlanRebalance(cmd.Context(), o)
			if err != nil {
				return err
			}
			if cf.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"rebalance": rp, "plan": p})
			}
			return printRebalancePlan(cmd.OutOrStdout(), rp, p.ID, serverNames(cmd.Context(), c), "")
		},
	}
	cf = addClientFlags(cmd)
	addNovaFlags(cmd, cf, true)
	f := cmd.Flags()
	f.StringVar(&o.Metric, "metric", "ram", "what to even out: ram, vcpu, disk or max (the worst of the three per host) of the claims")
	f.StringVar(&by, "by", "claims", "balance by the claims (Placement's usage, --metric) or by measured CPU (measured)")
	f.Float64Var(&o.Threshold, "threshold", rebalance.DefaultThreshold, "act only above this CV (> 0); stop below half of it")
	f.IntVar(&o.MaxMoves, "max-moves", 0, "at most this many moves (0: no cap)")
	f.Uint64Var(&o.Seed, "seed", 1, "breaks ties between equally good moves (same seed and cloud, same plan)")
	f.IntVar(&o.Parallel, "parallel", 0, "the plan's moves in flight at once when applied (0: the caps alone)")
	return cmd
}

// checkThreshold refuses a --threshold the planner cannot take as given:
// not a number, negative, or 0 — which the planner reads as "the default"
// and which, taken literally, would never stop (it stops below half the
// threshold).
func checkThreshold(t float64) error {
	if math.IsNaN(t) || math.IsInf(t, 0) || t <= 0 {
		return fmt.Errorf("--threshold must be a coefficient of variation above 0 (the planner acts above it and stops below half of it, so 0 would never stop; try 0.01 for a tight balance, or leave it out for %v), got %v", rebalance.DefaultThreshold, t)
	}
	return nil
}

func rebalanceApplyCommand() *cobra.Command {
	var (
		cf   *clientFlags
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "apply PLAN",
		Short: "Run a recommended rebalance plan",
		Long: `apply approves a recommended plan (POST /keel/v1/plans/PLAN/approve,
admin): the executor starts its moves under the caps, after drains and
evacuations, re-checking each just before it starts (the instance still on
its source, the destination still passing the scheduler's filters; a move
that no longer applies is skipped with the reason). Older recommended
rebalance plans are superseded. --wait prints a line per move as it ends.

On a Nova cloud (--os-cloud of a cloud that is not keel) the plan is in the
local store of --data-dir, and keel's executor runs it through Nova's API
(os-migrateLive to each planned destination), as keel host drain does.` + clientLong,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := connectPlan(cmd, cf, args[0])
			if err != nil {
				return err
			}
			if nova, err := foreign(cmd.Context(), c); err != nil {
				return err
			} else if nova {
				return novaRebalanceApply(cmd, c, cf, id, wait)
			}
			p, err := c.ApprovePlan(cmd.Context(), id)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, planHeadline(p))
			printPace(out, p)
			if !wait {
				return nil
			}
			final, err := waitPlan(cmd.Context(), c, id, out, serverNames(cmd.Context(), c))
			if err != nil {
				return err
			}
			return planOutcome(final)
		},
	}
	cf = addClientFlags(cmd)
	addNovaFlags(cmd, cf, false)
	cmd.Flags().BoolVar(&wait, "wait", false, "print a line per move as it ends, until the plan ends")
	return cmd
}

// rebalanceLine is the planner's answer in one line: the CV it starts
// from and ends at, over how many hosts, in how many moves, and why it
// stopped (on keel's cloud and on Nova's alike).
func rebalanceLine(rp rebalance.Plan) string {
	return fmt.Sprintf("%s CV over %s: %.4f → %.4f in %s (%s)", rp.Metric, count(rp.Hosts, "enabled host", "enabled hosts"),
		rp.Before, rp.After, count(len(rp.Moves), "move", "moves"), rp.Stopped)
}

// printRebalancePlan prints a rebalance plan's summary line, its moves and
// how to run it, for keel's cloud and (cloudFlag "--os-cloud NOVA") a
// Nova's alike.
func printRebalancePlan(out io.Writer, rp rebalance.Plan, id int64, names serverNameMap, cloudFlag string) error {
	fmt.Fprintln(out, rebalanceLine(rp))
	if id == 0 {
		return nil
	}
	if rp.Metric == rebalance.MetricMeasured {
		// The measured CPU and guests' resident memory of both hosts,
		// before → after each move.
		t := newTable(out, "#", "INSTANCE", "RAM MiB", "FROM", "TO", "FROM CPU", "TO CPU", "FROM MEM", "TO MEM", "CV AFTER")
		for i, m := range rp.Moves {
			load := func(before, after float64) string { return fmt.Sprintf("%.0f%% → %.0f%%", 100*before, 100*after) }
			var from, to, fromMem, toMem string
			if l := m.Load; l != nil {
				from, to = load(l.SourceBefore, l.SourceAfter), load(l.DestBefore, l.DestAfter)
				fromMem, toMem = load(l.SourceMemoryBefore, l.SourceMemoryAfter), load(l.DestMemoryBefore, l.DestMemoryAfter)
			}
			t.row(strconv.Itoa(i+1), names.of(m.Instance), strconv.FormatInt(m.RAMMB, 10), m.Source, m.Destination, from, to, fromMem, toMem, fmt.Sprintf("%.4f", m.After))
		}
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintf(out, "plan %d recommended: keel rebalance apply %d%s runs it\n", id, id, cloudFlag)
		return nil
	}
	t := newTable(out, "#", "INSTANCE", "RAM MiB", "FROM", "TO", "CV AFTER")
	for i, m := range rp.Moves {
		t.row(strconv.Itoa(i+1), names.of(m.Instance), strconv.FormatInt(m.RAMMB, 10), m.Source, m.Destination, fmt.Sprintf("%.4f", m.After))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "plan %d recommended: keel rebalance apply %d%s runs it\n", id, id, cloudFlag)
	return nil
}
