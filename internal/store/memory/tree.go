package memory

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"keel/internal/placement"
	"keel/internal/store"
)

// parentOf is placement.CheckParent's view of the providers. Called with
// mu held.
func (pl *Placement) parentOf(uuid string) (string, bool, error) {
	p, ok := pl.providers[uuid]
	if !ok {
		return "", false, nil
	}
	return p.ParentUUID, true, nil
}

func (pl *Placement) isCustomTrait(name string) (bool, error) { return pl.traits[name], nil }

// checkNewProvider checks a new provider's parent and traits. Called with
// mu held.
func (pl *Placement) checkNewProvider(p placement.Provider) error {
	if err := placement.CheckParent(placement.Provider{UUID: p.UUID}, p.ParentUUID, false, pl.parentOf); err != nil {
		return fmt.Errorf("creating provider %s: %w", p.UUID, err)
	}
	if err := placement.UnknownTraits(p.Traits, pl.isCustomTrait); err != nil {
		return fmt.Errorf("creating provider %s: %w", p.UUID, err)
	}
	return nil
}

// UpdateProvider implements store.Store.
func (pl *Placement) UpdateProvider(_ context.Context, uuid, name, parent string, reparent bool) (placement.Provider, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p, ok := pl.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	if name == "" {
		return placement.Provider{}, &placement.InvalidError{Msg: "provider needs a name"}
	}
	if other, taken := pl.names[name]; taken && other != uuid {
		return placement.Provider{}, fmt.Errorf("renaming provider %s: name %q: %w", uuid, name, store.ErrExists)
	}
	if err := placement.CheckParent(*p, parent, reparent, pl.parentOf); err != nil {
		return placement.Provider{}, fmt.Errorf("updating provider %s: %w", uuid, err)
	}
	delete(pl.names, p.Name)
	p.Name, p.ParentUUID = name, parent
	pl.names[name] = uuid
	pl.note(store.ChangeProvider, uuid)
	return clone(*p), nil
}

// SetProviderTraits implements store.Store.
func (pl *Placement) SetProviderTraits(_ context.Context, uuid string, gen int64, traits []string) (placement.Provider, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p, ok := pl.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	if err := placement.CheckGeneration(*p, gen); err != nil {
		return placement.Provider{}, fmt.Errorf("setting traits of %s: %w", uuid, err)
	}
	if err := placement.UnknownTraits(traits, pl.isCustomTrait); err != nil {
		return placement.Provider{}, fmt.Errorf("setting traits of %s: %w", uuid, err)
	}
	p.Traits = placement.NormalizeNames(traits)
	p.Generation++
	pl.note(store.ChangeProvider, uuid)
	return clone(*p), nil
}

// SetProviderAggregates implements store.Store.
func (pl *Placement) SetProviderAggregates(_ context.Context, uuid string, gen *int64, aggregates []string) (placement.Provider, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p, ok := pl.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	if gen != nil {
		if err := placement.CheckGeneration(*p, *gen); err != nil {
			return placement.Provider{}, fmt.Errorf("setting aggregates of %s: %w", uuid, err)
		}
	}
	p.Aggregates = placement.NormalizeNames(aggregates)
	p.Generation++
	pl.note(store.ChangeProvider, uuid)
	return clone(*p), nil
}

// CreateTrait implements store.Store.
func (pl *Placement) CreateTrait(_ context.Context, name string) (bool, error) {
	if err := placement.ValidateCustomTrait(name); err != nil {
		return false, err
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.traits[name] {
		return false, nil
	}
	pl.traits[name] = true
	return true, nil
}

// CustomTraits implements store.Store.
func (pl *Placement) CustomTraits(_ context.Context) ([]string, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return slices.Sorted(maps.Keys(pl.traits)), nil
}

// DeleteTrait implements store.Store.
func (pl *Placement) DeleteTrait(_ context.Context, name string) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if !pl.traits[name] {
		return fmt.Errorf("trait %s: %w", name, store.ErrNotFound)
	}
	for _, u := range slices.Sorted(maps.Keys(pl.providers)) {
		if _, has := slices.BinarySearch(pl.providers[u].Traits, name); has {
			return fmt.Errorf("deleting trait %s: provider %s has it: %w", name, u, store.ErrInUse)
		}
	}
	delete(pl.traits, name)
	return nil
}

// CreateResourceClass implements store.Store.
func (pl *Placement) CreateResourceClass(_ context.Context, rc placement.ResourceClass) error {
	if !rc.IsCustom() || rc.Validate() != nil {
		return &placement.InvalidError{Msg: fmt.Sprintf("resource class %q: custom classes are CUSTOM_[A-Z0-9_]+", rc)}
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.classes[rc] {
		return fmt.Errorf("resource class %s: %w", rc, store.ErrExists)
	}
	pl.classes[rc] = true
	return nil
}

// CustomResourceClasses implements store.Store.
func (pl *Placement) CustomResourceClasses(_ context.Context) ([]placement.ResourceClass, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return slices.Sorted(maps.Keys(pl.classes)), nil
}

// DeleteResourceClass implements store.Store.
func (pl *Placement) DeleteResourceClass(_ context.Context, rc placement.ResourceClass) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if !pl.classes[rc] {
		return fmt.Errorf("resource class %s: %w", rc, store.ErrNotFound)
	}
	for _, u := range slices.Sorted(maps.Keys(pl.providers)) {
		if _, has := pl.providers[u].Inventories[rc]; has {
			return fmt.Errorf("deleting resource class %s: provider %s has an inventory of it: %w", rc, u, store.ErrInUse)
		}
	}
	delete(pl.classes, rc)
	return nil
}
