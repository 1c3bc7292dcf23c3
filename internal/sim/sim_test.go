package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"keel/internal/sim/scenario"
)

func loadSeed(t *testing.T) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Load(filepath.Join("..", "..", "scenarios", "seed-hour.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func byPolicy(r *Report) map[string]PolicyReport {
	out := map[string]PolicyReport{}
	for _, p := range r.Policies {
		out[p.Policy] = p
	}
	return out
}

// TestSeedScenarioShowsTheSkewAndTheFix is the project's founding claim:
// under legacy an hour of migrations lands on the hosts that looked best at
// t=0; with the destination updated (or the view following claims) they
// spread.
func TestSeedScenarioShowsTheSkewAndTheFix(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 5
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			sc := loadSeed(t)
			sc.Seed = seed
			rep, err := Run(context.Background(), sc, Options{Parallel: true})
			if err != nil {
				t.Fatal(err)
			}
			p := byPolicy(rep)
			for _, name := range []string{"legacy", "dest-update", "claim"} {
				got := p[name]
				if got.Migrations != 24 || got.FailedMigrations != 0 {
					t.Errorf("%s: %d migrations, %d failed; want 24 and 0", name, got.Migrations, got.FailedMigrations)
				}
				if len(got.InitiallyBest) != 3 {
					t.Errorf("%s: initially best %v, want 3 hosts", name, got.InitiallyBest)
				}
			}
			if l := p["legacy"]; l.ShareToInitiallyBest < 0.95 || l.Final.RAMCV < 0.2 {
				t.Errorf("legacy: share %.2f, ram cv %.3f; want ≥ 0.95 and ≥ 0.2 (the bug)", l.ShareToInitiallyBest, l.Final.RAMCV)
			}
			if p["legacy"].StaleDecisions == 0 {
				t.Errorf("legacy: no stale decisions; the weighers should have read stale records")
			}
			for _, name := range []string{"dest-update", "claim"} {
				if f := p[name]; f.ShareToInitiallyBest > 0.5 || f.Final.RAMCV > 0.08 {
					t.Errorf("%s: share %.2f, ram cv %.3f; want ≤ 0.5 and ≤ 0.08", name, f.ShareToInitiallyBest, f.Final.RAMCV)
				}
			}
			if c := p["claim"]; c.StaleDecisions != 0 {
				t.Errorf("claim: %d stale decisions, want 0", c.StaleDecisions)
			}
		})
	}
}

func TestSameSeedSameReport(t *testing.T) {
	run := func(parallel bool) []byte {
		rep, err := Run(context.Background(), loadSeed(t), Options{Parallel: parallel, Samples: 60})
		if err != nil {
			t.Fatal(err)
		}
		for i := range rep.Policies {
			rep.Policies[i].WallSeconds = 0
		}
		var b bytes.Buffer
		if err := rep.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteSVG(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := run(true), run(false)
	if !bytes.Equal(a, b) {
		t.Fatal("two runs of the same scenario and seed differ")
	}
	var parsed struct {
		Policies []map[string]any `json:"policies"`
	}
	if err := json.Unmarshal(a[:bytes.IndexByte(a, '<')], &parsed); err != nil {
		t.Fatalf("JSON output does not parse: %v", err)
	}
	for _, key := range []string{"policy", "migrations", "failed_migrations", "destinations", "initially_best", "share_to_initially_best", "stale_decisions", "final"} {
		if _, ok := parsed.Policies[0][key]; !ok {
			t.Errorf("JSON policy entry lacks %q", key)
		}
	}
}

func TestLegacyAuditFindsTheDriftTheFixAvoids(t *testing.T) {
	rep, err := Run(context.Background(), loadSeed(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := byPolicy(rep)
	// The audits at t=3600 find every migrated instance untracked on its
	// destination under legacy, and nothing under the fixed policies.
	if p["legacy"].DriftFound < 24 {
		t.Errorf("legacy: audits found %d differences, want at least the 24 untracked arrivals", p["legacy"].DriftFound)
	}
	for _, name := range []string{"dest-update", "claim"} {
		if p[name].DriftFound != 0 {
			t.Errorf("%s: audits found %d differences, want 0", name, p[name].DriftFound)
		}
	}
	if p["legacy"].Audits != 12 {
		t.Errorf("legacy: %d audits ran, want 12 (one per host at t=3600)", p["legacy"].Audits)
	}
}

func TestGeneratedWorkloadKeepsInvariants(t *testing.T) {
	sc := scenario.Generate(60, 2, 3)
	rep, err := Run(context.Background(), sc, Options{Policies: []string{"claim", "legacy"}, Parallel: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Policies {
		if p.Boots == 0 || p.Deletes == 0 || p.Migrations == 0 || p.Decisions == 0 {
			t.Errorf("%s: boots %d deletes %d migrations %d decisions %d; the workload did not run", p.Policy, p.Boots, p.Deletes, p.Migrations, p.Decisions)
		}
		if len(p.Inconsistencies) > 0 {
			t.Errorf("%s: %d inconsistencies, first: %s", p.Policy, len(p.Inconsistencies), p.Inconsistencies[0])
		}
		if p.FailedMigrations > p.Migrations/10 {
			t.Errorf("%s: %d of %d migrations failed", p.Policy, p.FailedMigrations, p.Migrations)
		}
	}
}
