package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"keel/internal/records"
	"keel/internal/store"
)

// CreateKeyPair implements store.Store: one statement draws the id from
// the table's sequence and writes it into the record as it inserts.
func (s *Store) CreateKeyPair(ctx context.Context, kp records.KeyPair) (records.KeyPair, error) {
	data, err := json.Marshal(kp)
	if err != nil {
		return records.KeyPair{}, fmt.Errorf("creating key pair %q of user %s: encoding: %w", kp.Name, kp.UserID, err)
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO key_pairs (id, user_id, name, data)
		SELECT n, $1, $2, jsonb_set($3::jsonb, '{id}', to_jsonb(n))
		FROM nextval(pg_get_serial_sequence('key_pairs', 'id')) AS n
		ON CONFLICT DO NOTHING RETURNING id`, kp.UserID, kp.Name, data).Scan(&kp.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrExists
	}
	if err != nil {
		return records.KeyPair{}, fmt.Errorf("creating key pair %q of user %s: %w", kp.Name, kp.UserID, err)
	}
	return kp, nil
}

// GetKeyPair implements store.Store.
func (s *Store) GetKeyPair(ctx context.Context, userID, name string) (records.KeyPair, error) {
	var kp records.KeyPair
	if err := s.getJSON(ctx, &kp, `SELECT data FROM key_pairs WHERE user_id = $1 AND name = $2`, userID, name); err != nil {
		return records.KeyPair{}, fmt.Errorf("key pair %q of user %s: %w", name, userID, err)
	}
	return kp, nil
}

// ListKeyPairs implements store.Store.
func (s *Store) ListKeyPairs(ctx context.Context, userID string) ([]records.KeyPair, error) {
	out, err := listJSON[records.KeyPair](ctx, s, nil, `SELECT data FROM key_pairs WHERE user_id = $1 ORDER BY name`, userID)
	if err != nil {
		return nil, fmt.Errorf("listing key pairs of user %s: %w", userID, err)
	}
	return out, nil
}

// DeleteKeyPair implements store.Store.
func (s *Store) DeleteKeyPair(ctx context.Context, userID, name string) error {
	if err := s.deleteOne(ctx, `DELETE FROM key_pairs WHERE user_id = $1 AND name = $2`, userID, name); err != nil {
		return fmt.Errorf("deleting key pair %q of user %s: %w", name, userID, err)
	}
	return nil
}
