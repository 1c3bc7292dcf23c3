package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes the keel command line with args and returns stdout and the
// error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := rootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestSimCommandPrintsEachPolicy(t *testing.T) {
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
	seed := filepath.Join("..", "..", "scenarios", "seed-hour.toml")
	if _, err := run(t, "sim", seed, "--policy", "legacy,claim,legacy"); err == nil || err.Error() != `--policy lists "legacy" twice` {
		t.Errorf("--policy legacy,claim,legacy: error %v, want one naming the repeat", err)
	}
	svg := filepath.Join(t.TempDir(), "x.svg")
	if _, err := run(t, "sim", seed, "--svg", svg, "--samples", "0"); err == nil || !strings.Contains(err.Error(), "--svg needs --samples of at least 1") {
		t.Errorf("--svg with --samples 0: error %v", err)
	}
	if _, err := os.Stat(svg); !os.IsNotExist(err) {
		t.Errorf("--svg with --samples 0 left %s behind (stat: %v)", svg, err)
	}
}
