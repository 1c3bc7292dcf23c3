package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"keel/internal/rebalance"
	"keel/internal/sim"
	"keel/internal/sim/scenario"
)

// simFlags are keel sim's flags.
type simFlags struct {
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
	cpuProf  string
}

func simCommand() *cobra.Command {
	var fl simFlags
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
			if fl.generate != "" && len(args) == 0 {
				return nil
			}
			if len(args) != 1 {
				return fmt.Errorf("sim needs one scenario file (e.g. keel sim scenarios/seed-hour.toml), or --generate HOSTS")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runSim(cmd, args, fl) },
	}
	cmd.AddCommand(simExportCommand())
	f := cmd.Flags()
	f.StringVar(&fl.policy, "policy", "", "run only these policies (comma-separated: legacy, dest-update, claim); default: the scenario's")
	f.StringVar(&fl.format, "format", "table", "output format: table or json")
	f.StringVar(&fl.svgPath, "svg", "", "write a chart of each host's RAM use over time, one panel per policy, to this file")
	f.IntVar(&fl.samples, "samples", 360, "RAM samples per host for --svg")
	f.Int64Var(&fl.seed, "seed", 0, "override the scenario's seed")
	f.BoolVar(&fl.parallel, "parallel", true, "run the policies concurrently")
	f.StringVar(&fl.generate, "generate", "", "instead of a file, run a generated scenario with this many hosts (see --hours)")
	f.Float64("hours", 24, "simulated hours for --generate")
	f.StringArrayVar(&fl.sets, "set", nil, "change an option, by its nova.conf name: --set filter_scheduler.host_subset_size=1 (repeatable)")
	f.StringVar(&fl.drains, "drain", "", "drain these hosts (comma-separated) from t=0 as keel host drain does (largest first), the scheduler choosing each destination")
	f.IntVar(&fl.inFlight, "in-flight", 1, "moves in flight at once for --drain and --rebalance (a drain's in_flight)")
	f.BoolVar(&fl.rebal, "rebalance", false, "once the drains are done (at t=0 without any), plan a rebalance and run its moves")
	f.StringVar(&fl.metric, "metric", "ram", "--rebalance's metric: ram, vcpu, disk or max")
	f.Float64Var(&fl.thresh, "threshold", rebalance.DefaultThreshold, "--rebalance acts above this CV and stops below half of it")
	f.IntVar(&fl.maxMoves, "max-moves", 0, "--rebalance's most moves (0: no cap)")
	f.StringVar(&fl.cpuProf, "cpuprofile", "", "write a CPU profile of the run (building the world to the report) to this file, for go tool pprof")
	return cmd
}

// runSim is keel sim: check the flags, read (or generate) the scenario,
// apply the what-if flags, run it under each policy and print the report.
func runSim(cmd *cobra.Command, args []string, fl simFlags) error {
	// Flags are checked before the scenario is read or run: a bad one is
	// refused (exit 1), never ignored nor reported only inside the report.
	if err := checkSimFlags(cmd, len(args) == 1, fl.samples, fl.svgPath != ""); err != nil {
		return err
	}
	sc, err := simScenario(cmd, args, fl.generate)
	if err != nil {
		return err
	}
	if cmd.Flags().Changed("seed") {
		sc.Seed = fl.seed
	}
	if err := whatIf(sc, fl.sets, fl.drains, fl.inFlight); err != nil {
		return err
	}
	opts, err := simOptions(sc, fl)
	if err != nil {
		return err
	}
	// Fewer collections, under a soft memory limit (sim.TuneGC).
	defer sim.TuneGC(len(sc.Hosts()))()
	if fl.cpuProf != "" {
		stop, err := startCPUProfile(environOf(cmd.Context()).path(fl.cpuProf))
		if err != nil {
			return err
		}
		defer stop()
	}
	rep, err := sim.Run(cmd.Context(), sc, opts)
	if err != nil {
		return err
	}
	if fl.svgPath != "" {
		if err := writeSimChart(rep, environOf(cmd.Context()).path(fl.svgPath)); err != nil {
			return err
		}
	}
	if fl.format == "json" {
		return rep.WriteJSON(cmd.OutOrStdout())
	}
	return rep.WriteTable(cmd.OutOrStdout())
}

// simScenario reads the scenario file args names, or generates one of
// --generate hosts over --hours.
func simScenario(cmd *cobra.Command, args []string, generate string) (*scenario.Scenario, error) {
	if len(args) == 1 {
		return scenario.Load(environOf(cmd.Context()).path(args[0]))
	}
	var hosts int
	if _, err := fmt.Sscan(generate, &hosts); err != nil || hosts < 1 {
		return nil, fmt.Errorf("--generate wants a host count, got %q", generate)
	}
	if hosts > scenario.MaxHosts {
		return nil, fmt.Errorf("--generate: the simulator runs at most %d hosts, got %d", scenario.MaxHosts, hosts)
	}
	hours, _ := cmd.Flags().GetFloat64("hours")
	if !(hours > 0) || hours*3600 > scenario.MaxDuration {
		return nil, fmt.Errorf("--hours must be more than 0 and at most %v, got %v", scenario.MaxDuration/3600, hours)
	}
	sc := scenario.Generate(hosts, hours, 1)
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("--generate %d --hours %v is beyond the simulator's limits (lower --hours or --generate): %w", hosts, hours, err)
	}
	return sc, nil
}

// simOptions turns the flags into the run's options: the rebalance, the
// policies (each named once) and the chart's samples.
func simOptions(sc *scenario.Scenario, fl simFlags) (sim.Options, error) {
	opts := sim.Options{Parallel: fl.parallel, Progress: os.Stderr}
	if fl.rebal {
		m, _ := rebalance.ParseMetric(fl.metric) // checked by checkSimFlags
		opts.Rebalance = &sim.RebalanceOptions{InFlight: fl.inFlight,
			Planner: rebalance.Options{Metric: m, Threshold: fl.thresh, MaxMoves: fl.maxMoves, Seed: uint64(sc.Seed)}}
	}
	if fl.policy != "" {
		opts.Policies = strings.Split(fl.policy, ",")
		for i, p := range opts.Policies {
			p = strings.TrimSpace(p)
			opts.Policies[i] = p
			if p == "" {
				return opts, fmt.Errorf("--policy %q has an empty name (known: %s)", fl.policy, strings.Join(scenario.KnownPolicies, ", "))
			}
			if j := slices.Index(opts.Policies, p); j < i {
				return opts, fmt.Errorf("--policy lists %q twice", p)
			}
		}
	}
	if fl.svgPath != "" {
		if hosts := len(sc.Hosts()); fl.samples*hosts > maxSampleValues {
			return opts, fmt.Errorf("--samples %d × %d hosts is %d RAM values a policy, more than --svg keeps (%d): lower --samples to at most %d",
				fl.samples, hosts, fl.samples*hosts, maxSampleValues, max(1, maxSampleValues/hosts))
		}
		opts.Samples = fl.samples
	}
	return opts, nil
}

// startCPUProfile starts a CPU profile into path and returns what stops
// it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "--cpuprofile: %v\n", err)
		}
	}, nil
}

// writeSimChart writes the report's chart to path.
func writeSimChart(rep *sim.Report, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing chart: %w", err)
	}
	if err := rep.WriteSVG(f); err != nil {
		f.Close()
		return fmt.Errorf("writing chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing chart %s: %w", path, err)
	}
	fmt.Fprintf(os.Stderr, "chart written to %s\n", path)
	return nil
}

// Bounds on the flags: --samples per host, and the RAM values --svg keeps
// per policy (samples × hosts; 8 bytes each, 200 MB a policy at most).
const (
	maxSamples      = 10_000
	maxSampleValues = 25_000_000
)

// checkSimFlags refuses flag values keel sim cannot use, and flags that
// would be ignored, before anything runs. file says a scenario file is
// given, svg that --svg is.
func checkSimFlags(cmd *cobra.Command, file bool, samples int, svg bool) error {
	f := cmd.Flags()
	changed := func(name string) bool { return f.Changed(name) }
	getInt := func(name string) int { v, _ := f.GetInt(name); return v }
	switch {
	case file && changed("generate"):
		return fmt.Errorf("--generate runs a generated scenario instead of a file: give a scenario file or --generate, not both")
	case !changed("generate") && changed("hours"):
		return fmt.Errorf("--hours is --generate's length: it needs --generate HOSTS")
	case svg && (samples < 1 || samples > maxSamples):
		return fmt.Errorf("--svg needs --samples between 1 and %d, got %d", maxSamples, samples)
	case !svg && changed("samples"):
		return fmt.Errorf("--samples is for --svg's chart: it needs --svg FILE")
	}
	format, _ := f.GetString("format")
	if format != "table" && format != "json" {
		return fmt.Errorf("--format must be table or json, not %q", format)
	}
	drain, _ := f.GetString("drain")
	rebal, _ := f.GetBool("rebalance")
	if n := getInt("in-flight"); (drain != "" || rebal) && (n < 1 || n > scenario.MaxConcurrent) {
		return fmt.Errorf("--in-flight must be between 1 and %d, got %d", scenario.MaxConcurrent, n)
	}
	if changed("in-flight") && drain == "" && !rebal {
		return fmt.Errorf("--in-flight is for --drain and --rebalance: it needs one of them")
	}
	for _, name := range []string{"metric", "threshold", "max-moves"} {
		if changed(name) && !rebal {
			return fmt.Errorf("--%s is for --rebalance: it needs --rebalance", name)
		}
	}
	if !rebal {
		return nil
	}
	metric, _ := f.GetString("metric")
	if _, err := rebalance.ParseMetric(metric); err != nil {
		return fmt.Errorf("--metric: %w", err)
	}
	if t, _ := f.GetFloat64("threshold"); checkThreshold(t) != nil {
		return checkThreshold(t)
	}
	if n := getInt("max-moves"); n < 0 {
		return fmt.Errorf("--max-moves must be ≥ 0 (0: no cap), got %d", n)
	}
	return nil
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
		yes := true
		// As keel host drain: its default order, the largest first.
		sc.Drains = append(sc.Drains, scenario.Drain{InFlight: inFlight, Hosts: strings.Split(drains, ","), Disable: &yes, Order: "largest"})
	}
	if len(sets) > 0 || drains != "" {
		if err := sc.Validate(); err != nil {
			return fmt.Errorf("after --set/--drain: %w", err)
		}
		sc.ApplyDefaults()
	}
	return nil
}
