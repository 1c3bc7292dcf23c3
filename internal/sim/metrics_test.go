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
	for _, p := range []string{"legacy", "dest-update", "claim"} {
		m := got[p].Final.Measured
		if m == nil || len(m.CPUPercent) != 10 {
			t.Fatalf("%s: measured %+v, want the 10 enabled hosts' cpu.percent", p, m)
		}
	}
	if l, c := got["legacy"].Final.Measured, got["claim"].Final.Measured; !(c.CPUCV < l.CPUCV/2) || !(l.CPUMaxOverMean > 1.2) {
		t.Errorf("measured cpu cv: legacy %.3f (max/mean %.2f), claim %.3f: want legacy's pile-up measured", l.CPUCV, l.CPUMaxOverMean, c.CPUCV)
	}
	for _, p := range []string{"dest-update", "claim"} {
		if r := got[p]; r.ShareToInitiallyBest > 0.5 || r.Final.RAMCV >= got["legacy"].Final.RAMCV/2 || r.Migrations != 24 {
			t.Errorf("%s: share %.2f, ram cv %.3f (legacy %.3f): want the moves spread", p, r.ShareToInitiallyBest, r.Final.RAMCV, got["legacy"].Final.RAMCV)
		}
	}
}

// TestSeedMetricsAtOnce runs scenarios/seed-metrics-at-once.toml (the
// same drain, four moves in flight) under several seeds: dest-update
// measures a host only when a move lands, so the decisions taken while
// moves copy read one measurement and crowd; claim assumes each claim's
// load at once. Claim must end strictly more even than dest-update, on
// claims (RAM CV) and on measured CPU, under every seed.
func TestSeedMetricsAtOnce(t *testing.T) {
	sc, err := scenario.Load(filepath.Join("..", "..", "scenarios", "seed-metrics-at-once.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for seed := int64(1); seed <= 6; seed++ {
		sc.Seed = seed
		rep, err := Run(context.Background(), sc, Options{Policies: []string{"dest-update", "claim"}})
		if err != nil {
			t.Fatal(err)
		}
		du, cl := rep.Policies[0], rep.Policies[1]
		if du.Migrations != 24 || cl.Migrations != 24 || du.FailedMigrations+cl.FailedMigrations > 0 {
			t.Fatalf("seed %d: migrations dest-update %d (failed %d), claim %d (failed %d); want 24 each", seed,
				du.Migrations, du.FailedMigrations, cl.Migrations, cl.FailedMigrations)
		}
		if du.Final.Measured == nil || cl.Final.Measured == nil {
			t.Fatalf("seed %d: no measured figures in a scenario with [metrics]", seed)
		}
		if !(cl.Final.RAMCV < du.Final.RAMCV) || !(cl.Final.Measured.CPUCV < du.Final.Measured.CPUCV) {
			t.Errorf("seed %d: claim ram cv %.3f, cpu cv %.3f; dest-update %.3f, %.3f: want claim strictly lower on both", seed,
				cl.Final.RAMCV, cl.Final.Measured.CPUCV, du.Final.RAMCV, du.Final.Measured.CPUCV)
		}
		if cl.StaleDecisions != 0 {
			t.Errorf("seed %d: claim made %d stale decisions", seed, cl.StaleDecisions)
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
