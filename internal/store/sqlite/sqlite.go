// Package sqlite is keel's durable single-node store: a store.Store on
// SQLite through modernc.org/sqlite (pure Go, no cgo).
//
// # Connections
//
// The database runs in WAL mode so readers never block the writer nor each
// other. All writes go through one connection (a database/sql pool of size
// one) and start with BEGIN IMMEDIATE, so write transactions queue in Go
// instead of colliding inside SQLite and failing with SQLITE_BUSY; reads use
// a separate pool of query-only connections, each read seeing one committed
// snapshot. busy_timeout covers the remaining waits (checkpoints, another
// process opening the file).
//
// # Durability
//
// By default the store runs with PRAGMA synchronous=NORMAL: under WAL a
// commit is written to the log but not fsynced; the log is synced at each
// checkpoint. A crash of the process loses nothing that was committed. A
// power loss or kernel crash can lose the most recent commits, but never
// corrupts the database: it reopens at an earlier consistent state. Keel's
// agents re-report their state and the scheduler re-reads the stream, so
// this is the usual trade for a fast claim path. Options{Synchronous:
// "FULL"} fsyncs the log on every commit, making each acknowledged write
// survive power loss at the cost of one fsync per write transaction.
//
// # Allocations
//
// WriteAllocations reads, inside its write transaction, the consumers being
// written, then every provider placement.ProvidersTouched names plus those in
// the writes' ProviderGenerations (generation, inventories and usage), lets
// placement.PlanWrites decide, and persists the plan in the same
// transaction: consumer rows, allocation rows, provider generations, the
// per-class usage and one change-stream row per provider whose usage
// changed. Usage is not summed at read time: each inventory row carries a
// used column that every allocation write adjusts by the difference between
// the consumers' old and new allocations, so deciding a claim costs a few
// primary-key lookups whatever the number of providers or allocations.
//
// # Schema and change stream
//
// The schema lives in numbered files under migrations/, embedded in the
// binary and applied at Open by sqlstore.Migrate, the runner both SQL
// stores share: in order, in one transaction, each recorded in the
// schema_version table. The change stream is
// the changes table; it keeps the most recent Options.KeepChanges rows
// (200,000 by default), trimming older ones every so often, and Changes
// returns store.ErrChangesTrimmed to a reader that fell behind the oldest
// kept row.
//
// Compute records (host records, services, instances, migrations, flavors,
// aggregates, server groups, key pairs, quota limits, plans) are stored as
// JSON next to the columns they are looked up by, by sqlstore.Records, the
// one implementation of those tables for both SQL stores; this package
// lends it its connections (sharedDB) and its write transactions.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"keel/internal/store"
	"keel/internal/store/sqlstore"
)

// Options tune a store; the zero value gives the defaults.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "NORMAL" (the default)
	// or "FULL" (or "EXTRA"). See the package documentation.
	Synchronous string
	// BusyTimeout is how long a connection waits for a lock held by
	// another connection or process; default 5s.
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool; default 4.
	ReadConns int
	// KeepChanges is how many change-stream entries are kept; default
	// 200,000.
	KeepChanges int
	// Log receives a line for each store file whose permissions Open
	// narrowed to the owner's (default: slog.Default()).
	Log *slog.Logger
}

// Defaults.
const (
	DefaultBusyTimeout = 5 * time.Second
	DefaultReadConns   = 4
	DefaultKeepChanges = 200_000
)

func (o Options) withDefaults() (Options, error) {
	switch strings.ToUpper(o.Synchronous) {
	case "":
		o.Synchronous = "NORMAL"
	case "NORMAL", "FULL", "EXTRA":
		o.Synchronous = strings.ToUpper(o.Synchronous)
	default:
		return o, fmt.Errorf("synchronous %q: want NORMAL, FULL or EXTRA", o.Synchronous)
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.ReadConns <= 0 {
		o.ReadConns = DefaultReadConns
	}
	if o.KeepChanges <= 0 {
		o.KeepChanges = DefaultKeepChanges
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o, nil
}

// Store is the SQLite store. It is safe for concurrent use.
type Store struct {
	// Records are the compute records, written once for both SQL stores.
	*sqlstore.Records

	opts Options
	wdb  *sql.DB // one connection, BEGIN IMMEDIATE
	rdb  *sql.DB // query-only pool

	wstmts stmtCache
	rstmts stmtCache

	trimEvery int64
	sinceTrim atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

// The store's roles, each asserted, so that a reader of a role finds its
// implementers here (and in the other stores).
var (
	_ store.Providers     = (*Store)(nil)
	_ store.Allocations   = (*Store)(nil)
	_ store.Placement     = (*Store)(nil)
	_ store.Hosts         = (*Store)(nil)
	_ store.Instances     = (*Store)(nil)
	_ store.Migrations    = (*Store)(nil)
	_ store.Flavors       = (*Store)(nil)
	_ store.Groups        = (*Store)(nil)
	_ store.KeyPairs      = (*Store)(nil)
	_ store.Quotas        = (*Store)(nil)
	_ store.Plans         = (*Store)(nil)
	_ store.Records       = (*Store)(nil)
	_ store.IdentityStore = (*Store)(nil)
	_ store.Changes       = (*Store)(nil)
	_ store.Store         = (*Store)(nil)
)

// Open opens (creating if needed) the database at path with the default
// options and brings its schema up to date.
func Open(ctx context.Context, path string) (*Store, error) {
	return OpenWith(ctx, path, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, path string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("sqlite: opening %s: %w", path, err)
	}
	if err := ownerOnly(path, opts.Log); err != nil {
		return nil, fmt.Errorf("sqlite: opening %s: %w", path, err)
	}
	s := &Store{opts: opts}
	s.Records = sqlstore.NewRecords(sharedDB{s}, sqlstore.SQLite)
	s.trimEvery = int64(min(max(opts.KeepChanges/100, 1), 1000))

	busy := strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)
	name := "file:" + (&url.URL{Path: path}).EscapedPath()
	s.wdb, err = sql.Open("sqlite", name+"?"+url.Values{
		"_txlock":       {"immediate"},
		"_busy_timeout": {busy},
		"_foreign_keys": {"1"},
		"_journal_mode": {"WAL"},
		"_synchronous":  {opts.Synchronous},
	}.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: opening %s: %w", path, err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	s.wstmts.db = s.wdb

	if err := sqlstore.Migrate(ctx, s.wdb, sqlstore.SQLite, migrationFiles); err != nil {
		s.wdb.Close()
		return nil, fmt.Errorf("sqlite: opening %s: %w", path, err)
	}
	for _, q := range writerQueries {
		if _, err := s.wstmts.get(ctx, q); err != nil {
			s.wstmts.close()
			s.wdb.Close()
			return nil, fmt.Errorf("sqlite: opening %s: %w", path, err)
		}
	}

	// Readers open after the writer switched the file to WAL.
	s.rdb, err = sql.Open("sqlite", name+"?"+url.Values{
		"_busy_timeout": {busy},
		"_foreign_keys": {"1"},
		"_query_only":   {"1"},
	}.Encode())
	if err != nil {
		s.wdb.Close()
		return nil, fmt.Errorf("sqlite: opening %s for reading: %w", path, err)
	}
	s.rdb.SetMaxOpenConns(opts.ReadConns)
	s.rdb.SetMaxIdleConns(opts.ReadConns)
	s.rdb.SetConnMaxLifetime(0)
	s.rdb.SetConnMaxIdleTime(0)
	s.rstmts.db = s.rdb
	if err := s.rdb.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: opening %s for reading: %w", path, err)
	}
	return s, nil
}

// ownerOnly makes the database file (created empty if missing) and its
// -wal and -shm, if there, readable and writable by their owner only:
// they hold the password hashes and every tenant's records. SQLite
// creates the -wal and -shm with the database file's permissions, so a
// database created 0600 keeps them 0600; files an older keel left 0644
// are narrowed, each with a log line.
func ownerOnly(path string, log *slog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("creating the database file: %w", err)
	}
	f.Close()
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("checking the permissions of %s: %w", name, err)
		}
		if st.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(name, st.Mode().Perm()&0o700); err != nil {
			return fmt.Errorf("making %s readable by its owner only: %w", name, err)
		}
		log.Warn("store file was readable by others; made it the owner's only", "file", name, "was", st.Mode().Perm().String(), "now", (st.Mode().Perm() & 0o700).String())
	}
	return nil
}

// Close closes the store's connections. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.rdb != nil {
			errs = append(errs, s.rstmts.close(), s.rdb.Close())
		}
		// Let SQLite refresh its planner statistics if it thinks that worth
		// it; cheap, and never fatal.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = s.wdb.ExecContext(ctx, "PRAGMA optimize")
		cancel()
		errs = append(errs, s.wstmts.close(), s.wdb.Close())
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("sqlite: closing: %w", err)
		}
	})
	return s.closeErr
}

// writerQueries lists every statement write transactions run; see wq.
var writerQueries []string

// wq registers a statement for write transactions and returns it.
func wq(query string) string {
	writerQueries = append(writerQueries, query)
	return query
}

// stmtCache prepares each query once per pool; database/sql then prepares
// it lazily on each connection of the pool and keeps it.
type stmtCache struct {
	db *sql.DB
	m  sync.Map // query → *sql.Stmt
	mu sync.Mutex
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := c.m.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("preparing %q: %w", query, err)
	}
	c.m.Store(query, st)
	return st, nil
}

func (c *stmtCache) close() error {
	var errs []error
	c.m.Range(func(k, v any) bool {
		errs = append(errs, v.(*sql.Stmt).Close())
		c.m.Delete(k)
		return true
	})
	return errors.Join(errs...)
}

// wtx is a write transaction on the writer connection.
//
// Its statements run under ctx without its cancellation (sctx): with a
// cancellable context the driver starts a watcher goroutine and installs a
// progress handler around every statement, which cost more than the
// statements themselves (primary-key lookups and single-row writes). A
// cancelled ctx still ends the transaction: database/sql rolls it back as
// soon as ctx is done (BeginTx watches the real ctx), and every statement
// checks ctx before it starts.
type wtx struct {
	ctx  context.Context // the caller's
	sctx context.Context // ctx without cancellation, for the statements
	tx   *sql.Tx
	s    *Store
}

// write runs fn in a write transaction (BEGIN IMMEDIATE on the single
// writer connection), committing if fn returns nil.
func (s *Store) write(ctx context.Context, fn func(w *wtx) error) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning write transaction: %w", err)
	}
	if err := fn(&wtx{ctx: ctx, sctx: context.WithoutCancel(ctx), tx: tx, s: s}); err != nil {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return errors.Join(err, fmt.Errorf("rolling back: %w", rerr))
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// stmt returns a prepared statement bound to the transaction. Only
// statements registered with wq exist: preparing one now would need a second
// writer connection.
func (w *wtx) stmt(query string) (*sql.Stmt, error) {
	if err := w.ctx.Err(); err != nil {
		return nil, err
	}
	st, ok := w.s.wstmts.m.Load(query)
	if !ok {
		return nil, fmt.Errorf("statement not registered with wq: %q", query)
	}
	return w.tx.StmtContext(w.sctx, st.(*sql.Stmt)), nil
}

func (w *wtx) exec(query string, args ...any) (sql.Result, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(w.sctx, args...)
}

func (w *wtx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(w.sctx, args...)
}

// queryRow runs a single-row query; an error preparing it is reported by
// Scan.
func (w *wtx) queryRow(query string, args ...any) rowScanner {
	st, err := w.stmt(query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(w.sctx, args...)
}

// rowScanner is *sql.Row or errRow.
type rowScanner interface{ Scan(dest ...any) error }

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// note appends a change-stream row and now and then trims old ones.
func (w *wtx) note(kind store.ChangeKind, key string) error {
	res, err := w.exec(qInsertChange, string(kind), key)
	if err != nil {
		return fmt.Errorf("appending change %s %s: %w", kind, key, err)
	}
	if w.s.sinceTrim.Add(1) < w.s.trimEvery {
		return nil
	}
	w.s.sinceTrim.Store(0)
	seq, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("reading change sequence: %w", err)
	}
	if _, err := w.exec(qTrimChanges, seq-int64(w.s.opts.KeepChanges)); err != nil {
		return fmt.Errorf("trimming changes: %w", err)
	}
	return nil
}

// rquery runs a query on the read pool.
func (s *Store) rquery(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.rstmts.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// rqueryRow runs a single-row query on the read pool.
func (s *Store) rqueryRow(ctx context.Context, query string, args ...any) rowScanner {
	st, err := s.rstmts.get(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// read runs fn in a read transaction on the read pool: every query in it
// sees the same snapshot.
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("beginning read transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to lose
	return fn(tx)
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// schemaMigrations returns the embedded migrations, checked.
func schemaMigrations() ([]sqlstore.Migration, error) { return sqlstore.Migrations(migrationFiles) }
