package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"keel/internal/store"
)

// Helpers for the tables that keep a record as a JSONB column beside the
// columns it is looked up by. Each returns errors without the record's
// name; the callers add which record and which key.

// getJSON reads one JSONB column into v; ErrNotFound if there is no row.
func (s *Store) getJSON(ctx context.Context, v any, query string, args ...any) error {
	var data []byte
	err := s.pool.QueryRow(ctx, query, args...).Scan(&data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}

// listJSON decodes the JSONB column of every row of a query, keeping those
// keep accepts (all if keep is nil). It never returns a nil slice without
// an error.
func listJSON[T any](ctx context.Context, s *Store, keep func(T) bool, query string, args ...any) ([]T, error) {
	rows, err := s.pool.Query(ctx, query, args...)
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

// lockJSON reads one row's JSON column with FOR UPDATE inside a write
// transaction and decodes it into v; ErrNotFound without a row.
func (w *wtx) lockJSON(v any, query string, args ...any) error {
	var data []byte
	w.queue(query, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&data); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := w.send(); err != nil {
		return err
	}
	if data == nil {
		return store.ErrNotFound
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	return nil
}

// putJSON queues a write statement whose last argument is v's JSON; args
// come before it.
func (w *wtx) putJSON(query string, v any, args ...any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	w.queue(query, append(args, data)...)
	return nil
}

// insertJSON runs an INSERT … ON CONFLICT DO NOTHING whose last argument
// is v's JSON; ErrExists if it adds no row.
func (s *Store) insertJSON(ctx context.Context, query string, v any, args ...any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	ct, err := s.pool.Exec(ctx, query, append(args, data)...)
	if err != nil {
		return err
	}
	if ct.RowsAffected() == 0 {
		return store.ErrExists
	}
	return nil
}

// deleteOne runs a DELETE that must remove one row; ErrNotFound otherwise.
func (s *Store) deleteOne(ctx context.Context, query string, args ...any) error {
	ct, err := s.pool.Exec(ctx, query, args...)
	if err != nil {
		return err
	}
	if ct.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

// updateJSON locks a record with lock(key) (a SELECT … FOR UPDATE), lets fn
// change it and hands the result to put, in one write transaction. put
// queues the row's write and restores what fn may not change (the
// record's key). A retried transaction starts again from the stored row.
func updateJSON[T any](ctx context.Context, s *Store, lock string, key any, fn func(*T) error, put func(*wtx, *T) error) (T, error) {
	var v T
	err := s.write(ctx, func(w *wtx) error {
		v = *new(T)
		if err := w.lockJSON(&v, lock, key); err != nil {
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
