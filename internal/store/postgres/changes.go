package postgres

import (
	"context"
	"fmt"

	"keel/internal/store"
)

// qChanges reads the oldest kept seq and the page after since in one
// statement, hence one snapshot: a trim in between cannot open an unnoticed
// gap. It always returns a row; the page's columns are NULL when it is
// empty. A NULL limit means no limit.
const qChanges = `SELECT o.oldest, c.seq, c.kind, c.key
	FROM (SELECT min(seq) AS oldest FROM changes) o
	LEFT JOIN LATERAL (
		SELECT seq, kind, key FROM changes WHERE seq > $1 ORDER BY seq LIMIT $2
	) c ON true
	ORDER BY c.seq`

// Changes implements store.Store. It returns store.ErrChangesTrimmed when
// entries after since were already trimmed away. A limit of zero or less
// means no limit.
func (s *Store) Changes(ctx context.Context, since int64, limit int) ([]store.Change, error) {
	var lim *int64
	if limit > 0 {
		l := int64(limit)
		lim = &l
	}
	rows, err := s.pool.Query(ctx, qChanges, since, lim)
	if err != nil {
		return nil, fmt.Errorf("changes since %d: %w", since, err)
	}
	defer rows.Close()
	var out []store.Change
	for rows.Next() {
		var (
			oldest, seq *int64
			kind, key   *string
		)
		if err := rows.Scan(&oldest, &seq, &kind, &key); err != nil {
			return nil, fmt.Errorf("changes since %d: %w", since, err)
		}
		if oldest != nil && since < *oldest-1 {
			return nil, fmt.Errorf("changes since %d: %w", since, store.ErrChangesTrimmed)
		}
		if seq == nil {
			continue
		}
		out = append(out, store.Change{Seq: *seq, Kind: store.ChangeKind(*kind), Key: *key})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("changes since %d: %w", since, err)
	}
	return out, nil
}

// LastChange implements store.Store: the counter is the newest seq.
func (s *Store) LastChange(ctx context.Context) (int64, error) {
	var seq int64
	if err := s.pool.QueryRow(ctx, `SELECT seq FROM change_counter`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("reading last change: %w", err)
	}
	return seq, nil
}
