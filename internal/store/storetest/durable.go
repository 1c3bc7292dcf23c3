package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// DurableStore is a store that keeps its state in a database.
type DurableStore interface {
	store.Store
	// SchemaVersion returns the newest schema migration applied.
	SchemaVersion(ctx context.Context) (int, error)
}

// Durable describes a durable store (sqlite, postgres) to RunDurable.
type Durable struct {
	// New returns the address (a file path, a URL) of a fresh database
	// for t, removed when t ends.
	New func(t *testing.T) string
	// Open opens a store on the database at addr, keeping keep
	// change-stream entries (0: the store's default).
	Open func(ctx context.Context, addr string, keep int) (DurableStore, error)
	// Raw opens the database at addr directly, bypassing the store; the
	// tests use only SQL both databases read alike, without placeholders.
	Raw func(t *testing.T, addr string) *sql.DB
	// Migrations is the number of the store's schema files.
	Migrations int
	// TrimEvery is how many change-stream entries s may keep above its
	// limit between two trims.
	TrimEvery func(s DurableStore) int64
	// Check, if set, checks the database's own invariants behind the
	// store's back (the usage columns equal the allocations, no row
	// without its parent).
	Check func(t *testing.T, addr string)
}

// RunDurable runs the tests of what a durable store keeps across a close
// and an open, and of its schema and change-stream upkeep, once for every
// durable store.
func RunDurable(t *testing.T, d Durable) {
	t.Run("SchemaVersion", func(t *testing.T) { testSchemaVersion(t, d) })
	t.Run("ReopenKeepsState", func(t *testing.T) { testReopenKeepsState(t, d) })
	t.Run("PlanSurvivesReopen", func(t *testing.T) { testPlanSurvivesReopen(t, d) })
	t.Run("ChangesTrimmed", func(t *testing.T) { testChangesTrimmed(t, d) })
	t.Run("TwoStoresOneDatabase", func(t *testing.T) { testTwoStoresOneDatabase(t, d) })
}

// open opens a store on addr for t, closed when t ends.
func (d Durable) open(t *testing.T, addr string, keep int) DurableStore {
	t.Helper()
	s, err := d.Open(context.Background(), addr, keep)
	if err != nil {
		t.Fatalf("opening: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testSchemaVersion(t *testing.T, d Durable) {
	ctx := context.Background()
	if d.Migrations < 1 {
		t.Fatalf("the store has %d schema files", d.Migrations)
	}
	addr := d.New(t)
	s := d.open(t, addr, 0)
	v, err := s.SchemaVersion(ctx)
	if err != nil || v != d.Migrations {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, d.Migrations)
	}
	s.Close()

	// Reopening applies nothing twice.
	d.open(t, addr, 0).Close()
	db := d.Raw(t, addr)
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_version`).Scan(&rows); err != nil || rows != d.Migrations {
		t.Errorf("schema_version holds %d rows (%v), want %d", rows, err, d.Migrations)
	}

	// A database from a newer program is refused.
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO schema_version (version, name, applied_at)
		VALUES (%d, 'future.sql', '2026-01-01T00:00:00Z')`, d.Migrations+1)); err != nil {
		t.Fatalf("faking a newer schema: %v", err)
	}
	if s3, err := d.Open(ctx, addr, 0); err == nil {
		s3.Close()
		t.Error("database with a newer schema version opened")
	}
}

func testReopenKeepsState(t *testing.T, d Durable) {
	ctx := context.Background()
	addr := d.New(t)
	s, err := d.Open(ctx, addr, 0)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	invs := placement.Inventories{placement.VCPU: placement.NewInventory(8)}
	p, err := s.CreateProvider(ctx, placement.Provider{UUID: "p-1", Name: "cmp-1", Inventories: invs})
	if err != nil {
		t.Fatalf("CreateProvider: %v", err)
	}
	if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{
		ConsumerUUID: "c-1", Allocations: map[string]placement.Resources{p.UUID: {placement.VCPU: 3}},
	}); err != nil {
		t.Fatalf("WriteAllocations: %v", err)
	}
	if err := s.PutHostRecord(ctx, records.HostRecord{Host: "cmp-1", VCPUs: 8, VCPUsUsed: 3}); err != nil {
		t.Fatalf("PutHostRecord: %v", err)
	}
	m1, err := s.CreateMigration(ctx, records.Migration{UUID: "m-1", InstanceUUID: "i-1", Status: records.MigrationRunning})
	if err != nil {
		t.Fatalf("CreateMigration: %v", err)
	}
	last, _ := s.LastChange(ctx)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s = d.open(t, addr, 0)
	sums, err := s.ProviderSummaries(ctx, nil)
	if err != nil || len(sums) != 1 || sums[0].Generation != 2 || sums[0].Usage[placement.VCPU] != 3 {
		t.Errorf("after reopen ProviderSummaries = %+v, %v; want p-1 at generation 2 using 3 VCPU", sums, err)
	}
	if c, err := s.GetConsumer(ctx, "c-1"); err != nil || c.Generation != 1 {
		t.Errorf("after reopen GetConsumer = %+v, %v", c, err)
	}
	if h, err := s.GetHostRecord(ctx, "cmp-1"); err != nil || h.VCPUsUsed != 3 {
		t.Errorf("after reopen GetHostRecord = %+v, %v", h, err)
	}
	if got, _ := s.LastChange(ctx); got != last {
		t.Errorf("after reopen LastChange = %d, want %d", got, last)
	}
	if err := s.PutService(ctx, records.Service{Host: "cmp-1"}); err != nil {
		t.Fatalf("PutService: %v", err)
	}
	if got, _ := s.LastChange(ctx); got != last+1 {
		t.Errorf("first change after reopen has Seq %d, want %d", got, last+1)
	}
	m2, err := s.CreateMigration(ctx, records.Migration{UUID: "m-2", InstanceUUID: "i-1", Status: records.MigrationQueued})
	if err != nil || m2.ID <= m1.ID {
		t.Errorf("migration id after reopen = %d (%v), want above %d", m2.ID, err, m1.ID)
	}
	// The stored JSON and the key columns agree.
	got, err := s.GetMigration(ctx, m2.ID)
	if err != nil || got.ID != m2.ID || got.Version != 1 {
		t.Errorf("GetMigration = %+v, %v", got, err)
	}
}

// testPlanSurvivesReopen: a running plan, with its moves' states, is read
// back the same from a reopened database (a server restart).
func testPlanSurvivesReopen(t *testing.T, d Durable) {
	ctx := context.Background()
	addr := d.New(t)
	s := d.open(t, addr, 0)
	p, err := s.CreatePlan(ctx, records.Plan{Purpose: records.PlanDrain, State: records.PlanRunning, Hosts: []string{"h01"},
		Moves: []records.PlanMove{{Instance: "i1", Source: "h01", State: records.MoveRunning, Migration: 4}}, Owner: "keel-a"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := d.open(t, addr, 0)
	got, err := s2.GetPlan(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != p.ID || got.State != records.PlanRunning || len(got.Moves) != 1 || got.Moves[0].Migration != 4 || got.Owner != "keel-a" {
		t.Fatalf("reopened plan = %+v", got)
	}
	if active, err := s2.ListPlans(ctx, true); err != nil || len(active) != 1 {
		t.Fatalf("active plans after reopen = %v, %v", active, err)
	}
}

func testChangesTrimmed(t *testing.T, d Durable) {
	ctx := context.Background()
	const keep = 10
	addr := d.New(t)
	s := d.open(t, addr, keep)
	for i := 0; i < 57; i++ {
		if err := s.PutHostRecord(ctx, records.HostRecord{Host: fmt.Sprintf("cmp-%d", i%5)}); err != nil {
			t.Fatalf("PutHostRecord: %v", err)
		}
	}
	last, err := s.LastChange(ctx)
	if err != nil || last != 57 {
		t.Fatalf("LastChange = %d, %v; want 57", last, err)
	}
	var oldest, kept int64
	if err := d.Raw(t, addr).QueryRowContext(ctx, `SELECT MIN(seq), COUNT(*) FROM changes`).Scan(&oldest, &kept); err != nil {
		t.Fatalf("reading changes table: %v", err)
	}
	if slack := d.TrimEvery(s); kept < keep || kept > keep+slack {
		t.Errorf("%d changes kept, want between %d and %d", kept, keep, keep+slack)
	}
	if _, err := s.Changes(ctx, 0, 100); !errors.Is(err, store.ErrChangesTrimmed) {
		t.Errorf("Changes(0) after trimming: err = %v, want ErrChangesTrimmed", err)
	}
	if _, err := s.Changes(ctx, oldest-2, 100); !errors.Is(err, store.ErrChangesTrimmed) {
		t.Errorf("Changes(oldest-2): err = %v, want ErrChangesTrimmed", err)
	}
	got, err := s.Changes(ctx, oldest-1, 100)
	if err != nil || int64(len(got)) != kept || got[0].Seq != oldest || got[len(got)-1].Seq != last {
		t.Errorf("Changes(oldest-1) = %d changes, %v; want all %d kept, %d..%d", len(got), err, kept, oldest, last)
	}
	got, err = s.Changes(ctx, last-3, 100)
	if err != nil || len(got) != 3 {
		t.Errorf("Changes(last-3) = %v, %v; want 3", got, err)
	}
	// The limit and no limit.
	if got, err := s.Changes(ctx, oldest-1, 2); err != nil || len(got) != 2 || got[0].Seq != oldest {
		t.Errorf("Changes(oldest-1, 2) = %v, %v", got, err)
	}
	if got, err := s.Changes(ctx, oldest-1, 0); err != nil || int64(len(got)) != kept {
		t.Errorf("Changes(oldest-1, 0) = %d changes, %v; want %d", len(got), err, kept)
	}
}

// testTwoStoresOneDatabase runs claims from two stores on the same
// database, as two processes or servers would (SQLite: BEGIN IMMEDIATE and
// busy_timeout; PostgreSQL: the row locks): no provider is overcommitted
// and every successful claim is counted once.
func testTwoStoresOneDatabase(t *testing.T, d Durable) {
	ctx := context.Background()
	addr := d.New(t)
	a, b := d.open(t, addr, 0), d.open(t, addr, 0)
	const capacity = 30
	provs := []string{"p-1", "p-2"}
	for i, p := range provs {
		if _, err := a.CreateProvider(ctx, placement.Provider{UUID: p, Name: fmt.Sprintf("cmp-%d", i),
			Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(capacity)}}); err != nil {
			t.Fatalf("CreateProvider: %v", err)
		}
	}
	var (
		wg sync.WaitGroup
		ok atomic.Int64
	)
	for g := 0; g < 8; g++ {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				for _, p := range provs {
					_, err := s.WriteAllocations(ctx, placement.AllocationWrite{
						ConsumerUUID: fmt.Sprintf("c-%d-%d", g, i),
						Allocations:  map[string]placement.Resources{p: {placement.VCPU: 1}},
					})
					if err == nil {
						ok.Add(1)
						break
					}
					if !placement.IsCapacity(err) {
						t.Errorf("claim: %v", err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	sums, err := b.ProviderSummaries(ctx, nil)
	if err != nil {
		t.Fatalf("ProviderSummaries: %v", err)
	}
	var used int64
	for _, ps := range sums {
		if ps.Usage[placement.VCPU] > capacity {
			t.Errorf("%s overcommitted: %d of %d", ps.UUID, ps.Usage[placement.VCPU], capacity)
		}
		used += ps.Usage[placement.VCPU]
	}
	if used != ok.Load() || used != 2*capacity {
		t.Errorf("usage %d, successful claims %d, want both %d", used, ok.Load(), 2*capacity)
	}
	if d.Check != nil {
		d.Check(t, addr)
	}
}
