package sqlite

import (
	"context"
	"database/sql"

	"keel/internal/store"
	"keel/internal/store/sqlstore"
)

// The shared record tables (sqlstore.Records) run on this store's
// connections: reads on the read pool, writes in the single writer's
// transactions, their statements prepared at Open with the others.
func init() {
	for _, q := range sqlstore.SQLite.WriteStatements() {
		wq(q)
	}
}

// sharedDB lends the store's connections to sqlstore.Records.
type sharedDB struct{ s *Store }

var _ sqlstore.DB = sharedDB{}

func (d sharedDB) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return d.s.rqueryRow(ctx, query, args...)
}

func (d sharedDB) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := d.s.rquery(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (d sharedDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := d.s.write(ctx, func(w *wtx) error {
		var err error
		n, err = w.Exec(query, args...)
		return err
	})
	return n, err
}

func (d sharedDB) Write(ctx context.Context, fn func(sqlstore.Tx) error) error {
	return d.s.write(ctx, func(w *wtx) error { return fn(w) })
}

// sqlRows is *sql.Rows with a Close that reports nothing (a read's
// rows.Err has the say).
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

var _ sqlstore.Tx = (*wtx)(nil)

// Exec implements sqlstore.Tx.
func (w *wtx) Exec(query string, args ...any) (int64, error) {
	res, err := w.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Put implements sqlstore.Tx: the single writer runs it now.
func (w *wtx) Put(query string, args ...any) error {
	_, err := w.exec(query, args...)
	return err
}

// QueryRow implements sqlstore.Tx.
func (w *wtx) QueryRow(query string, args ...any) sqlstore.Row { return w.queryRow(query, args...) }

// Note implements sqlstore.Tx.
func (w *wtx) Note(kind store.ChangeKind, key string) error { return w.note(kind, key) }

var _ sqlstore.ProviderTx = (*wtx)(nil)

// LockProvider implements sqlstore.ProviderTx: the single writer holds
// the database for the whole transaction, so a read is as good as a lock.
func (w *wtx) LockProvider(uuid string) (*store.ProviderSummary, error) { return w.loadProvider(uuid) }
