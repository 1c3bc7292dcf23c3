// Package postgres is keel's shared durable store: a store.Store on
// PostgreSQL through github.com/jackc/pgx/v5, for control planes whose
// servers share one database.
//
// # Transactions and isolation
//
// Every write runs in one transaction at READ COMMITTED and takes explicit
// row locks on what it is about to decide on:
//
//   - WriteAllocations locks the rows of the consumers it writes (SELECT …
//     FOR UPDATE, sorted by UUID), then the rows of every provider it may
//     change — those the writes name (allocations and
//     ProviderGenerations) and those the consumers, now locked, hold
//     allocations on, which is what placement.ProvidersTouched will name
//     — again with FOR UPDATE and sorted by UUID. Only then does it read
//     the consumers' allocations and the providers' generations,
//     inventories and usage, each read in a statement of its own so that,
//     at READ COMMITTED, it sees every transaction that held those locks
//     before it; rows that were not locked (created between two
//     statements) are left out, as if they did not exist yet.
//     placement.PlanWrites decides on that state and the plan is written
//     in the same transaction.
//   - SetInventories and DeleteProvider lock the provider row,
//     UpdateService the service row; the record writes that check a
//     version (UpdateInstance, UpdateMigration) are single conditional
//     UPDATEs.
//
// Locks are always taken in the same order — consumers, then providers,
// each set sorted by the database (ORDER BY, so in one collation for every
// writer), then the change counter last (below) — so writers never
// deadlock one another; should the server still report a deadlock or a
// serialization failure, the whole transaction is retried. The locks only
// serialise the commits of writes to the same providers: claims stay
// optimistic, decided by the generations the writers name, and writes to
// different providers run in parallel. Two writers creating the same new
// consumer both find nothing to lock; the second one's INSERT then fails on
// the primary key and its transaction is tried again, where PlanWrites sees
// the consumer and reports the conflict.
//
// SERIALIZABLE with retries would also be correct, but under contention
// (many schedulers claiming the same few hosts) it aborts transactions that
// the locks simply queue, its predicate locks cost memory and CPU on every
// read, and it would not solve the change stream's ordering (below) by
// itself. READ COMMITTED with explicit locks behaves like the SQLite store's
// single writer, but per provider.
//
// A transaction's statements go to the server in pipelines: a claim for a
// new consumer is two round trips, one that begins the transaction, locks
// and reads, and one that writes and commits.
//
// # Usage
//
// Each inventory row carries a used column, the sum of the allocations of
// its provider and class, so deciding a claim costs a few primary-key
// lookups whatever the number of providers or allocations. A trigger on the
// allocations table keeps it in step in the same transaction, whoever
// changes the allocations; a CHECK keeps it non-negative and foreign keys
// tie every allocation to its consumer and its inventory.
//
// # Change stream
//
// The change stream is the changes table. Its seq is not taken from a
// sequence: sequence values are handed out at insert time but become
// visible at commit time, so under concurrency a transaction holding seq 7
// can commit after one holding seq 8, and a reader that has already moved
// past 8 (reading seq > since) would never see 7. Instead, the single row
// of change_counter is incremented by every transaction that appends
// changes, as its last statement before COMMIT, and the new rows take the
// values below the new counter. The row lock on the counter is held until
// the transaction has committed and become visible (PostgreSQL releases a
// transaction's locks after making it visible), so the next writer gets
// the next values only then: seq values become visible in increasing order
// and without gaps, and a reader that has seen seq n has seen everything
// up to n. The cost is that change-writing transactions (provider,
// allocation, host-record and service writes) serialise for the time of
// one statement and their commit (with synchronous_commit on, its WAL
// flush), which bounds them to one commit at a time across all servers
// sharing the database; the rest of each transaction, its locks on
// consumers and providers included, runs in parallel. An advisory lock
// taken around the insert would order them in the same way; the counter also
// makes seq gapless, which keeps ErrChangesTrimmed exact, and gives
// LastChange in one primary-key read.
//
// The table keeps the most recent Options.KeepChanges rows (200,000 by
// default), older ones being deleted every so often after a commit, and
// Changes returns store.ErrChangesTrimmed to a reader that fell behind the
// oldest kept row.
//
// # Schema
//
// The schema lives in numbered files under migrations/, embedded in the
// binary and applied at Open by sqlstore.Migrate, the runner both SQL
// stores share, through pgx's database/sql adapter on the store's pool: in
// order, in one transaction, each recorded in the schema_version table.
// The migrating transaction first takes a transaction-level advisory lock,
// so servers starting together against a new database apply each
// migration once.
//
// Compute records (host records, services, instances, migrations, flavors,
// aggregates, server groups, key pairs, quota limits, plans) are stored as
// JSONB next to the columns they are looked up by, by sqlstore.Records,
// the one implementation of those tables for both SQL stores; this package
// lends it its pool and its write transactions (sharedDB), whose record
// writes join the pipelines and the change counter above. Unlike the
// SQLite store's JSON text, JSONB refuses the NUL character (\u0000) in
// strings: a record holding one is refused.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"keel/internal/store"
	"keel/internal/store/sqlstore"
)

// Options tune a store; the zero value gives the defaults. The connection
// pool is configured through the URL (pool_max_conns and the other
// parameters pgxpool.ParseConfig knows).
type Options struct {
	// KeepChanges is how many change-stream entries are kept; default
	// 200,000.
	KeepChanges int
}

// DefaultKeepChanges is the default of Options.KeepChanges.
const DefaultKeepChanges = 200_000

// Store is the PostgreSQL store. It is safe for concurrent use, and any
// number of stores, in one process or many, may share a database.
type Store struct {
	// Records are the compute records, written once for both SQL stores.
	*sqlstore.Records

	pool      *pgxpool.Pool
	keep      int64
	trimEvery int64
	sinceTrim atomic.Int64

	retries [numRetryReasons]atomic.Int64

	closeOnce sync.Once
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

// Open connects to the database at url (a postgres:// URL or a key=value
// connection string) with the default options and brings its schema up to
// date.
func Open(ctx context.Context, url string) (*Store, error) {
	return OpenWith(ctx, url, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.KeepChanges <= 0 {
		opts.KeepChanges = DefaultKeepChanges
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password included.
		return nil, errors.New("postgres: parsing the connection URL failed")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connecting: %w", err)
	}
	s := &Store{
		pool:      pool,
		keep:      int64(opts.KeepChanges),
		trimEvery: int64(min(max(opts.KeepChanges/100, 1), 1000)),
	}
	s.Records = sqlstore.NewRecords(sharedDB{s}, sqlstore.Postgres)
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: opening: %w", err)
	}
	return s, nil
}

// Close closes the store's connections. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}

// beginSQL starts every write transaction.
const beginSQL = "BEGIN ISOLATION LEVEL READ COMMITTED"

// maxAttempts bounds the attempts of one write transaction.
const maxAttempts = 50

// retryReason says why a write transaction was tried again.
type retryReason int

const (
	retrySerialization retryReason = iota // SQLSTATE 40001
	retryDeadlock                         // SQLSTATE 40P01
	retryConsumerRace                     // a new consumer was created meanwhile
	retryRelock                           // a provider to decide on was not locked
	numRetryReasons
)

// errRelock asks write to start the transaction again: it found that it
// was about to decide on a row it had not locked.
var errRelock = errors.New("more rows to lock")

func retryable(err error) (retryReason, bool) {
	if errors.Is(err, errRelock) {
		return retryRelock, true
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return 0, false
	}
	switch {
	case pe.Code == "40001":
		return retrySerialization, true
	case pe.Code == "40P01":
		return retryDeadlock, true
	case pe.Code == "23505" && pe.ConstraintName == "consumers_pkey":
		// Two writers created the same consumer; the one that lost sees
		// it exist on the next attempt, where PlanWrites decides.
		return retryConsumerRace, true
	}
	return 0, false
}

// isUniqueViolation reports whether err is a unique violation of a
// constraint of table.
func isUniqueViolation(err error, table string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == table
}

// wtx is one attempt at a write transaction on one connection. Statements
// are queued and sent in pipelines by send; the first pipeline begins the
// transaction and the last one appends the changes and commits.
type wtx struct {
	ctx   context.Context
	conn  *pgxpool.Conn
	batch *pgx.Batch
	begun bool

	// Change-stream entries to append at commit.
	kinds, keys []string
}

// queue adds a statement to the next pipeline, after BEGIN if the
// transaction has not begun yet.
func (w *wtx) queue(query string, args ...any) *pgx.QueuedQuery {
	if w.batch == nil {
		w.batch = &pgx.Batch{}
	}
	if !w.begun {
		w.batch.Queue(beginSQL)
		w.begun = true
	}
	return w.batch.Queue(query, args...)
}

// send sends the queued statements and runs their callbacks. The server
// skips everything after a failed statement.
func (w *wtx) send() error {
	if w.batch == nil || w.batch.Len() == 0 {
		return nil
	}
	b := w.batch
	w.batch = nil
	return w.conn.SendBatch(w.ctx, b).Close()
}

// note records a change-stream entry, appended when the transaction
// commits.
func (w *wtx) note(kind store.ChangeKind, key string) {
	w.kinds = append(w.kinds, string(kind))
	w.keys = append(w.keys, key)
}

// qAppendChanges takes len($1) values from the counter and inserts the
// changes with them, in order. It is the last statement before COMMIT: the
// counter row stays locked until the transaction is visible.
const qAppendChanges = `WITH c AS (
		UPDATE change_counter SET seq = seq + cardinality($1::text[]) RETURNING seq
	)
	INSERT INTO changes (seq, kind, key)
	SELECT c.seq - cardinality($1::text[]) + k.n, k.kind, k.key
	FROM c, unnest($1::text[], $2::text[]) WITH ORDINALITY AS k (kind, key, n)`

// write runs fn in a write transaction, committing if fn returns nil, and
// tries again (with a fresh call of fn) after a deadlock, a serialization
// failure or a race that a new attempt resolves.
func (s *Store) write(ctx context.Context, fn func(w *wtx) error) error {
	for attempt := 1; ; attempt++ {
		n, err := s.try(ctx, fn)
		if err == nil {
			s.afterCommit(ctx, n)
			return nil
		}
		reason, ok := retryable(err)
		if !ok || attempt >= maxAttempts || ctx.Err() != nil {
			return err
		}
		s.retries[reason].Add(1)
		if reason == retryRelock {
			continue
		}
		// Let the transaction that won go ahead.
		d := time.Duration(rand.Int64N(int64(min(attempt, 10)) * int64(time.Millisecond)))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
	}
}

// try makes one attempt of a write transaction and returns the number of
// changes it appended.
func (s *Store) try(ctx context.Context, fn func(w *wtx) error) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("acquiring a connection: %w", err)
	}
	defer conn.Release()
	w := &wtx{ctx: ctx, conn: conn}
	err = fn(w)
	if err == nil {
		if len(w.kinds) > 0 {
			w.queue(qAppendChanges, w.kinds, w.keys)
		}
		if w.begun {
			w.queue("COMMIT")
		}
		err = w.send()
	}
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
			// A connection left inside a transaction is destroyed on
			// release, which ends the transaction too.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = conn.Exec(rctx, "ROLLBACK")
			cancel()
		}
		return 0, err
	}
	return len(w.kinds), nil
}

// afterCommit trims the change stream now and then.
func (s *Store) afterCommit(ctx context.Context, changes int) {
	if changes == 0 || s.sinceTrim.Add(int64(changes)) < s.trimEvery {
		return
	}
	// A failed trim is tried again after the next change.
	if _, err := s.pool.Exec(ctx, `DELETE FROM changes WHERE seq <= (SELECT seq FROM change_counter) - $1`, s.keep); err == nil {
		s.sinceTrim.Store(0)
	}
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// schemaMigrations returns the embedded migrations, checked.
func schemaMigrations() ([]sqlstore.Migration, error) { return sqlstore.Migrations(migrationFiles) }

// migrate applies the pending schema migrations through pgx's database/sql
// adapter on the store's pool, with the runner both SQL stores share.
func (s *Store) migrate(ctx context.Context) error {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return sqlstore.Migrate(ctx, db, sqlstore.Postgres, migrationFiles)
}

// Retries reports how many write transactions were tried again, by
// reason: deadlocks and serialization failures reported by the server,
// races between writers creating the same consumer, and allocation writes
// that found a provider to decide on unlocked (which the lock order should
// make impossible).
func (s *Store) Retries() (deadlocks, serialization, consumerRaces, relocks int64) {
	return s.retries[retryDeadlock].Load(), s.retries[retrySerialization].Load(),
		s.retries[retryConsumerRace].Load(), s.retries[retryRelock].Load()
}
