package sqlstore

import (
	"context"
	"fmt"

	"keel/internal/placement"
	"keel/internal/store"
)

// Placement's custom traits and resource classes: created and listed here
// for both SQL stores. Deleting one stays each backend's, as it must lock
// against a provider being given the name meanwhile, and the two lock
// differently.

// CreateTrait implements store.Store.
func (r *Records) CreateTrait(ctx context.Context, name string) (bool, error) {
	if err := placement.ValidateCustomTrait(name); err != nil {
		return false, err
	}
	n, err := r.db.Exec(ctx, r.q.insertTrait, name)
	if err != nil {
		return false, fmt.Errorf("creating trait %s: %w", name, err)
	}
	return n == 1, nil
}

// CustomTraits implements store.Store.
func (r *Records) CustomTraits(ctx context.Context) ([]string, error) {
	out, err := r.names(ctx, r.q.listTraits)
	if err != nil {
		return nil, fmt.Errorf("listing traits: %w", err)
	}
	return out, nil
}

// CreateResourceClass implements store.Store.
func (r *Records) CreateResourceClass(ctx context.Context, rc placement.ResourceClass) error {
	if !rc.IsCustom() || rc.Validate() != nil {
		return &placement.InvalidError{Msg: fmt.Sprintf("resource class %q: custom classes are CUSTOM_[A-Z0-9_]+", rc)}
	}
	n, err := r.db.Exec(ctx, r.q.insertClass, string(rc))
	if err == nil && n == 0 {
		err = store.ErrExists
	}
	if err != nil {
		return fmt.Errorf("creating resource class %s: %w", rc, err)
	}
	return nil
}

// CustomResourceClasses implements store.Store.
func (r *Records) CustomResourceClasses(ctx context.Context) ([]placement.ResourceClass, error) {
	names, err := r.names(ctx, r.q.listClasses)
	if err != nil {
		return nil, fmt.Errorf("listing resource classes: %w", err)
	}
	out := make([]placement.ResourceClass, len(names))
	for i, n := range names {
		out[i] = placement.ResourceClass(n)
	}
	return out, nil
}

// names reads a one-column list of names, never nil without an error.
func (r *Records) names(ctx context.Context, query string) ([]string, error) {
	rows, err := r.db.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
