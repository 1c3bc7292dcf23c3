package postgres

import (
	"context"

	"fmt"

	"github.com/jackc/pgx/v5"

	"keel/internal/placement"
	"keel/internal/store"
	"keel/internal/store/sqlstore"
)

// ParentOf is placement.CheckParent's view of the providers inside a
// write transaction.
func (w *wtx) ParentOf(uuid string) (string, bool, error) {
	var parent *string
	found := false
	w.queue(`SELECT COALESCE(parent_uuid, '') FROM providers WHERE uuid = $1`, uuid).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			if err := rows.Scan(&parent); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err := w.send(); err != nil {
		return "", false, fmt.Errorf("reading parent of %s: %w", uuid, err)
	}
	if !found {
		return "", false, nil
	}
	return *parent, true, nil
}

// IsCustomTrait looks a created trait up and keeps it locked (FOR SHARE)
// until the transaction ends, so that DeleteTrait cannot remove it under a
// provider being given it.
func (w *wtx) IsCustomTrait(name string) (bool, error) {
	found := false
	w.queue(`SELECT name FROM custom_traits WHERE name = $1 FOR SHARE`, name).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
		}
		return rows.Err()
	})
	if err := w.send(); err != nil {
		return false, fmt.Errorf("looking up trait %s: %w", name, err)
	}
	return found, nil
}

// UpdateProvider implements store.Store with sqlstore.Rename's edit; a
// taken name fails the UPDATE on the unique index.
func (s *Store) UpdateProvider(ctx context.Context, uuid, name, parent string, reparent bool) (placement.Provider, error) {
	if err := sqlstore.CheckRename(name); err != nil {
		return placement.Provider{}, err
	}
	var out placement.Provider
	err := s.write(ctx, func(w *wtx) (err error) {
		out, err = sqlstore.EditProvider(w, uuid, sqlstore.Rename(w, name, parent, reparent), func(_ *store.ProviderSummary, _ placement.Provider) error {
			w.queue(`UPDATE providers SET name = $1, parent_uuid = NULLIF($2, '') WHERE uuid = $3`, name, parent, uuid)
			return nil
		})
		return err
	})
	if isUniqueViolation(err, "providers") {
		return placement.Provider{}, fmt.Errorf("updating provider %s: name %q: %w", uuid, name, store.ErrExists)
	}
	if err != nil {
		return placement.Provider{}, fmt.Errorf("updating provider %s: %w", uuid, err)
	}
	return out, nil
}

// SetProviderTraits implements store.Store with sqlstore.SetTraits's edit.
func (s *Store) SetProviderTraits(ctx context.Context, uuid string, gen int64, traits []string) (placement.Provider, error) {
	var out placement.Provider
	err := s.write(ctx, func(w *wtx) (err error) {
		out, err = sqlstore.EditProvider(w, uuid, sqlstore.SetTraits(w, gen, traits), func(_ *store.ProviderSummary, next placement.Provider) error {
			w.queue(`UPDATE providers SET traits = $1, generation = $2 WHERE uuid = $3`, next.Traits, next.Generation, uuid)
			return nil
		})
		return err
	})
	if err != nil {
		return placement.Provider{}, fmt.Errorf("setting traits of %s: %w", uuid, err)
	}
	if len(out.Traits) == 0 {
		out.Traits = nil
	}
	return out, nil
}

// SetProviderAggregates implements store.Store with sqlstore.SetAggregates's
// edit.
func (s *Store) SetProviderAggregates(ctx context.Context, uuid string, gen *int64, aggregates []string) (placement.Provider, error) {
	var out placement.Provider
	err := s.write(ctx, func(w *wtx) (err error) {
		out, err = sqlstore.EditProvider(w, uuid, sqlstore.SetAggregates(gen, aggregates), func(_ *store.ProviderSummary, next placement.Provider) error {
			w.queue(`UPDATE providers SET aggregates = $1, generation = $2 WHERE uuid = $3`, next.Aggregates, next.Generation, uuid)
			return nil
		})
		return err
	})
	if err != nil {
		return placement.Provider{}, fmt.Errorf("setting aggregates of %s: %w", uuid, err)
	}
	if len(out.Aggregates) == 0 {
		out.Aggregates = nil
	}
	return out, nil
}

// deleteName deletes a created trait or class, then looks for a provider
// still using it and rolls back if there is one. Deleting first locks the
// row: a writer giving it to a provider (which locks it FOR SHARE) either
// committed before, and is seen, or waits and then finds it gone.
func (s *Store) deleteName(ctx context.Context, what, name, del, user string) error {
	err := s.write(ctx, func(w *wtx) error {
		var deleted int64
		var users []string
		w.queue(del, name).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				deleted++
			}
			return rows.Err()
		})
		w.queue(user, name).Query(func(rows pgx.Rows) error {
			var err error
			users, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err := w.send(); err != nil {
			return err
		}
		if deleted == 0 {
			return fmt.Errorf("%s %s: %w", what, name, store.ErrNotFound)
		}
		if len(users) > 0 {
			return fmt.Errorf("provider %s uses it: %w", users[0], store.ErrInUse)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", what, name, err)
	}
	return nil
}

// DeleteTrait implements store.Store.
func (s *Store) DeleteTrait(ctx context.Context, name string) error {
	return s.deleteName(ctx, "trait", name,
		`DELETE FROM custom_traits WHERE name = $1 RETURNING name`,
		`SELECT uuid FROM providers WHERE traits @> ARRAY[$1::text] ORDER BY uuid LIMIT 1`)
}

// DeleteResourceClass implements store.Store.
func (s *Store) DeleteResourceClass(ctx context.Context, rc placement.ResourceClass) error {
	return s.deleteName(ctx, "resource class", string(rc),
		`DELETE FROM custom_resource_classes WHERE name = $1 RETURNING name`,
		`SELECT provider_uuid FROM inventories WHERE resource_class = $1 ORDER BY provider_uuid LIMIT 1`)
}
