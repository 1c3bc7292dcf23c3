package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"keel/internal/store"
)

// Row is one row of a query's answer (*sql.Row, pgx.Row). Scan returns an
// error wrapping sql.ErrNoRows if there is no row.
type Row interface {
	Scan(dest ...any) error
}

// Rows iterates a query's answer; Close releases it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// DB is what a backend lends the shared layer: reads outside a
// transaction, a single statement in a transaction of its own, and write
// transactions. Statements come in the backend's dialect (Dialect.Rebind).
type DB interface {
	QueryRow(ctx context.Context, query string, args ...any) Row
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// Exec runs one statement in a transaction of its own and returns the
	// number of rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Write runs fn in one write transaction, committing if it returns
	// nil. A backend may call fn again after a conflict the database
	// reports (a deadlock, a serialization failure).
	Write(ctx context.Context, fn func(Tx) error) error
}

// Tx is one write transaction. Every statement it runs was listed by
// Dialect.WriteStatements.
type Tx interface {
	// Exec runs a statement now and returns the number of rows it changed.
	Exec(query string, args ...any) (int64, error)
	// Put runs a statement whose answer is not needed; the backend may
	// send it with the commit, whose error is then its error.
	Put(query string, args ...any) error
	QueryRow(query string, args ...any) Row
	// Note appends an entry to the change stream, visible with the
	// commit: every write the scheduler's view follows calls it.
	Note(kind store.ChangeKind, key string) error
}

// Records implements the compute records (store.Records and the other
// record roles) once, as JSON in a column beside the columns they are
// looked up by, over a backend's DB in its dialect.
type Records struct {
	db DB
	d  *Dialect
	q  *queries
}

var (
	_ store.Records         = (*Records)(nil)
	_ store.IdentityStore   = (*Records)(nil)
	_ store.HostBatchReader = (*Records)(nil)
)

// NewRecords returns the shared record tables over db, which speaks d.
func NewRecords(db DB, d *Dialect) *Records {
	return &Records{db: db, d: d, q: d.q}
}

// encode returns v's JSON as the text argument every dialect takes for a
// JSON column.
func encode(v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding: %w", err)
	}
	return string(data), nil
}

// decode reads a JSON column into v.
func decode(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}

// scanJSON scans a row's JSON column into v; ErrNotFound without a row.
func scanJSON(row Row, v any) error {
	var data []byte
	switch err := row.Scan(&data); {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	}
	return decode(data, v)
}

// getJSON reads one JSON column into v; ErrNotFound if there is no row.
// Errors carry no record name: the callers add which record and key.
func (r *Records) getJSON(ctx context.Context, v any, query string, args ...any) error {
	return scanJSON(r.db.QueryRow(ctx, query, args...), v)
}

// listJSON decodes the JSON column of every row of a query, keeping those
// keep accepts (all if keep is nil). It never returns a nil slice without
// an error.
func listJSON[T any](ctx context.Context, r *Records, keep func(T) bool, query string, args ...any) ([]T, error) {
	rows, err := r.db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		var v T
		if err := decode(data, &v); err != nil {
			return nil, err
		}
		if keep == nil || keep(v) {
			out = append(out, v)
		}
	}
	return out, rows.Err()
}

// putJSON runs (or queues) a write whose last argument is v's JSON; args
// come before it.
func putJSON(tx Tx, query string, v any, args ...any) error {
	data, err := encode(v)
	if err != nil {
		return err
	}
	return tx.Put(query, append(args, data)...)
}

// insertJSON runs an INSERT … ON CONFLICT DO NOTHING whose last argument
// is v's JSON; ErrExists if it adds no row.
func (r *Records) insertJSON(ctx context.Context, query string, v any, args ...any) error {
	data, err := encode(v)
	if err != nil {
		return err
	}
	n, err := r.db.Exec(ctx, query, append(args, data)...)
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrExists
	}
	return nil
}

// deleteOne runs a DELETE that must remove one row; ErrNotFound otherwise.
func deleteOne(n int64, err error) error {
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// insertID runs an INSERT … RETURNING id; ErrExists if it adds no row (ON
// CONFLICT DO NOTHING).
func insertID(tx Tx, query string, args ...any) (int64, error) {
	var id int64
	switch err := tx.QueryRow(query, args...).Scan(&id); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, store.ErrExists
	case err != nil:
		return 0, err
	}
	return id, nil
}

// updateJSON reads a record with lock(key) (locking its row where the
// dialect locks rows), lets fn change it and hands the result to put, in
// one write transaction. put writes the row back and restores what fn may
// not change (the record's key). A retried transaction starts again from
// the stored row.
func updateJSON[T any](ctx context.Context, r *Records, lock string, key any, fn func(*T) error, put func(Tx, *T) error) (T, error) {
	var v T
	err := r.db.Write(ctx, func(tx Tx) error {
		v = *new(T)
		if err := scanJSON(tx.QueryRow(lock, key), &v); err != nil {
			return err
		}
		if err := fn(&v); err != nil {
			return err
		}
		return put(tx, &v)
	})
	if err != nil {
		return *new(T), err
	}
	return v, nil
}

// updateVersioned writes a record whose row carries a version with one
// conditional UPDATE (update, whose last two arguments are the key and the
// expected version); only a refused one reads the version again (version,
// taking the key), to tell ErrNotFound from a conflict, which conflict
// builds.
func (r *Records) updateVersioned(ctx context.Context, update, version string, key any, expected int64, conflict func(actual int64) error, args ...any) error {
	n, err := r.db.Exec(ctx, update, append(args, key, expected)...)
	if err != nil {
		return fmt.Errorf("updating: %w", err)
	}
	if n == 1 {
		return nil
	}
	var cur int64
	switch err := r.db.QueryRow(ctx, version, key).Scan(&cur); {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return fmt.Errorf("reading the version: %w", err)
	}
	return conflict(cur)
}
