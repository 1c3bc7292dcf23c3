package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"keel/internal/rebalance"
	"keel/internal/sim"
	"keel/internal/sim/scenario"
)

func simCommand() *cobra.Command {
	var (
		policy   string
		format   string
		svgPath  string
		seed     int64
		samples  int
		parallel bool
		generate string
		sets     []string
		drains   string
		inFlight int
		rebal    bool
		metric   string
		thresh   float64
		maxMoves int
	)
	cmd := &cobra.Command{
		Use:   "sim SCENARIO.toml",
		Short: "Run a scenario on a virtual clock under each host-view policy and compare",
		Long: `sim builds the cloud a scenario describes — hosts, instances, the real
scheduler, resource trackers, conductor and fake-driver agents on an in-memory
store — and drives it on a virtual clock, once per host-view policy:

  legacy       weighers read host records; a migration's destination record
               is refreshed only by a spawn or the periodic audit (Nova today)
  dest-update  weighers read host records; the destination writes its record
               as soon as the instance lands (the fix the bug report proposes)
  claim        weighers read allocations, exact at claim time (keel's default)

It prints, per policy: migrations, the share that went to the hosts that
looked best at t=0, decisions taken on a stale view, and how evenly RAM and
vCPU ended up used (coefficient of variation over the enabled hosts).
The scenario format is documented in scenarios/README.md.

What-if: --set changes an option by its nova.conf name, --drain empties
hosts from t=0 (--in-flight at a time), and --rebalance plans a rebalance
(keel's rebalance planner, --metric/--threshold/--max-moves) once the drains
are done and runs its moves; the report gives its plan and outcome per
policy. "keel sim export" writes the live cloud as a scenario to try these on.`,
		Example: `  keel sim scenarios/seed-hour.toml
  keel sim scenarios/seed-hour.toml --policy legacy --format json
  keel sim scenarios/seed-hour.toml --svg skew.svg
  keel sim --generate 10000 --hours 24 --policy claim
  keel sim export > cloud.toml
  keel sim cloud.toml --set filter_scheduler.host_subset_size=1 --drain h01,h02 --in-flight 4 --rebalance --svg whatif.svg`,
		Args: func(cmd *cobra.Command, args []string) error {
			if generate != "" && len(args) == 0 {
				return nil
			}
			if len(args) != 1 {
				return fmt.Errorf("sim needs one scenario file (e.g. keel sim scenarios/seed-hour.toml), or --generate HOSTS")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var sc *scenario.Scenario
			if len(args) == 1 {
				var err error
				if sc, err = scenario.Load(args[0]); err != nil {
					return err
				}
			} else {
				var hosts int
				if _, err := fmt.Sscan(generate, &hosts); err != nil || hosts < 1 {
					return fmt.Errorf("--generate wants a host count, got %q", generate)
				}
				hours, _ := cmd.Flags().GetFloat64("hours")
				if !(hours > 0) || hours*3600 > scenario.MaxDuration {
					return fmt.Errorf("--hours must be more than 0 and at most %v, got %v", scenario.MaxDuration/3600, hours)
				}
				sc = scenario.Generate(hosts, hours, 1)
				if err := sc.Validate(); err != nil {
					return fmt.Errorf("generated scenario: %w", err)
				}
			}
			if cmd.Flags().Changed("seed") {
				sc.Seed = seed
			}
			if err := whatIf(sc, sets, drains, inFlight); err != nil {
				return err
			}
			opts := sim.Options{Parallel: parallel, Progress: os.Stderr}
			if rebal {
				m, err := rebalance.ParseMetric(metric)
				if err != nil {
					return fmt.Errorf("--metric: %w", err)
				}
				opts.Rebalance = &sim.RebalanceOptions{InFlight: inFlight,
					Planner: rebalance.Options{Metric: m, Threshold: thresh, MaxMoves: maxMoves, Seed: uint64(sc.Seed)}}
			}
			if policy != "" {
				opts.Policies = strings.Split(policy, ",")
				for i, p := range opts.Policies {
					if j := slices.Index(opts.Policies, p); j < i {
						return fmt.Errorf("--policy lists %q twice", p)
					}
				}
			}
			if svgPath != "" {
				if samples < 1 {
					return fmt.Errorf("--svg needs --samples of at least 1, got %d", samples)
				}
				opts.Samples = samples
			}
			if format != "table" && format != "json" {
				return fmt.Errorf("--format must be table or json, not %q", format)
			}
			// Fewer collections, under a soft memory limit (sim.TuneGC).
			defer sim.TuneGC()()
			rep, err := sim.Run(cmd.Context(), sc, opts)
			if err != nil {
				return err
			}
			if svgPath != "" {
				f, err := os.Create(svgPath)
				if err != nil {
					return fmt.Errorf("writing chart: %w", err)
				}
				if err := rep.WriteSVG(f); err != nil {
					f.Close()
					return fmt.Errorf("writing chart %s: %w", svgPath, err)
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("writing chart %s: %w", svgPath, err)
				}
				fmt.Fprintf(os.Stderr, "chart written to %s\n", svgPath)
			}
			if format == "json" {
				return rep.WriteJSON(cmd.OutOrStdout())
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	cmd.AddCommand(simExportCommand())
	f := cmd.Flags()
	f.StringVar(&policy, "policy", "", "run only these policies (comma-separated: legacy, dest-update, claim); default: the scenario's")
	f.StringVar(&format, "format", "table", "output format: table or json")
	f.StringVar(&svgPath, "svg", "", "write a chart of each host's RAM use over time, one panel per policy, to this file")
	f.IntVar(&samples, "samples", 360, "RAM samples per host for --svg")
	f.Int64Var(&seed, "seed", 0, "override the scenario's seed")
	f.BoolVar(&parallel, "parallel", true, "run the policies concurrently")
	f.StringVar(&generate, "generate", "", "instead of a file, run a generated scenario with this many hosts (see --hours)")
	f.Float64("hours", 24, "simulated hours for --generate")
	f.StringArrayVar(&sets, "set", nil, "change an option, by its nova.conf name: --set filter_scheduler.host_subset_size=1 (repeatable)")
	f.StringVar(&drains, "drain", "", "drain these hosts (comma-separated) from t=0, the scheduler choosing each destination")
	f.IntVar(&inFlight, "in-flight", 1, "moves in flight at once for --drain and --rebalance (a drain's in_flight)")
	f.BoolVar(&rebal, "rebalance", false, "once the drains are done (at t=0 without any), plan a rebalance and run its moves")
	f.StringVar(&metric, "metric", "ram", "--rebalance's metric: ram, vcpu, disk or max")
	f.Float64Var(&thresh, "threshold", rebalance.DefaultThreshold, "--rebalance acts above this CV and stops below half of it")
	f.IntVar(&maxMoves, "max-moves", 0, "--rebalance's most moves (0: no cap)")
	return cmd
}

// whatIf applies --set and --drain to a scenario and checks the result.
func whatIf(sc *scenario.Scenario, sets []string, drains string, inFlight int) error {
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("--set wants KEY=VALUE, got %q", kv)
		}
		if err := sc.Set(strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
			return err
		}
	}
	if drains != "" {
		if inFlight < 1 || inFlight > scenario.MaxConcurrent {
			return fmt.Errorf("--in-flight must be between 1 and %d, got %d", scenario.MaxConcurrent, inFlight)
		}
		yes := true
		sc.Drains = append(sc.Drains, scenario.Drain{InFlight: inFlight, Hosts: strings.Split(drains, ","), Disable: &yes})
	}
	if len(sets) > 0 || drains != "" {
		if err := sc.Validate(); err != nil {
			return fmt.Errorf("after --set/--drain: %w", err)
		}
		sc.ApplyDefaults()
	}
	return nil
}
