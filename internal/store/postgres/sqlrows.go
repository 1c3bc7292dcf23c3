package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"keel/internal/store"
	"keel/internal/store/sqlstore"
)

// sharedDB lends the store's pool to sqlstore.Records: reads and single
// statements straight on the pool, write transactions through write (its
// pipelines, retries and change counter).
type sharedDB struct{ s *Store }

var _ sqlstore.DB = sharedDB{}

func (d sharedDB) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return d.s.pool.QueryRow(ctx, query, args...)
}

func (d sharedDB) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	return d.s.pool.Query(ctx, query, args...)
}

func (d sharedDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	ct, err := d.s.pool.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return ct.RowsAffected(), nil
}

func (d sharedDB) Write(ctx context.Context, fn func(sqlstore.Tx) error) error {
	return d.s.write(ctx, func(w *wtx) error { return fn(w) })
}

var _ sqlstore.Tx = (*wtx)(nil)

// Exec implements sqlstore.Tx: it sends the pipeline, this statement last.
func (w *wtx) Exec(query string, args ...any) (int64, error) {
	var n int64
	w.queue(query, args...).Exec(func(ct pgconn.CommandTag) error {
		n = ct.RowsAffected()
		return nil
	})
	if err := w.send(); err != nil {
		return 0, err
	}
	return n, nil
}

// Put implements sqlstore.Tx: the statement is queued, and goes with the
// next pipeline (at the latest the one that commits).
func (w *wtx) Put(query string, args ...any) error {
	w.queue(query, args...)
	return nil
}

// QueryRow implements sqlstore.Tx: Scan sends the pipeline, this statement
// last.
func (w *wtx) QueryRow(query string, args ...any) sqlstore.Row {
	return txRow{w, query, args}
}

// Note implements sqlstore.Tx: the entry is appended at commit.
func (w *wtx) Note(kind store.ChangeKind, key string) error {
	w.note(kind, key)
	return nil
}

// txRow is a single-row query of a write transaction, run by Scan.
type txRow struct {
	w     *wtx
	query string
	args  []any
}

func (r txRow) Scan(dest ...any) error {
	var noRows error
	r.w.queue(r.query, r.args...).QueryRow(func(row pgx.Row) error {
		// No row is the caller's answer, not the pipeline's failure.
		if err := row.Scan(dest...); errors.Is(err, pgx.ErrNoRows) {
			noRows = err
		} else if err != nil {
			return err
		}
		return nil
	})
	if err := r.w.send(); err != nil {
		return err
	}
	return noRows
}

var _ sqlstore.ProviderTx = (*wtx)(nil)

// LockProvider implements sqlstore.ProviderTx (SELECT … FOR UPDATE).
func (w *wtx) LockProvider(uuid string) (*store.ProviderSummary, error) { return w.lockProvider(uuid) }
