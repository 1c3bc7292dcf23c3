package conductor_test

import (
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"keel/internal/conductor"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// TestRecoverRollsBackAMigrationQueuedWhenTheServerRestarted: a migration
// waiting for a slot when the server restarts (the queue lived in the old
// server's memory) is rolled back by the new server's Recover, while the
// one copying runs on and completes.
func TestRecoverRollsBackAMigrationQueuedWhenTheServerRestarted(t *testing.T) {
	c := newCloud(t, maxConcurrent(1))
	a := c.seed("h1", "a", medium)
	b := c.seed("h1", "b", small)
	ma := c.migrate(a, "")
	mb := c.migrate(b, "")
	c.advance(time.Second)
	if st := c.migration(ma.ID).Status; st != records.MigrationRunning {
		t.Fatalf("first migration %s, want running", st)
	}
	if st := c.migration(mb.ID).Status; st != records.MigrationQueued {
		t.Fatalf("second migration %s, want queued", st)
	}

	// A new server over the same store and agents.
	view, err := scheduler.NewView(ctx, c.st, scheduler.PolicyClaim)
	if err != nil {
		t.Fatal(err)
	}
	scfg := scheduler.DefaultConfig()
	scfg.ServiceDownTime = 0
	sched, err := scheduler.New(scfg, view, c.clk, rand.New(rand.NewPCG(5, 6)))
	if err != nil {
		t.Fatal(err)
	}
	fresh := conductor.New(conductor.Config{MaxConcurrentLiveMigrations: 1}, c.st, sched, c.agents, c.clk, slog.New(slog.DiscardHandler), conductor.Hooks{})
	n, err := fresh.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("Recover resumed %d migrations, want 2 (the queued and the copying one)", n)
	}
	got := c.migration(mb.ID)
	if got.Status != records.MigrationError || !strings.Contains(got.Error, "interrupted by a restart") {
		t.Fatalf("queued migration after recovery: %s (%q), want error, interrupted", got.Status, got.Error)
	}
	if in := c.instance(b.UUID); in.Host != "h1" || in.TaskState != records.TaskNone {
		t.Fatalf("instance b on %q task %q, want back on h1 with no task", in.Host, in.TaskState)
	}
	if alloc := c.allocations(b.UUID); len(alloc) != 1 || alloc["rp-h1"] == nil {
		t.Fatalf("instance b holds %v, want its allocation on h1 only", alloc)
	}
	c.advance(20 * time.Second)
	if st := c.migration(ma.ID).Status; st != records.MigrationCompleted {
		t.Fatalf("the copying migration ended %s, want completed", st)
	}
	c.checkInvariants()
}
