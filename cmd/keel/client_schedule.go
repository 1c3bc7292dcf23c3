package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"keel/internal/client"
)

func scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Ask keel's scheduler about its decisions",
	}
	cmd.AddCommand(scheduleExplainCommand())
	return cmd
}

func scheduleExplainCommand() *cobra.Command {
	var (
		cf          *clientFlags
		flavor      string
		ignoreHosts []string
		host        string
		pickSeed    uint64
	)
	cmd := &cobra.Command{
		Use:   "explain --flavor FLAVOR",
		Short: "Show where a server of a flavor would go, and why every other host would not",
		Long: `explain runs the scheduler's filters and weighers for a boot of a flavor
(by id or name) without claiming anything (POST /keel/v1/schedule/explain,
admin). It prints the candidates by rank with their total weight and each
weigher's normalised value (0–1; the weight is the sum of normalised ×
multiplier), then the rejected hosts grouped by the filter that rejected
them, with its reason.

The scheduler picks at random among the first host_subset_size candidates
(marked *), so the top rank is not always the host chosen. --ignore-host
excludes hosts as a live migration excludes its source; --host checks one
host as a migration to it would.

Each decision the server makes is logged as "scheduled" with its
pick_seed; --pick-seed N names the host that seed picks among the
candidates shown, so a past pick can be replayed on the cloud as it is
(the same hosts, ranked as they were: the pick is only as reproducible
as the ranking).` + clientLong,
		Example: `  keel schedule explain --flavor m1.small
  keel schedule explain --flavor m1.large --ignore-host h01 --ignore-host h02
  keel schedule explain --flavor 3 --host h04 --format json
  keel schedule explain --flavor m1.small --pick-seed 11400714819323198485`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if flavor == "" {
				return errors.New("explain needs --flavor (an id or a name such as m1.small)")
			}
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			e, err := c.Explain(cmd.Context(), client.ExplainRequest{Flavor: flavor, IgnoreHosts: ignoreHosts, Host: host, PickSeed: pickSeed})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				return writeJSON(out, e)
			}
			var cands, rejected []client.HostExplanation
			for _, h := range e.Hosts {
				if h.RejectedBy == "" {
					cands = append(cands, h)
				} else {
					rejected = append(rejected, h)
				}
			}
			sort.SliceStable(cands, func(i, j int) bool { return cands[i].Rank < cands[j].Rank })
			f := e.Flavor
			fmt.Fprintf(out, "flavor %s (id %s): %d vCPU, %d MiB RAM, %d GB disk\n", f.Name, f.ID, f.VCPUs, f.RAMMB, f.DiskGB)
			if len(cands) == 0 {
				fmt.Fprintf(out, "no host passes the filters (%s): a boot would fail with No valid host\n", count(len(e.Hosts), "host", "hosts"))
			} else {
				fmt.Fprintf(out, "%d of %s pass the filters; keel picks at random among the first %d (host_subset_size, marked *)\n\n",
					len(cands), count(len(e.Hosts), "host", "hosts"), e.HostSubsetSize)
				if err := printCandidates(out, cands, e.HostSubsetSize); err != nil {
					return err
				}
				if pickSeed != 0 && e.Picked != "" {
					fmt.Fprintf(out, "pick seed %d picks %s\n", pickSeed, e.Picked)
				}
			}
			if len(rejected) == 0 {
				return nil
			}
			fmt.Fprintf(out, "\nrejected (%d):\n", len(rejected))
			byFilter := map[string][]client.HostExplanation{}
			var filters []string
			for _, h := range rejected {
				if _, ok := byFilter[h.RejectedBy]; !ok {
					filters = append(filters, h.RejectedBy)
				}
				byFilter[h.RejectedBy] = append(byFilter[h.RejectedBy], h)
			}
			sort.Strings(filters)
			for _, name := range filters {
				hs := byFilter[name]
				fmt.Fprintf(out, "  %s (%d):\n", name, len(hs))
				t := newTable(out)
				for _, h := range hs {
					t.rowRaw("   ", h.Host, h.Reason)
				}
				if err := t.flush(); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cf = addClientFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&flavor, "flavor", "", "flavor id or name (required)")
	fl.StringSliceVar(&ignoreHosts, "ignore-host", nil, "exclude this host (repeatable, or comma-separated)")
	fl.StringVar(&host, "host", "", "check only this host (as a migration to it would)")
	fl.Uint64Var(&pickSeed, "pick-seed", 0, "a past decision's pick_seed (its \"scheduled\" log line): name the host it picks")
	return cmd
}

// printCandidates prints the ranked candidates with each weigher's
// normalised value; weighers with multiplier 0 (which cannot matter) are
// left out and named below.
func printCandidates(out interface{ Write([]byte) (int, error) }, cands []client.HostExplanation, subset int) error {
	if len(cands) == 1 {
		// One candidate: no weighing happens, so no weight or
		// multipliers to show (they would read WEIGHT 0.000).
		fmt.Fprintf(out, "%s is the only candidate: picked without weighing\n", cands[0].Host)
		return nil
	}
	var names []string
	mult := map[string]float64{}
	for _, s := range cands[0].Scores {
		names = append(names, s.Weigher)
		mult[s.Weigher] = s.Multiplier
	}
	var shown, omitted []string
	for _, n := range names {
		if mult[n] == 0 {
			omitted = append(omitted, short(n))
		} else {
			shown = append(shown, n)
		}
	}
	header := []string{"RANK", "HOST", "WEIGHT"}
	for _, n := range shown {
		header = append(header, short(n))
	}
	t := newTable(out, header...)
	for _, h := range cands {
		rank := fmt.Sprint(h.Rank)
		if h.Rank <= subset {
			rank += "*"
		}
		row := []string{rank, h.Host, fmt.Sprintf("%.3f", h.Weight)}
		norm := map[string]float64{}
		for _, s := range h.Scores {
			norm[s.Weigher] = s.Normalized
		}
		for _, n := range shown {
			row = append(row, fmt.Sprintf("%.3f", norm[n]))
		}
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	var ms []string
	for _, n := range shown {
		ms = append(ms, fmt.Sprintf("%s ×%g", short(n), mult[n]))
	}
	fmt.Fprintf(out, "\nweight = Σ normalised × multiplier; multipliers: %s\n", strings.Join(ms, ", "))
	if len(omitted) > 0 {
		fmt.Fprintf(out, "not shown (multiplier 0): %s\n", strings.Join(omitted, ", "))
	}
	return nil
}

// short drops the "Weigher" suffix from a weigher's name for a column.
func short(weigher string) string { return strings.TrimSuffix(weigher, "Weigher") }
