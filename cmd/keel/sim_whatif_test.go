package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"keel/internal/sim"
)

// TestSimWhatIf: --set, --drain and --rebalance on seed-hour: the drain
// replaces the file's (h01, h02 are disabled at t=0 in the file and
// drained again here — the same instances), host_subset_size=1 changes
// where they go, and the rebalance's report and chart come out.
func TestSimWhatIf(t *testing.T) {
	t.Parallel()
	seed := filepath.Join("..", "..", "scenarios", "seed-hour.toml")
	svg := filepath.Join(t.TempDir(), "whatif.svg")
	out, err := run(t, "sim", seed, "--policy", "legacy,claim", "--set", "filter_scheduler.host_subset_size=1",
		"--set", "DEFAULT.update_resources_interval=7200", "--drain", "h03,h04", "--in-flight", "4", "--rebalance", "--format", "json", "--svg", svg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rep sim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Policies) != 2 {
		t.Fatalf("%d policies", len(rep.Policies))
	}
	for _, p := range rep.Policies {
		rb := p.Rebalance
		if rb == nil {
			t.Fatalf("%s: no rebalance in the report", p.Policy)
		}
		// Both drains (the file's h01, h02 and --drain's h03, h04) move
		// their 48 instances; the rebalance runs after them.
		if p.Migrations != 48+rb.Moved || p.FailedMigrations != 0 || rb.Failed != 0 {
			t.Errorf("%s: %d migrations (%d failed), rebalance %+v", p.Policy, p.Migrations, p.FailedMigrations, rb)
		}
		for _, h := range []string{"h01", "h02", "h03", "h04"} {
			if _, ok := p.Final.RAMUsedMB[h]; ok {
				t.Errorf("%s: drained %s still counted as enabled", p.Policy, h)
			}
		}
		if p.Final.RAMCV > 0.1 {
			t.Errorf("%s: ram cv %.3f after the drain and rebalance", p.Policy, p.Final.RAMCV)
		}
	}
	// host_subset_size=1 with hourly-plus audits: legacy piles onto one
	// host, and the rebalance has work to do.
	if l := rep.Policies[0]; l.Rebalance.Planned == 0 || l.Rebalance.CVBefore <= 0.10 {
		t.Errorf("legacy with host_subset_size=1: rebalance %+v", l.Rebalance)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("chart: %v", err)
	}

	table := mustRun(t, "sim", seed, "--policy", "legacy", "--rebalance", "--max-moves", "5")
	wantContains(t, table, "rebalance at t=1418s: 5 moves planned", "5 done", "max moves (5) reached")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "filter_scheduler.nope=1"}, "--set filter_scheduler.nope: unknown option"},
		// issue 24 item 10: a misspelt option gets a "did you mean".
		{[]string{"--set", "filter_scheduler.host_subset_sise=1"}, "--set filter_scheduler.host_subset_sise: unknown option; did you mean filter_scheduler.host_subset_size?"},
		{[]string{"--set", "scheduler.ram_weight_multiplyer=2"}, "did you mean scheduler.ram_weight_multiplier?"},
		{[]string{"--set", "host_subset_size"}, "--set wants KEY=VALUE"},
		{[]string{"--set", "filter_scheduler.host_subset_size=-1"}, "scheduler.host_subset_size: must be between 0"},
		{[]string{"--drain", "h99"}, `no host is named "h99"`},
		{[]string{"--drain", "h03", "--in-flight", "0"}, "--in-flight must be between 1"},
		{[]string{"--rebalance", "--metric", "iops"}, `--metric: unknown metric "iops"`},
	} {
		_, err := run(t, append([]string{"sim", seed}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}
