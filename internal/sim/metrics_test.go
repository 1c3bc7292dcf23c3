package sim

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"keel/internal/sim/scenario"
)

// TestSeedMetrics runs scenarios/seed-metrics.toml: MetricsWeigher on
// measured cpu.percent piles every move of the drain onto the three
// hosts that measured idlest at t=0 when metrics are refreshed only by
// the hourly audit (legacy, Nova today), and spreads them when the
// destination measures after each move (dest-update) or the view follows
// claims (claim).
func TestSeedMetrics(t *testing.T) {
	sc, err := scenario.Load(filepath.Join("..", "..", "scenarios", "seed-metrics.toml"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]PolicyReport{}
	for _, p := range rep.Policies {
		got[p.Policy] = p
	}
	if l := got["legacy"]; l.ShareToInitiallyBest != 1 || l.Migrations != 24 {
		t.Errorf("legacy: share %.2f of %d moves to the initially best, want all 24", l.ShareToInitiallyBest, l.Migrations)
	}
	for _, p := range []string{"dest-update", "claim"} {
		if r := got[p]; r.ShareToInitiallyBest > 0.5 || r.Final.RAMCV >= got["legacy"].Final.RAMCV/2 || r.Migrations != 24 {
			t.Errorf("%s: share %.2f, ram cv %.3f (legacy %.3f): want the moves spread", p, r.ShareToInitiallyBest, r.Final.RAMCV, got["legacy"].Final.RAMCV)
		}
	}
}

// TestSeedMetricsRefusesImpossibleWorkload: a flavor's workload above its
// vCPUs is refused with the file, line and field.
func TestSeedMetricsRefusesImpossibleWorkload(t *testing.T) {
	_, err := scenario.Parse("bad.toml", []byte("duration = 60\n[[flavor]]\nname = \"f\"\nvcpus = 1\nram = 512\ndisk = 1\nworkload = \"constant cpu=2\"\n[[hosts]]\nname = \"h1\"\nvcpus = 4\nmemory_mb = 4096\ndisk_gb = 10\n"))
	if err == nil || !strings.Contains(err.Error(), "bad.toml:7: flavor[0].workload: cpu=2 is above the flavor's 1 vCPUs") {
		t.Errorf("err = %v", err)
	}
}
