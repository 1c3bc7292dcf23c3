package sqlite

import (
	"context"
	"fmt"

	"keel/internal/records"
	"keel/internal/store"
)

var (
	qInsertKeyPair = wq(`INSERT INTO key_pairs (user_id, name, data) VALUES (?, ?, '{}') ON CONFLICT DO NOTHING`)
	qPutKeyPair    = wq(`UPDATE key_pairs SET data = ?2 WHERE id = ?1`)
	qDeleteKeyPair = wq(`DELETE FROM key_pairs WHERE user_id = ? AND name = ?`)
)

// CreateKeyPair implements store.Store: the row's id becomes the record's.
func (s *Store) CreateKeyPair(ctx context.Context, kp records.KeyPair) (records.KeyPair, error) {
	err := s.write(ctx, func(w *wtx) error {
		res, err := w.exec(qInsertKeyPair, kp.UserID, kp.Name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrExists
		}
		if kp.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		_, err = w.putJSON(qPutKeyPair, kp, kp.ID)
		return err
	})
	if err != nil {
		return records.KeyPair{}, fmt.Errorf("creating key pair %q of user %s: %w", kp.Name, kp.UserID, err)
	}
	return kp, nil
}

// GetKeyPair implements store.Store.
func (s *Store) GetKeyPair(ctx context.Context, userID, name string) (records.KeyPair, error) {
	var kp records.KeyPair
	if err := s.getJSON(ctx, &kp, `SELECT data FROM key_pairs WHERE user_id = ? AND name = ?`, userID, name); err != nil {
		return records.KeyPair{}, fmt.Errorf("key pair %q of user %s: %w", name, userID, err)
	}
	return kp, nil
}

// ListKeyPairs implements store.Store.
func (s *Store) ListKeyPairs(ctx context.Context, userID string) ([]records.KeyPair, error) {
	out, err := listJSON[records.KeyPair](ctx, s, nil, `SELECT data FROM key_pairs WHERE user_id = ? ORDER BY name`, userID)
	if err != nil {
		return nil, fmt.Errorf("listing key pairs of user %s: %w", userID, err)
	}
	return out, nil
}

// DeleteKeyPair implements store.Store.
func (s *Store) DeleteKeyPair(ctx context.Context, userID, name string) error {
	if err := s.deleteOne(ctx, qDeleteKeyPair, userID, name); err != nil {
		return fmt.Errorf("deleting key pair %q of user %s: %w", name, userID, err)
	}
	return nil
}
