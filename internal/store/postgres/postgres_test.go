package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/postgres/pgtest"
	"keel/internal/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// schemaTemplate is the template database holding the migrated schema.
const schemaTemplate = "keel_schema"

// newDB returns the URL of a fresh database for tb with the schema
// applied (copied from a template migrated once).
func newDB(tb testing.TB) string {
	tb.Helper()
	c := pgtest.Shared(tb)
	err := c.Template(context.Background(), schemaTemplate, func(ctx context.Context, url string) error {
		s, err := Open(ctx, url)
		if err != nil {
			return err
		}
		return s.Close()
	})
	if err != nil {
		tb.Fatal(err)
	}
	return pgtest.NewDatabase(tb, schemaTemplate)
}

// openTemp opens a store on a fresh database.
func openTemp(tb testing.TB, opts Options) (*Store, string) {
	tb.Helper()
	url := newDB(tb)
	s, err := OpenWith(context.Background(), url, opts)
	if err != nil {
		tb.Fatalf("OpenWith: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, url
}

// rawDB opens the database directly through pgx's database/sql adapter,
// bypassing the store.
func rawDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatalf("opening: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestDurable runs the durable-store tests both SQL stores share.
func TestDurable(t *testing.T) {
	ms, err := schemaMigrations()
	if err != nil {
		t.Fatalf("schemaMigrations: %v", err)
	}
	storetest.RunDurable(t, storetest.Durable{
		New: func(t *testing.T) string { return newDB(t) },
		Open: func(ctx context.Context, url string, keep int) (storetest.DurableStore, error) {
			return OpenWith(ctx, url, Options{KeepChanges: keep})
		},
		Raw:        rawDB,
		Migrations: len(ms),
		TrimEvery:  func(s storetest.DurableStore) int64 { return s.(*Store).trimEvery },
		Check:      checkUsageColumn,
	})
}

// rawConn connects to the database directly, bypassing the store.
func rawConn(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		tb.Fatalf("connecting: %v", err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		url := newDB(t)
		s, err := Open(context.Background(), url)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		// Runs after the suite closed the store: the maintained usage must
		// equal the allocations whatever the subtest did, and no write
		// may have been retried for a deadlock.
		t.Cleanup(func() {
			checkUsageColumn(t, url)
			if d, _, _, _ := s.Retries(); d != 0 {
				t.Errorf("%d transactions retried after a deadlock", d)
			}
		})
		return s
	})
}

// checkUsageColumn verifies that inventories.used is the sum of the
// allocations of each provider and class, and that the change counter is
// the newest change.
func checkUsageColumn(t *testing.T, url string) {
	t.Helper()
	storetest.CheckUsageSums(t, rawDB(t, url))
	conn := rawConn(t, url)
	ctx := context.Background()
	var counter, newest int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT seq FROM change_counter), COALESCE((SELECT max(seq) FROM changes), 0)`).Scan(&counter, &newest); err != nil {
		t.Fatalf("reading the change counter: %v", err)
	}
	if counter != newest {
		t.Errorf("change counter %d, newest change %d", counter, newest)
	}
}

// TestConcurrentOpen starts several stores at once on an empty database,
// as servers starting together would: the advisory lock lets one migrate
// and the others find the schema done.
func TestConcurrentOpen(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t, "") // empty: no schema yet
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	stores := make([]*Store, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(ctx, url)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	ms, _ := schemaMigrations()
	conn := rawConn(t, url)
	var rows int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM schema_version`).Scan(&rows); err != nil || rows != len(ms) {
		t.Errorf("schema_version holds %d rows (%v), want %d", rows, err, len(ms))
	}
	if t.Failed() {
		return
	}
	// All of them work on the one schema.
	for i, s := range stores {
		if err := s.PutHostRecord(ctx, records.HostRecord{Host: fmt.Sprintf("cmp-%d", i)}); err != nil {
			t.Errorf("store %d: PutHostRecord: %v", i, err)
		}
	}
	if last, err := stores[0].LastChange(ctx); err != nil || last != n {
		t.Errorf("LastChange = %d, %v; want %d", last, err, n)
	}
}

// TestChangeStreamOrder has writers on two stores append changes as fast as
// they can while a reader follows the stream with Changes(since): the
// reader must see every seq from 1 to the end exactly once and in order. A
// seq taken from a sequence at insert time would let a later seq commit
// first and the reader skip the earlier one for good.
func TestChangeStreamOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, url := openTemp(t, Options{})
	b, err := Open(ctx, url)
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer b.Close()
	const writers, each = 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var err error
				if i%2 == 0 {
					err = s.PutHostRecord(ctx, records.HostRecord{Host: fmt.Sprintf("cmp-%d-%d", w, i)})
				} else {
					err = s.PutService(ctx, records.Service{Host: fmt.Sprintf("cmp-%d-%d", w, i)})
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	var seen []int64
	keys := map[string]bool{}
	since := int64(0)
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true // one more read after the last commit
		default:
		}
		page, err := a.Changes(ctx, since, 7)
		if err != nil {
			t.Fatalf("Changes(%d): %v", since, err)
		}
		for _, c := range page {
			seen = append(seen, c.Seq)
			keys[string(c.Kind)+":"+c.Key] = true
			since = c.Seq
		}
		if len(page) == 7 {
			finished = false // more to read
		}
	}
	for i, seq := range seen {
		if seq != int64(i+1) {
			t.Fatalf("the reader skipped seq %d (its next one was %d): it committed after a higher seq was read", i+1, seq)
		}
	}
	if len(seen) != writers*each || len(keys) != writers*each {
		t.Errorf("reader saw %d changes (%d keys), want %d", len(seen), len(keys), writers*each)
	}
}

// TestCrossingMoves moves consumers back and forth between providers in
// opposite directions at once, each move touching both providers: the lock
// order (consumers, then providers, sorted) must keep the server from ever
// finding a deadlock, and every move lands.
func TestCrossingMoves(t *testing.T) {
	ctx := context.Background()
	s, url := openTemp(t, Options{})
	provs := []string{"p-a", "p-b", "p-c"}
	for i, p := range provs {
		if _, err := s.CreateProvider(ctx, placement.Provider{UUID: p, Name: fmt.Sprintf("cmp-%d", i),
			Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(1000)}}); err != nil {
			t.Fatalf("CreateProvider: %v", err)
		}
	}
	const movers, moves = 6, 15
	var wg sync.WaitGroup
	for m := range movers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := fmt.Sprintf("c-%d", m)
			var cgen *int64
			for i := range moves {
				// Movers go round the providers in opposite directions.
				k := i % len(provs)
				if m%2 == 1 {
					k = len(provs) - 1 - k
				}
				plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{
					ConsumerUUID: c, ConsumerGeneration: cgen,
					Allocations: map[string]placement.Resources{provs[k]: {placement.VCPU: int64(1 + m)}},
				})
				if err != nil {
					t.Errorf("move %d of %s: %v", i, c, err)
					return
				}
				g := plan.Consumers[0].New.Generation
				cgen = &g
			}
		}()
	}
	wg.Wait()
	deadlocks, serial, races, relocks := s.Retries()
	t.Logf("retries: %d deadlocks, %d serialization failures, %d consumer races, %d relocks", deadlocks, serial, races, relocks)
	if deadlocks != 0 {
		t.Errorf("%d deadlocks", deadlocks)
	}
	if relocks != 0 {
		t.Errorf("%d relocks: a move found a provider it had not locked", relocks)
	}
	checkUsageColumn(t, url)
	var total int64
	sums, _ := s.ProviderSummaries(ctx, nil)
	for _, ps := range sums {
		total += ps.Usage[placement.VCPU]
	}
	if want := int64(movers * (movers + 1) / 2); total != want {
		t.Errorf("total usage %d, want %d", total, want)
	}
}

// TestConsumerCreationRace has writers create the same new consumer at
// once: exactly one wins, the others get a consumer-generation conflict.
func TestConsumerCreationRace(t *testing.T) {
	ctx := context.Background()
	s, url := openTemp(t, Options{})
	var provs []string
	for i := range 4 {
		p := fmt.Sprintf("p-%d", i)
		provs = append(provs, p)
		if _, err := s.CreateProvider(ctx, placement.Provider{UUID: p, Name: p,
			Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(100)}}); err != nil {
			t.Fatalf("CreateProvider: %v", err)
		}
	}
	for round := range 10 {
		c := fmt.Sprintf("c-%d", round)
		var wins, conflicts atomic.Int64
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.WriteAllocations(ctx, placement.AllocationWrite{
					ConsumerUUID: c, Allocations: map[string]placement.Resources{provs[w]: {placement.VCPU: 1}},
				})
				switch {
				case err == nil:
					wins.Add(1)
				case placement.IsConflict(err):
					conflicts.Add(1)
				default:
					t.Errorf("creating %s: %v", c, err)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 || conflicts.Load() != 3 {
			t.Errorf("round %d: %d wins, %d conflicts; want 1 and 3", round, wins.Load(), conflicts.Load())
		}
	}
	_, _, races, _ := s.Retries()
	t.Logf("%d transactions retried after creating a consumer created meanwhile", races)
	checkUsageColumn(t, url)
}

// TestDatabaseGuards checks what the schema refuses or keeps by itself,
// whatever writes it: negative usage, allocations without an inventory,
// and usage following allocations changed by hand.
func TestDatabaseGuards(t *testing.T) {
	ctx := context.Background()
	s, url := openTemp(t, Options{})
	p, err := s.CreateProvider(ctx, placement.Provider{UUID: "p-1", Name: "cmp-1", Inventories: placement.Inventories{
		placement.VCPU: placement.NewInventory(8), placement.MemoryMB: placement.NewInventory(4096)}})
	if err != nil {
		t.Fatalf("CreateProvider: %v", err)
	}
	for i := range 3 {
		if _, err := s.WriteAllocations(ctx, placement.AllocationWrite{
			ConsumerUUID: fmt.Sprintf("c-%d", i),
			Allocations:  map[string]placement.Resources{p.UUID: {placement.VCPU: 2, placement.MemoryMB: 512}},
		}); err != nil {
			t.Fatalf("WriteAllocations: %v", err)
		}
	}
	conn := rawConn(t, url)
	mustFail := func(what, sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err == nil {
			t.Errorf("%s accepted", what)
		}
	}
	mustFail("negative usage", `UPDATE inventories SET used = -1 WHERE provider_uuid = 'p-1' AND resource_class = 'VCPU'`)
	mustFail("an allocation without its inventory", `INSERT INTO allocations VALUES ('c-0', 'p-1', 'DISK_GB', 1)`)
	mustFail("an inventory with reserved above total", `UPDATE inventories SET reserved = total + 1 WHERE provider_uuid = 'p-1'`)
	mustFail("an infinite allocation ratio", `UPDATE inventories SET allocation_ratio = 'Infinity' WHERE provider_uuid = 'p-1'`)
	mustFail("removing an inventory in use", `DELETE FROM inventories WHERE provider_uuid = 'p-1' AND resource_class = 'VCPU'`)
	mustFail("deleting a provider in use", `DELETE FROM providers WHERE uuid = 'p-1'`)
	// 6 of 8 VCPU used: a hand-written allocation of 3 more would overcommit.
	mustFail("an allocation raised above capacity", `UPDATE allocations SET used = 5 WHERE consumer_uuid = 'c-2' AND resource_class = 'VCPU'`)
	var code, constraint string
	if err := func() error {
		_, err := conn.Exec(ctx, `UPDATE inventories SET used = 9 WHERE provider_uuid = 'p-1' AND resource_class = 'VCPU'`)
		return err
	}(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			code, constraint = pe.Code, pe.ConstraintName
		}
	}
	if code != "23514" || constraint != "inventories_within_capacity" {
		t.Errorf("usage set above capacity: SQLSTATE %q constraint %q, want 23514 inventories_within_capacity", code, constraint)
	}
	// Lowering the inventory below its usage stays allowed (as in
	// Placement), and so does giving usage back while over capacity.
	if _, err := conn.Exec(ctx, `UPDATE inventories SET total = 4 WHERE provider_uuid = 'p-1' AND resource_class = 'VCPU'`); err != nil {
		t.Fatalf("lowering an inventory below its usage: %v", err)
	}
	mustFail("raising usage on an over-capacity provider", `UPDATE allocations SET used = 3 WHERE consumer_uuid = 'c-2' AND resource_class = 'VCPU'`)
	if _, err := conn.Exec(ctx, `UPDATE inventories SET total = 8 WHERE provider_uuid = 'p-1' AND resource_class = 'VCPU'`); err != nil {
		t.Fatalf("restoring the inventory: %v", err)
	}

	// Usage follows allocations deleted by hand, directly or with their
	// consumer.
	if _, err := conn.Exec(ctx, `DELETE FROM allocations WHERE consumer_uuid = 'c-0' AND resource_class = 'VCPU'`); err != nil {
		t.Fatalf("deleting an allocation: %v", err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM consumers WHERE uuid = 'c-1'`); err != nil {
		t.Fatalf("deleting a consumer: %v", err)
	}
	if _, err := conn.Exec(ctx, `UPDATE allocations SET used = 3 WHERE consumer_uuid = 'c-2' AND resource_class = 'VCPU'`); err != nil {
		t.Fatalf("updating an allocation: %v", err)
	}
	sums, err := s.ProviderSummaries(ctx, []string{p.UUID})
	if err != nil {
		t.Fatalf("ProviderSummaries: %v", err)
	}
	if want := (placement.Resources{placement.VCPU: 3, placement.MemoryMB: 1024}); !sums[0].Usage.Equal(want) {
		t.Errorf("usage after hand edits = %v, want %v", sums[0].Usage, want)
	}
	checkUsageColumn(t, url)
}

// TestRecordsStoredAsJSONB checks records are kept as JSONB objects that
// PostgreSQL's own operators read, next to their key columns.
func TestRecordsStoredAsJSONB(t *testing.T) {
	ctx := context.Background()
	s, url := openTemp(t, Options{})
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
	conn := rawConn(t, url)
	var (
		typ, host, jsonHost string
		version             int64
	)
	if err := conn.QueryRow(ctx, `SELECT jsonb_typeof(data), host, version, data->>'host' FROM instances WHERE uuid = 'i-1'`).Scan(&typ, &host, &version, &jsonHost); err != nil {
		t.Fatalf("reading instance row: %v", err)
	}
	if typ != "object" || host != "cmp-2" || jsonHost != "cmp-2" || version != 2 {
		t.Errorf("instance row: jsonb_typeof %s, host %q, json host %q, version %d", typ, host, jsonHost, version)
	}
	var (
		id     int64
		active bool
	)
	if err := conn.QueryRow(ctx, `SELECT (data->>'id')::bigint, active FROM migrations WHERE uuid = 'm-1'`).Scan(&id, &active); err != nil {
		t.Fatalf("reading migration row: %v", err)
	}
	if id != m.ID || !active {
		t.Errorf("migration row: json id %d (want %d), active %v (want true)", id, m.ID, active)
	}
}

// TestURLNotLeaked checks that a bad URL's error does not repeat it (it
// may hold a password).
func TestURLNotLeaked(t *testing.T) {
	_, err := Open(context.Background(), "postgres://keel:s3cret@%zz/db")
	if err == nil {
		t.Fatal("a malformed URL opened")
	}
	if got := err.Error(); strings.Contains(got, "s3cret") {
		t.Errorf("error %q repeats the password", got)
	}
}
