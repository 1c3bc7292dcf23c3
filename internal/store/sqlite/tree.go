package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"keel/internal/placement"
	"keel/internal/store"
	"keel/internal/store/sqlstore"
)

// ParentOf is placement.CheckParent's view of the providers inside a
// write transaction.
func (w *wtx) ParentOf(uuid string) (string, bool, error) {
	var parent string
	err := w.queryRow(qProviderParent, uuid).Scan(&parent)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading parent of %s: %w", uuid, err)
	}
	return parent, true, nil
}

func (w *wtx) IsCustomTrait(name string) (bool, error) {
	var n int
	if err := w.queryRow(qCustomTraitExists, name).Scan(&n); err != nil {
		return false, fmt.Errorf("looking up trait %s: %w", name, err)
	}
	return n > 0, nil
}

// UpdateProvider implements store.Store: sqlstore.Rename's edit, the name
// checked free before the row is written.
func (s *Store) UpdateProvider(ctx context.Context, uuid, name, parent string, reparent bool) (placement.Provider, error) {
	if err := sqlstore.CheckRename(name); err != nil {
		return placement.Provider{}, err
	}
	var out placement.Provider
	err := s.write(ctx, func(w *wtx) (err error) {
		out, err = sqlstore.EditProvider(w, uuid, sqlstore.Rename(w, name, parent, reparent), func(_ *store.ProviderSummary, _ placement.Provider) error {
			var owner string
			switch err := w.queryRow(qProviderNameOwner, name).Scan(&owner); {
			case err == nil && owner != uuid:
				return fmt.Errorf("name %q: %w", name, store.ErrExists)
			case err != nil && !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("checking name %q: %w", name, err)
			}
			if _, err := w.exec(qUpdateProvider, name, sql.NullString{String: parent, Valid: parent != ""}, uuid); err != nil {
				return fmt.Errorf("writing provider: %w", err)
			}
			return nil
		})
		return err
	})
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
			if _, err := w.exec(qSetProviderTraits, encodeNames(next.Traits), next.Generation, uuid); err != nil {
				return fmt.Errorf("writing traits: %w", err)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return placement.Provider{}, fmt.Errorf("setting traits of %s: %w", uuid, err)
	}
	return out, nil
}

// SetProviderAggregates implements store.Store with sqlstore.SetAggregates's
// edit.
func (s *Store) SetProviderAggregates(ctx context.Context, uuid string, gen *int64, aggregates []string) (placement.Provider, error) {
	var out placement.Provider
	err := s.write(ctx, func(w *wtx) (err error) {
		out, err = sqlstore.EditProvider(w, uuid, sqlstore.SetAggregates(gen, aggregates), func(_ *store.ProviderSummary, next placement.Provider) error {
			if _, err := w.exec(qSetProviderAggregates, encodeNames(next.Aggregates), next.Generation, uuid); err != nil {
				return fmt.Errorf("writing aggregates: %w", err)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return placement.Provider{}, fmt.Errorf("setting aggregates of %s: %w", uuid, err)
	}
	return out, nil
}

// deleteName deletes a created trait or class unless user finds a
// provider that uses it.
func (s *Store) deleteName(ctx context.Context, what, name, user, del string) error {
	err := s.write(ctx, func(w *wtx) error {
		var p string
		switch err := w.queryRow(user, name).Scan(&p); {
		case err == nil:
			return fmt.Errorf("provider %s uses it: %w", p, store.ErrInUse)
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("checking its use: %w", err)
		}
		res, err := w.exec(del, name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("%s %s: %w", what, name, store.ErrNotFound)
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
	return s.deleteName(ctx, "trait", name, qTraitUser, qDeleteTrait)
}

// DeleteResourceClass implements store.Store.
func (s *Store) DeleteResourceClass(ctx context.Context, rc placement.ResourceClass) error {
	return s.deleteName(ctx, "resource class", string(rc), qClassUser, qDeleteClass)
}
