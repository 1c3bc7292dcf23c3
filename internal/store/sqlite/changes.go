package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"keel/internal/store"
)

// Changes implements store.Store. It returns store.ErrChangesTrimmed when
// entries after since were already trimmed away. A limit of zero or less
// means no limit.
func (s *Store) Changes(ctx context.Context, since int64, limit int) ([]store.Change, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	// Prepared before the read transaction takes a connection of the pool.
	minStmt, err := s.rstmts.get(ctx, `SELECT MIN(seq) FROM changes`)
	if err != nil {
		return nil, fmt.Errorf("changes since %d: %w", since, err)
	}
	listStmt, err := s.rstmts.get(ctx, `SELECT seq, kind, key FROM changes WHERE seq > ? ORDER BY seq LIMIT ?`)
	if err != nil {
		return nil, fmt.Errorf("changes since %d: %w", since, err)
	}
	var out []store.Change
	err = s.read(ctx, func(tx *sql.Tx) error {
		// Both queries in one snapshot, so a trim between them cannot
		// open an unnoticed gap.
		var oldest sql.NullInt64
		if err := tx.StmtContext(ctx, minStmt).QueryRowContext(ctx).Scan(&oldest); err != nil {
			return fmt.Errorf("reading oldest change: %w", err)
		}
		if oldest.Valid && since < oldest.Int64-1 {
			return store.ErrChangesTrimmed
		}
		rows, err := tx.StmtContext(ctx, listStmt).QueryContext(ctx, since, limit)
		if err != nil {
			return fmt.Errorf("reading changes: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var c store.Change
			var kind string
			if err := rows.Scan(&c.Seq, &kind, &c.Key); err != nil {
				return fmt.Errorf("scanning change: %w", err)
			}
			c.Kind = store.ChangeKind(kind)
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("changes since %d: %w", since, err)
	}
	return out, nil
}

// LastChange implements store.Store.
func (s *Store) LastChange(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.rqueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM changes`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("reading last change: %w", err)
	}
	return seq, nil
}
