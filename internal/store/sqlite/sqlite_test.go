package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		path := filepath.Join(t.TempDir(), "keel.db")
		s, err := Open(context.Background(), path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		// Runs after the suite closed the store: the maintained usage must
		// equal the allocations whatever the subtest did.
		t.Cleanup(func() { checkUsageColumn(t, path) })
		return s
	})
}

// TestDurable runs the durable-store tests both SQL stores share.
func TestDurable(t *testing.T) {
	ms, err := schemaMigrations()
	if err != nil {
		t.Fatalf("schemaMigrations: %v", err)
	}
	storetest.RunDurable(t, storetest.Durable{
		New: func(t *testing.T) string { return filepath.Join(t.TempDir(), "keel.db") },
		Open: func(ctx context.Context, path string, keep int) (storetest.DurableStore, error) {
			return OpenWith(ctx, path, Options{KeepChanges: keep})
		},
		Raw:        rawDB,
		Migrations: len(ms),
		TrimEvery:  func(s storetest.DurableStore) int64 { return s.(*Store).trimEvery },
		Check:      checkUsageColumn,
	})
}

// rawDB opens the database file directly, bypassing the store.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=5000")
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// checkUsageColumn verifies that inventories.used is the sum of the
// allocations of each provider and class, and that no allocation lacks its
// inventory or consumer.
func checkUsageColumn(t *testing.T, path string) {
	t.Helper()
	db := rawDB(t, path)
	storetest.CheckUsageSums(t, db)
	var orphans int
	if err := db.QueryRow(`SELECT COUNT(*) FROM pragma_foreign_key_check`).Scan(&orphans); err != nil {
		t.Fatalf("foreign key check: %v", err)
	}
	if orphans != 0 {
		t.Errorf("%d rows violate foreign keys", orphans)
	}
}

func openTemp(t *testing.T, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keel.db")
	s, err := OpenWith(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("OpenWith: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func pragma(t *testing.T, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, name string) string {
	t.Helper()
	var v string
	if err := db.QueryRowContext(context.Background(), "PRAGMA "+name).Scan(&v); err != nil {
		t.Fatalf("PRAGMA %s: %v", name, err)
	}
	return v
}

func TestPragmas(t *testing.T) {
	s, _ := openTemp(t, Options{})
	if got := pragma(t, s.wdb, "journal_mode"); got != "wal" {
		t.Errorf("journal_mode = %q, want wal", got)
	}
	if got := pragma(t, s.wdb, "foreign_keys"); got != "1" {
		t.Errorf("writer foreign_keys = %q, want 1", got)
	}
	if got := pragma(t, s.wdb, "synchronous"); got != "1" {
		t.Errorf("default synchronous = %q, want 1 (NORMAL)", got)
	}
	if got := pragma(t, s.wdb, "busy_timeout"); got != "5000" {
		t.Errorf("busy_timeout = %q, want 5000", got)
	}
	if got := pragma(t, s.rdb, "query_only"); got != "1" {
		t.Errorf("reader query_only = %q, want 1", got)
	}

	full, _ := openTemp(t, Options{Synchronous: "full"})
	if got := pragma(t, full.wdb, "synchronous"); got != "2" {
		t.Errorf("synchronous with FULL = %q, want 2", got)
	}
	if _, err := OpenWith(context.Background(), filepath.Join(t.TempDir(), "x.db"), Options{Synchronous: "OFF"}); err == nil {
		t.Error("synchronous OFF accepted")
	}
}

// TestRecordsStoredAsJSONText checks records are kept as JSON text that
// SQLite's own JSON functions read, next to their key columns.
func TestRecordsStoredAsJSONText(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t, Options{})
	in, err := s.CreateInstance(ctx, records.Instance{UUID: "i-1", Host: "cmp-1", VMState: records.VMActive})
	if err != nil {
		t.Fatalf("CreateInstance: %v", err)
	}
	in.Host = "cmp-2"
	if _, err := s.UpdateInstance(ctx, in); err != nil {
		t.Fatalf("UpdateInstance: %v", err)
	}
	m, err := s.CreateMigration(ctx, records.Migration{UUID: "m-1", InstanceUUID: "i-1", SourceHost: "cmp-1", DestHost: "cmp-2", Status: records.MigrationRunning})
	if err != nil {
		t.Fatalf("CreateMigration: %v", err)
	}
	db := rawDB(t, path)
	var (
		typ, host, jsonHost string
		version             int64
	)
	if err := db.QueryRow(`SELECT typeof(data), host, version, json_extract(data, '$.host') FROM instances WHERE uuid = 'i-1'`).Scan(&typ, &host, &version, &jsonHost); err != nil {
		t.Fatalf("reading instance row: %v", err)
	}
	if typ != "text" || host != "cmp-2" || jsonHost != "cmp-2" || version != 2 {
		t.Errorf("instance row: typeof %s, host %q, json host %q, version %d", typ, host, jsonHost, version)
	}
	var id, active int64
	if err := db.QueryRow(`SELECT json_extract(data, '$.id'), active FROM migrations WHERE uuid = 'm-1'`).Scan(&id, &active); err != nil {
		t.Fatalf("reading migration row: %v", err)
	}
	if id != m.ID || active != 1 {
		t.Errorf("migration row: json id %d (want %d), active %d (want 1)", id, m.ID, active)
	}
}

// TestCapacityTrigger checks the schema's own guard against overcommit:
// raising a class's usage above its capacity is refused whatever writes it,
// while lowering an inventory below its usage, and giving usage back on an
// over-capacity provider, stay allowed.
func TestCapacityTrigger(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t, Options{})
	inv := placement.NewInventory(8)
	inv.AllocationRatio, inv.MaxUnit = 1.5, 12 // capacity 12
	p, err := s.CreateProvider(ctx, placement.Provider{UUID: "p-1", Name: "cmp-1", Inventories: placement.Inventories{placement.VCPU: inv}})
	if err != nil {
		t.Fatalf("CreateProvider: %v", err)
	}
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: "c-1",
		Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 10}}}); err != nil {
		t.Fatalf("WriteAllocations: %v", err)
	}
	db := rawDB(t, path)
	exec := func(q string) error { _, err := db.ExecContext(ctx, q); return err }
	if err := exec(`UPDATE inventories SET used = 13 WHERE provider_uuid = 'p-1'`); err == nil || !strings.Contains(err.Error(), "inventories_within_capacity") {
		t.Errorf("usage 13 of capacity 12: %v, want the capacity trigger's refusal", err)
	}
	if err := exec(`UPDATE inventories SET used = 12 WHERE provider_uuid = 'p-1'`); err != nil {
		t.Errorf("usage exactly at capacity refused: %v", err)
	}
	if err := exec(`UPDATE inventories SET total = 4 WHERE provider_uuid = 'p-1'`); err != nil {
		t.Errorf("lowering the inventory below its usage refused: %v", err)
	}
	if err := exec(`UPDATE inventories SET used = 11 WHERE provider_uuid = 'p-1'`); err != nil {
		t.Errorf("giving usage back while over capacity refused: %v", err)
	}
	if err := exec(`UPDATE inventories SET used = 12 WHERE provider_uuid = 'p-1'`); err == nil {
		t.Error("raising usage on an over-capacity provider accepted")
	}
}

// TestChangesMigrationKeepsSequence opens a database at schema 7, whose
// changes table still had AUTOINCREMENT and has been trimmed, and checks
// that migration 0008 keeps the rows and that new changes continue the
// sequence.
func TestChangesMigrationKeepsSequence(t *testing.T) {
	ctx := context.Background()
	ms, err := schemaMigrations()
	if err != nil {
		t.Fatalf("schemaMigrations: %v", err)
	}
	path := filepath.Join(t.TempDir(), "keel.db")
	db := rawDB(t, path)
	if _, err := db.Exec(`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
		t.Fatalf("creating schema_version: %v", err)
	}
	for _, m := range ms[:7] {
		if _, err := db.Exec(m.SQL); err != nil {
			t.Fatalf("applying %s: %v", m.Name, err)
		}
		if _, err := db.Exec(`INSERT INTO schema_version VALUES (?, ?, 'then')`, m.Version, m.Name); err != nil {
			t.Fatalf("recording %s: %v", m.Name, err)
		}
	}
	for i := 1; i <= 5; i++ {
		if _, err := db.Exec(`INSERT INTO changes (kind, key) VALUES ('provider', ?)`, fmt.Sprintf("p-%d", i)); err != nil {
			t.Fatalf("inserting change: %v", err)
		}
	}
	if _, err := db.Exec(`DELETE FROM changes WHERE seq <= 3`); err != nil {
		t.Fatalf("trimming: %v", err)
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if last, err := s.LastChange(ctx); err != nil || last != 5 {
		t.Errorf("LastChange after migrating = %d, %v; want 5", last, err)
	}
	if _, err := s.Changes(ctx, 2, 0); !errors.Is(err, store.ErrChangesTrimmed) {
		t.Errorf("Changes(2): err = %v, want ErrChangesTrimmed", err)
	}
	if err := s.PutHostRecord(ctx, records.HostRecord{Host: "cmp-1"}); err != nil {
		t.Fatalf("PutHostRecord: %v", err)
	}
	got, err := s.Changes(ctx, 3, 0)
	if err != nil || len(got) != 3 || got[0].Seq != 4 || got[0].Key != "p-4" || got[2].Seq != 6 {
		t.Errorf("Changes(3) = %+v, %v; want seq 4, 5 (kept) and 6 (new)", got, err)
	}
}

// TestWriteCancelled checks that a write under a cancelled context fails
// with the context's error and leaves nothing behind, although the
// transaction's statements run without the context's cancellation.
func TestWriteCancelled(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t, Options{})
	p, err := s.CreateProvider(ctx, placement.Provider{UUID: "p-1", Name: "cmp-1",
		Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(8)}})
	if err != nil {
		t.Fatalf("CreateProvider: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.WriteAllocations(cctx, placement.AllocationWrite{
		ConsumerUUID: "c-1", Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 3}},
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("WriteAllocations with a cancelled context: err = %v, want context.Canceled", err)
	}
	if _, err := s.GetConsumer(ctx, "c-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetConsumer after the cancelled write: err = %v, want ErrNotFound", err)
	}
	// The writer connection is still usable.
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: "c-1", Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 3}},
	}); err != nil {
		t.Errorf("WriteAllocations after a cancelled one: %v", err)
	}
}

// TestManyClassesOneProvider claims more classes on one provider than one
// multi-row INSERT holds (multiRows), then replaces the claim with fewer.
func TestManyClassesOneProvider(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t, Options{})
	classes := []placement.ResourceClass{"VCPU", "MEMORY_MB", "DISK_GB", "PCI_DEVICE", "SRIOV_NET_VF",
		"NUMA_SOCKET", "IPV4_ADDRESS", "VGPU", "VGPU_DISPLAY_HEAD", "NUMA_CORE"}
	if len(classes) <= multiRows {
		t.Fatalf("test needs more than %d classes", multiRows)
	}
	invs := placement.Inventories{}
	claim := placement.Resources{}
	for i, rc := range classes {
		invs[rc] = placement.NewInventory(100)
		claim[rc] = int64(i + 1)
	}
	p, err := s.CreateProvider(ctx, placement.Provider{UUID: "p-1", Name: "cmp-1", Inventories: invs})
	if err != nil {
		t.Fatalf("CreateProvider: %v", err)
	}
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: "c-1", Allocations: map[string]placement.Resources{p.UUID: claim},
	}); err != nil {
		t.Fatalf("WriteAllocations of %d classes: %v", len(classes), err)
	}
	c, err := s.GetConsumer(ctx, "c-1")
	if err != nil || len(c.Allocations[p.UUID]) != len(classes) {
		t.Fatalf("GetConsumer = %+v, %v; want %d classes", c, err, len(classes))
	}
	for rc, n := range claim {
		if c.Allocations[p.UUID][rc] != n {
			t.Errorf("allocation of %s = %d, want %d", rc, c.Allocations[p.UUID][rc], n)
		}
	}
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: "c-1", ConsumerGeneration: &c.Generation,
		Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 2}},
	}); err != nil {
		t.Fatalf("replacing the claim: %v", err)
	}
	checkUsageColumn(t, path)
}
