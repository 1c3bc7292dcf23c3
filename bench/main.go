package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
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
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: keelbench [--json|--markdown] [--quick] [--only SECTIONS] [--quiet] [--cpuprofile FILE]\n\n"+
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
	opts := Options{Quick: *quick}
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
