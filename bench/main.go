package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// Main is keelbench's command line: it parses args, runs the harness and
// prints the report to stdout (progress lines go to stderr).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keelbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the figures as one JSON object instead of a table")
	asMarkdown := fs.Bool("markdown", false, "print the table as Markdown (docs/performance.md's)")
	quick := fs.Bool("quick", false, "shrink every size: runs in seconds, checks the harness works; the figures mean little")
	only := fs.String("only", "", "run only these sections, comma-separated: "+strings.Join(Sections, ", "))
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (keel's servers run in this process) to this file, for go tool pprof")
	serverProfile := fs.String("server-cpuprofile", "", "fleet: write a CPU profile of the keel server process over the ramp's last step (or the one that fell behind) to this file")
	fleetSteps := fs.String("fleet-steps", "", "fleet: the ramp's host counts, comma-separated (default 100,1000,2000,5000,10000; quick 4,12)")
	fleetPeriod := fs.Duration("fleet-period", 0, "fleet: how long each step is measured (default 1m; quick 4s)")
	fleetStore := fs.String("fleet-store", "sqlite", "fleet: the servers' store: sqlite (one server, its embedded NATS) or postgres (a throw-away PostgreSQL cluster and Debian's nats-server, started and stopped by the run)")
	fleetReplicas := fs.Int("fleet-replicas", 1, "fleet: how many keel servers share the store and bus (more than 1 needs --fleet-store postgres)")
	fleetRestart := fs.Bool("fleet-restart", false, "fleet: after the ramp, restart the server (SIGINT, then the same data dir and ports) with every agent connected, and measure how long until every host's heartbeat is answered again and what the herd costs (SQLite only)")
	fleetNoStop := fs.Bool("fleet-no-stop", false, "fleet: measure every step even after one fell behind (a loaded machine's figures; such a step never holds)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: keelbench [--json|--markdown] [--quick] [--only SECTIONS] [--quiet] [--cpuprofile FILE] [--server-cpuprofile FILE] [--fleet-steps N,N…] [--fleet-period D] [--fleet-no-stop] [--fleet-restart] [--fleet-store sqlite|postgres] [--fleet-replicas N]\n\n"+
			"Runs keel's benchmarks and prints one table, each figure with its conditions.\n"+
			"Sections: %s.\n\n", strings.Join(Sections, ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	if *fleetStore != "sqlite" && *fleetStore != "postgres" {
		return fmt.Errorf("--fleet-store: %q is neither sqlite nor postgres", *fleetStore)
	}
	opts := Options{Quick: *quick, ServerProfile: *serverProfile, FleetPeriod: *fleetPeriod, FleetNoStop: *fleetNoStop,
		FleetStore: *fleetStore, FleetReplicas: *fleetReplicas, FleetRestart: *fleetRestart}
	if *fleetSteps != "" {
		for _, s := range strings.Split(*fleetSteps, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				return fmt.Errorf("--fleet-steps: %q is not a positive host count", s)
			}
			opts.FleetSteps = append(opts.FleetSteps, n)
		}
	}
	if *only != "" {
		for _, s := range strings.Split(*only, ",") {
			opts.Only = append(opts.Only, strings.TrimSpace(s))
		}
	}
	if !*quiet {
		opts.Progress = stderr
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := Run(ctx, opts)
	if err != nil {
		return err
	}
	switch {
	case *asJSON:
		return rep.WriteJSON(stdout)
	case *asMarkdown:
		return rep.WriteMarkdown(stdout)
	}
	return rep.WriteTable(stdout)
}
