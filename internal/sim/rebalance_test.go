package sim

import (
	"context"
	"path/filepath"
	"testing"

	"keel/internal/rebalance"
	"keel/internal/sim/scenario"
)

// TestRebalanceAfterTheLegacyDrain: seed-hour's drain leaves three hosts
// packed under legacy; the rebalance planned once the drain is done takes
// the RAM CV from ≥ 0.25 to ≤ 0.08, every move lowering it, no instance
// moved twice, all of them run to completion on the simulated cloud and
// placement exact at the end. Under claim the drain leaves the cloud
// balanced and the planner proposes nothing.
func TestRebalanceAfterTheLegacyDrain(t *testing.T) {
	sc, err := scenario.Load(filepath.Join("..", "..", "scenarios", "seed-hour.toml"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), sc, Options{Policies: []string{"legacy", "claim"},
		Rebalance: &RebalanceOptions{Planner: rebalance.Options{Seed: 1}, InFlight: 2}})
	if err != nil {
		t.Fatal(err)
	}
	legacy, claim := rep.Policies[0], rep.Policies[1]
	rb := legacy.Rebalance
	if rb == nil {
		t.Fatal("no rebalance report")
	}
	t.Logf("legacy: %s; final ram cv %.3f", rb, legacy.Final.RAMCV)
	if rb.At < 1410 || rb.CVBefore < 0.25 || rb.CVPlanned > 0.08 {
		t.Fatalf("rebalance at %.0f s: CV %.3f → %.3f, want after the drain, from ≥ 0.25 to ≤ 0.08", rb.At, rb.CVBefore, rb.CVPlanned)
	}
	if rb.Planned == 0 || rb.Moved != rb.Planned || rb.Failed != 0 || rb.Skipped != 0 {
		t.Fatalf("planned %d, moved %d, failed %d, skipped %d", rb.Planned, rb.Moved, rb.Failed, rb.Skipped)
	}
	seen := map[string]bool{}
	for i, m := range rb.Moves {
		if !(m.After < m.Before) || seen[m.Instance] {
			t.Fatalf("move %d %+v: not lower, or the instance moved twice", i, m)
		}
		seen[m.Instance] = true
		if m.Destination == "h01" || m.Destination == "h02" {
			t.Fatalf("move %d to drained %s", i, m.Destination)
		}
	}
	if legacy.Final.RAMCV > 0.08 || len(legacy.Inconsistencies) > 0 {
		t.Fatalf("after the moves: ram cv %.3f, inconsistencies %v", legacy.Final.RAMCV, legacy.Inconsistencies)
	}
	if legacy.Migrations != 24+rb.Moved {
		t.Errorf("%d migrations, want the drain's 24 and the rebalance's %d", legacy.Migrations, rb.Moved)
	}
	if claim.Rebalance == nil || claim.Rebalance.Planned != 0 || claim.Migrations != 24 {
		t.Errorf("claim: %+v, %d migrations: the balanced cloud needs no move", claim.Rebalance, claim.Migrations)
	}
}

// TestRebalanceAtStartWithoutDrains: a scenario without drains is
// rebalanced from t=0; named hosts, explicit instances and an
// anti-affinity group (what an export writes) are honoured.
func TestRebalanceAtStartWithoutDrains(t *testing.T) {
	src := `duration = 600
[[flavor]]
name = "big"
vcpus = 2
ram = 16384
disk = 10
[[hosts]]
name = "alpha"
vcpus = 32
memory_mb = 131072
disk_gb = 1000
[[hosts]]
prefix = "b"
count = 3
vcpus = 32
memory_mb = 131072
disk_gb = 1000
[[server_group]]
name = "apart"
policy = "anti-affinity"
`
	for i := 0; i < 6; i++ {
		src += "[[instance]]\nhost = \"alpha\"\nflavor = \"big\"\n"
		if i < 2 {
			src += "group = \"apart\"\n"
		}
	}
	src += "[[instance]]\nhost = \"b01\"\nflavor = \"big\"\ngroup = \"apart\"\n"
	sc, err := scenario.Parse("start.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), sc, Options{Policies: []string{"claim"}, Rebalance: &RebalanceOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Policies[0]
	rb := p.Rebalance
	t.Logf("%s; final ram cv %.3f", rb, p.Final.RAMCV)
	if rb.At != 0 || rb.Planned == 0 || rb.Moved != rb.Planned || len(p.Inconsistencies) > 0 {
		t.Fatalf("rebalance %+v, inconsistencies %v", rb, p.Inconsistencies)
	}
	if p.Final.RAMCV >= rb.CVBefore {
		t.Fatalf("ram cv %.3f after, %.3f before", p.Final.RAMCV, rb.CVBefore)
	}
	// The group's members (the first two of alpha's, and b01's) never
	// share a host: a member moved from alpha went neither to b01 nor to
	// where the other member went.
	dest := map[string]bool{}
	for _, m := range rb.Moves {
		if m.Instance <= "00000000-0000-4000-8000-000000000002" {
			if m.Destination == "b01" || dest[m.Destination] {
				t.Errorf("anti-affinity member %s moved to %s", m.Instance, m.Destination)
			}
			dest[m.Destination] = true
		}
	}
}

// TestRebalanceHonoursHostTraits: a flavor that requires a trait only two
// hosts have is moved only between them.
func TestRebalanceHonoursHostTraits(t *testing.T) {
	src := `duration = 600
[[flavor]]
name = "fast"
vcpus = 2
ram = 16384
extra_specs = { "trait:CUSTOM_FAST" = "required" }
[[hosts]]
name = "alpha"
vcpus = 32
memory_mb = 131072
disk_gb = 1000
traits = ["CUSTOM_FAST"]
[[hosts]]
prefix = "b"
count = 3
vcpus = 32
memory_mb = 131072
disk_gb = 1000
[[hosts]]
name = "omega"
vcpus = 32
memory_mb = 131072
disk_gb = 1000
traits = ["CUSTOM_FAST", "HW_CPU_X86_AVX2"]
`
	for i := 0; i < 6; i++ {
		src += "[[instance]]\nhost = \"alpha\"\nflavor = \"fast\"\n"
	}
	sc, err := scenario.Parse("traits.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), sc, Options{Policies: []string{"claim"}, Rebalance: &RebalanceOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	rb := rep.Policies[0].Rebalance
	t.Logf("%s", rb)
	if rb.Planned == 0 || rb.Moved != rb.Planned {
		t.Fatalf("rebalance %+v", rb)
	}
	for _, m := range rb.Moves {
		if m.Destination != "omega" {
			t.Errorf("%s moved to %s, which lacks CUSTOM_FAST", m.Instance, m.Destination)
		}
	}
}
