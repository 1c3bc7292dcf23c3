package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes the keel command line with args in t's environ and
// returns stdout and the error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runIO(t, &out, &bytes.Buffer{}, args...)
	return out.String(), err
}

func TestSimCommandPrintsEachPolicy(t *testing.T) {
	t.Parallel()
	out, err := run(t, "sim", filepath.Join("..", "..", "scenarios", "seed-hour.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"legacy", "dest-update", "claim", "share→initially best", "initially best h03,h04,h05"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSimCommandJSONAndSVG(t *testing.T) {
	t.Parallel()
	svg := filepath.Join(t.TempDir(), "skew.svg")
	out, err := run(t, "sim", filepath.Join("..", "..", "scenarios", "seed-hour.toml"), "--policy", "legacy,claim", "--format", "json", "--svg", svg)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Scenario string `json:"scenario"`
		Seed     int64  `json:"seed"`
		Policies []struct {
			Policy string  `json:"policy"`
			Share  float64 `json:"share_to_initially_best"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--format json printed something else: %v\n%s", err, out)
	}
	if rep.Scenario != "seed-hour" || rep.Seed != 1 || len(rep.Policies) != 2 || rep.Policies[0].Policy != "legacy" || rep.Policies[1].Policy != "claim" {
		t.Fatalf("report = %+v", rep)
	}
	if rep.Policies[0].Share <= rep.Policies[1].Share {
		t.Errorf("legacy share %.2f is not above claim's %.2f", rep.Policies[0].Share, rep.Policies[1].Share)
	}
	data, err := os.ReadFile(svg)
	if err != nil || !bytes.Contains(data, []byte("<svg")) || bytes.Count(data, []byte("<polyline")) < 24 {
		t.Fatalf("--svg wrote %d bytes (%v), want a chart with a line per host and policy", len(data), err)
	}
}

func TestSimCommandRefusesBadInput(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("name = \"x\"\nseed = 1\nduration = -5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"bad.toml:3":         {"sim", bad},
		"no such file":       {"sim", filepath.Join(t.TempDir(), "missing.toml")},
		"--format must be":   {"sim", filepath.Join("..", "..", "scenarios", "seed-hour.toml"), "--format", "xml"},
		"unknown policy":     {"sim", filepath.Join("..", "..", "scenarios", "seed-hour.toml"), "--policy", "best"},
		"needs one scenario": {"sim"},
		"wants a host count": {"sim", "--generate", "many"},
	}
	for want, args := range cases {
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("keel %v: error %v, want one containing %q", args, err, want)
		}
	}
}

func TestSimCommandRefusesRepeatsAndAChartWithoutSamples(t *testing.T) {
	t.Parallel()
	seed := filepath.Join("..", "..", "scenarios", "seed-hour.toml")
	if _, err := run(t, "sim", seed, "--policy", "legacy,claim,legacy"); err == nil || err.Error() != `--policy lists "legacy" twice` {
		t.Errorf("--policy legacy,claim,legacy: error %v, want one naming the repeat", err)
	}
	svg := filepath.Join(t.TempDir(), "x.svg")
	if _, err := run(t, "sim", seed, "--svg", svg, "--samples", "0"); err == nil || !strings.Contains(err.Error(), "--svg needs --samples between 1 and 10000, got 0") {
		t.Errorf("--svg with --samples 0: error %v", err)
	}
	if _, err := os.Stat(svg); !os.IsNotExist(err) {
		t.Errorf("--svg with --samples 0 left %s behind (stat: %v)", svg, err)
	}
}

// TestSimCommandRefusesBadFlagsUpFront: every flag keel sim cannot use,
// and every flag it would ignore, is refused with exit 1 before anything
// runs (accept6 D2, D7 and the ignored --generate), and no chart is left
// behind.
func TestSimCommandRefusesBadFlagsUpFront(t *testing.T) {
	t.Parallel()
	seed := filepath.Join("..", "..", "scenarios", "seed-hour.toml")
	svg := filepath.Join(t.TempDir(), "x.svg")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{seed, "--rebalance", "--threshold", "NaN"}, "--threshold must be a coefficient of variation above 0 (the planner acts above it and stops below half of it, so 0 would never stop; try 0.01 for a tight balance, or leave it out for 0.1), got NaN"},
		{[]string{seed, "--rebalance", "--threshold", "-1"}, "--threshold must be a coefficient of variation above 0 (the planner acts above it and stops below half of it, so 0 would never stop; try 0.01 for a tight balance, or leave it out for 0.1), got -1"},
		{[]string{seed, "--rebalance", "--threshold", "Inf"}, "--threshold must be a coefficient of variation above 0 (the planner acts above it and stops below half of it, so 0 would never stop; try 0.01 for a tight balance, or leave it out for 0.1), got +Inf"},
		// 0 was read as the default 0.1 (issue 24).
		{[]string{seed, "--rebalance", "--threshold", "0"}, "--threshold must be a coefficient of variation above 0 (the planner acts above it and stops below half of it, so 0 would never stop; try 0.01 for a tight balance, or leave it out for 0.1), got 0"},
		{[]string{seed, "--rebalance", "--max-moves", "-1"}, "--max-moves must be ≥ 0 (0: no cap), got -1"},
		{[]string{seed, "--rebalance", "--in-flight", "0"}, "--in-flight must be between 1 and 10000, got 0"},
		{[]string{seed, "--threshold", "0.2"}, "--threshold is for --rebalance: it needs --rebalance"},
		{[]string{seed, "--max-moves", "3"}, "--max-moves is for --rebalance: it needs --rebalance"},
		{[]string{seed, "--metric", "vcpu"}, "--metric is for --rebalance: it needs --rebalance"},
		{[]string{seed, "--in-flight", "4"}, "--in-flight is for --drain and --rebalance: it needs one of them"},
		{[]string{seed, "--svg", svg, "--samples", "1000000000"}, "--svg needs --samples between 1 and 10000, got 1000000000"},
		{[]string{seed, "--samples", "10"}, "--samples is for --svg's chart: it needs --svg FILE"},
		{[]string{"--generate", "50000", "--svg", svg, "--samples", "10000"}, "--samples 10000 × 50000 hosts is 500000000 RAM values a policy, more than --svg keeps (25000000): lower --samples to at most 500"},
		{[]string{seed, "--generate", "10"}, "--generate runs a generated scenario instead of a file: give a scenario file or --generate, not both"},
		{[]string{seed, "--hours", "2"}, "--hours is --generate's length: it needs --generate HOSTS"},
		{[]string{"--generate", "100001"}, "--generate: the simulator runs at most 100000 hosts, got 100001"},
		{[]string{"--generate", "10000", "--hours", "100"}, "--generate 10000 --hours 100 is beyond the simulator's limits (lower --hours or --generate): generated-10000-hosts-100h: workload[2].rate: the workloads ask for 1.08e+06 operations (rate × (end − start), summed) with this one, more than the simulator runs (1000000); lower a rate or shorten a workload"},
		{[]string{seed, "--policy", ","}, `--policy "," has an empty name (known: legacy, dest-update, claim)`},
	}
	for _, tc := range cases {
		_, err := run(t, append([]string{"sim"}, tc.args...)...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("keel sim %v:\n got %v\nwant %s", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(svg); !os.IsNotExist(err) {
		t.Errorf("a refused flag left %s behind (stat: %v)", svg, err)
	}
	// Spaces around a policy name are not part of it.
	out, err := run(t, "sim", seed, "--policy", "legacy, claim", "--format", "json")
	if err != nil || !strings.Contains(out, `"policy": "claim"`) {
		t.Errorf("--policy 'legacy, claim': %v\n%s", err, out)
	}
}

// TestSimTableSaysNoHostWasBest: with no host passing the filters at t=0
// the table says so instead of an empty list.
func TestSimTableSaysNoHostWasBest(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "off.toml")
	data := "duration = 10\npolicies = [\"claim\"]\n[[hosts]]\nprefix = \"h\"\ncount = 1\nvcpus = 1\nmemory_mb = 1024\ndisk_gb = 1\ndisabled = true\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "sim", path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "claim: initially best none (no host passed the filters for the first flavor at t=0); destinations none"; !strings.Contains(out, want) {
		t.Errorf("table lacks %q:\n%s", want, out)
	}
}

// TestSimRebalanceByMeasured: `keel sim --rebalance --metric measured`
// rebalances on the hosts' measured CPU. After seed-metrics' drain under
// the claim policy the hosts measure within 0.03 of each other (CV); at a
// threshold of 0.02 the planner moves guests until the measured CV falls,
// every planned move is made, and the JSON report says the metric.
func TestSimRebalanceByMeasured(t *testing.T) {
	t.Parallel()
	out, err := run(t, "sim", filepath.Join("..", "..", "scenarios", "seed-metrics.toml"), "--policy", "claim",
		"--rebalance", "--metric", "measured", "--threshold", "0.02", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Policies []struct {
			Policy    string `json:"policy"`
			Rebalance *struct {
				Metric    string  `json:"metric"`
				CVBefore  float64 `json:"cv_before"`
				CVPlanned float64 `json:"cv_planned"`
				Planned   int     `json:"planned"`
				Moved     int     `json:"moved"`
				Failed    int     `json:"failed"`
			} `json:"rebalance"`
			Final struct {
				Measured struct {
					CPUPercentCV float64 `json:"cpu_percent_cv"`
				} `json:"measured"`
			} `json:"final"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--format json printed something else: %v\n%s", err, out)
	}
	if len(rep.Policies) != 1 || rep.Policies[0].Rebalance == nil {
		t.Fatalf("report %+v: want claim's rebalance", rep)
	}
	r := rep.Policies[0].Rebalance
	if r.Metric != "measured" || r.Planned == 0 || r.Moved != r.Planned || r.Failed != 0 || !(r.CVPlanned < r.CVBefore) || r.CVBefore <= 0.02 {
		t.Errorf("rebalance %+v: want moves planned and made on the measured CV (above 0.02), lowering it", *r)
	}
	// Planned right after the drain, the planner counts the last moves
	// the hosts have not reported yet where they landed (as the
	// scheduler assumes a claim): the end measures what it planned.
	if end := rep.Policies[0].Final.Measured.CPUPercentCV; math.Abs(end-r.CVPlanned) > 0.01 {
		t.Errorf("measured CPU CV at the end %.3f, planned %.3f: want the plan's", end, r.CVPlanned)
	}
}
