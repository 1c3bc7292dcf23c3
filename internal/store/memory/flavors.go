package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// CreateFlavor implements store.Store.
func (r *Records) CreateFlavor(_ context.Context, f records.Flavor) (records.Flavor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f.ID == "" || f.Name == "" {
		return records.Flavor{}, &placement.InvalidError{Msg: "flavor needs an id and a name"}
	}
	if _, ok := r.flavors[f.ID]; ok {
		return records.Flavor{}, fmt.Errorf("flavor %s: %w", f.ID, store.ErrExists)
	}
	for _, o := range r.flavors {
		if o.Name == f.Name {
			return records.Flavor{}, fmt.Errorf("flavor name %q: %w", f.Name, store.ErrExists)
		}
	}
	f = cloneFlavor(f)
	r.flavors[f.ID] = f
	return cloneFlavor(f), nil
}

// UpdateFlavor implements store.Store.
func (r *Records) UpdateFlavor(_ context.Context, id string, fn func(*records.Flavor) error) (records.Flavor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.flavors[id]
	if !ok {
		return records.Flavor{}, fmt.Errorf("flavor %s: %w", id, store.ErrNotFound)
	}
	f := cloneFlavor(cur)
	if err := fn(&f); err != nil {
		return records.Flavor{}, err
	}
	f.ID, f.Name = cur.ID, cur.Name
	r.flavors[id] = cloneFlavor(f)
	return f, nil
}

// GetFlavor implements store.Store.
func (r *Records) GetFlavor(_ context.Context, id string) (records.Flavor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.flavors[id]
	if !ok {
		return records.Flavor{}, fmt.Errorf("flavor %s: %w", id, store.ErrNotFound)
	}
	return cloneFlavor(f), nil
}

// ListFlavors implements store.Store.
func (r *Records) ListFlavors(_ context.Context) ([]records.Flavor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]records.Flavor, 0, len(r.flavors))
	for _, id := range slices.Sorted(maps.Keys(r.flavors)) {
		out = append(out, cloneFlavor(r.flavors[id]))
	}
	return out, nil
}

// DeleteFlavor implements store.Store.
func (r *Records) DeleteFlavor(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.flavors[id]; !ok {
		return fmt.Errorf("flavor %s: %w", id, store.ErrNotFound)
	}
	delete(r.flavors, id)
	return nil
}

func cloneFlavor(f records.Flavor) records.Flavor {
	if f.ExtraSpecs != nil {
		specs := make(map[string]string, len(f.ExtraSpecs))
		for k, v := range f.ExtraSpecs {
			specs[k] = v
		}
		f.ExtraSpecs = specs
	}
	f.Projects = slices.Clone(f.Projects)
	return f
}
