package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/store/postgres/pgtest"
	"keel/internal/testenv"
)

// TestServicesOnPostgres runs the server on PostgreSQL ([keel] db) — a
// throw-away cluster this test starts — with two agents: boots, a live
// migration, both hosts exact at once, a clean audit.
func TestServicesOnPostgres(t *testing.T) {
	testenv.External(t, "PostgreSQL (Debian's postgresql)")
	t.Parallel()
	ctx := testenv.Context(t)
	cl, err := pgtest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	db, err := cl.CreateDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	c := newCloud(t, "keel.db="+cl.URL(db), "DEFAULT.update_resources_interval=3600")
	c.startAgent("h1")
	c.startAgent("h2")
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.small", "ram": 2048, "vcpus": 1, "disk": 20, "id": "2"}}, nil)
	id := c.boot("vm", "2")
	src := c.hostOf(id)
	before := c.memUsed()
	mid := c.migrate(id, "")
	if st := c.waitMigration(mid, 30*time.Second); st != "completed" {
		t.Fatalf("migration ended %s", st)
	}
	dst := c.hostOf(id)
	after := c.memUsed()
	if dst == src || after[src] != before[src]-2048 || after[dst] != before[dst]+2048 {
		t.Fatalf("%s→%s: memory_mb_used %v → %v", src, dst, before, after)
	}
	if v := c.audit(); len(v) != 0 {
		t.Fatalf("audit: %s", strings.Join(v, "\n"))
	}
	if fileExists(filepath.Join(c.dataDir, "keel.db")) {
		t.Fatal("the server opened SQLite, not the PostgreSQL database it was given")
	}
}
