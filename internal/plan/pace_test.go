package plan

import (
	"testing"
	"time"

	"keel/internal/records"
)

// The drain: one host's moves under max_concurrent_live_migrations
// = 1 go one at a time, whatever --parallel says, and take their RAM's
// sum at the bandwidth.
func TestPaceNamesTheBindingCap(t *testing.T) {
	one := drain(mv("a", "h01", 4096), mv("b", "h01", 2048), mv("c", "h01", 2048))
	two := drain(mv("a", "h01", 4096), mv("b", "h01", 2048), mv("c", "h02", 1024), mv("d", "h02", 1024))
	par := two
	par.Options.Parallel = 1
	reb := drain(records.PlanMove{Instance: "r", Source: "h01", Dest: "h09", RAMMB: 1024},
		records.PlanMove{Instance: "s", Source: "h02", Dest: "h09", RAMMB: 1024})
	reb.Purpose = records.PlanRebalance
	cases := []struct {
		name     string
		p        records.Plan
		caps     Caps
		bw       float64
		atOnce   int
		boundBy  string
		expected time.Duration
	}{
		{"per source 1, one source", one, Caps{PerSource: 1}, 1024, 1,
			"max_concurrent_live_migrations = 1 per source host", 8 * time.Second},
		{"per source 1, two sources: the larger source's sum", two, Caps{PerSource: 1}, 1024, 2,
			"max_concurrent_live_migrations = 1 per source host, 2 sources", 6 * time.Second},
		{"--parallel 1 binds first", par, Caps{PerSource: 1}, 1024, 1, "--parallel 1", 8 * time.Second},
		{"cloud-wide cap", two, Caps{PerSource: 4, Total: 3}, 2048, 3,
			"max_concurrent_live_migrations_total = 3", 2 * time.Second},
		{"no cap: every move at once", two, Caps{}, 1024, 4, "no cap binds", 4 * time.Second},
		{"per destination", reb, Caps{PerSource: 1, PerDest: 1}, 1024, 1,
			"max_concurrent_incoming_live_migrations = 1 per destination host", 2 * time.Second},
		{"bandwidth unknown", one, Caps{PerSource: 1}, 0, 1, "max_concurrent_live_migrations = 1 per source host", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := PaceOf(c.p, c.caps, c.bw)
			if got.AtOnce != c.atOnce || got.BoundBy != c.boundBy || got.Expected != c.expected {
				t.Fatalf("pace %+v, want %d at once bound by %q, expected %s", got, c.atOnce, c.boundBy, c.expected)
			}
		})
	}
	// A running move counts what it has left; done moves count nothing.
	p := drain(mv("a", "h01", 4096), mv("b", "h01", 2048), mv("c", "h01", 2048))
	p.Moves[0].State = records.MoveDone
	p.Moves[1].State, p.Moves[1].BytesCopied = records.MoveRunning, 1024<<20
	if got := PaceOf(p, Caps{PerSource: 1}, 1024); got.Expected != 3*time.Second || got.AtOnce != 1 {
		t.Fatalf("half way: %+v, want 1 at once, 3s", got)
	}
	if got := PaceOf(p, Caps{PerSource: 1}, 1024); p.Moves[2].State != records.MovePending {
		t.Fatalf("PaceOf changed its input: %+v", got)
	}
}
