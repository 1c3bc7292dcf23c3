package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"keel/internal/store"
)

// Helpers for the tables that keep a record as a JSON column beside the
// columns it is looked up by. Each returns errors without the record's
// name; the callers add which record and which key.

// getJSON reads one JSON column into v; ErrNotFound if there is no row.
func (s *Store) getJSON(ctx context.Context, v any, query string, args ...any) error {
	var data []byte
	err := s.rqueryRow(ctx, query, args...).Scan(&data)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}

// listJSON decodes the JSON column of every row of a query, keeping those
// keep accepts (all if keep is nil). It never returns a nil slice without
// an error.
func listJSON[T any](ctx context.Context, s *Store, keep func(T) bool, query string, args ...any) ([]T, error) {
	rows, err := s.rquery(ctx, query, args...)
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
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("decoding: %w", err)
		}
		if keep == nil || keep(v) {
			out = append(out, v)
		}
	}
	return out, rows.Err()
}

// getJSON decodes one row's JSON column inside a write transaction;
// ErrNotFound without a row.
func (w *wtx) getJSON(query string, v any, args ...any) error {
	var data string
	if err := w.queryRow(query, args...).Scan(&data); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		return err
	}
	return json.Unmarshal([]byte(data), v)
}

// deleteOne runs a DELETE that must remove one row; ErrNotFound otherwise.
func (w *wtx) deleteOne(query string, args ...any) error {
	res, err := w.exec(query, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// putJSON runs a write statement whose last argument is v's JSON; args
// come before it.
func (w *wtx) putJSON(query string, v any, args ...any) (sql.Result, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding: %w", err)
	}
	return w.exec(query, append(args, string(data))...)
}

// insertJSON runs an INSERT … ON CONFLICT DO NOTHING as putJSON does;
// ErrExists if it adds no row.
func (w *wtx) insertJSON(query string, v any, args ...any) error {
	res, err := w.putJSON(query, v, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return store.ErrExists
	}
	return nil
}

// insertJSON is wtx.insertJSON in a write transaction of its own.
func (s *Store) insertJSON(ctx context.Context, query string, v any, args ...any) error {
	return s.write(ctx, func(w *wtx) error { return w.insertJSON(query, v, args...) })
}

// deleteOne is wtx.deleteOne in a write transaction of its own.
func (s *Store) deleteOne(ctx context.Context, query string, args ...any) error {
	return s.write(ctx, func(w *wtx) error { return w.deleteOne(query, args...) })
}

// updateJSON reads a record with get(key), lets fn change it and hands the
// result to put, in one write transaction. put writes the row back and
// restores what fn may not change (the record's key).
func updateJSON[T any](ctx context.Context, s *Store, get string, key any, fn func(*T) error, put func(*wtx, *T) error) (T, error) {
	var v T
	err := s.write(ctx, func(w *wtx) error {
		v = *new(T)
		if err := w.getJSON(get, &v, key); err != nil {
			return err
		}
		if err := fn(&v); err != nil {
			return err
		}
		return put(w, &v)
	})
	if err != nil {
		return *new(T), err
	}
	return v, nil
}
