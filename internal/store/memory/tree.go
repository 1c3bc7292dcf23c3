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
func (s *Store) parentOf(uuid string) (string, bool, error) {
	p, ok := s.providers[uuid]
	if !ok {
		return "", false, nil
	}
	return p.ParentUUID, true, nil
}

func (s *Store) isCustomTrait(name string) (bool, error) { return s.traits[name], nil }

// checkNewProvider checks a new provider's parent and traits. Called with
// mu held.
func (s *Store) checkNewProvider(p placement.Provider) error {
	if err := placement.CheckParent(placement.Provider{UUID: p.UUID}, p.ParentUUID, false, s.parentOf); err != nil {
		return fmt.Errorf("creating provider %s: %w", p.UUID, err)
	}
	if err := placement.UnknownTraits(p.Traits, s.isCustomTrait); err != nil {
		return fmt.Errorf("creating provider %s: %w", p.UUID, err)
	}
	return nil
}

// UpdateProvider implements store.Store.
func (s *Store) UpdateProvider(_ context.Context, uuid, name, parent string, reparent bool) (placement.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	if name == "" {
		return placement.Provider{}, &placement.InvalidError{Msg: "provider needs a name"}
	}
	if other, taken := s.names[name]; taken && other != uuid {
		return placement.Provider{}, fmt.Errorf("renaming provider %s: name %q: %w", uuid, name, store.ErrExists)
	}
	if err := placement.CheckParent(*p, parent, reparent, s.parentOf); err != nil {
		return placement.Provider{}, fmt.Errorf("updating provider %s: %w", uuid, err)
	}
	delete(s.names, p.Name)
	p.Name, p.ParentUUID = name, parent
	s.names[name] = uuid
	s.note(store.ChangeProvider, uuid)
	return clone(*p), nil
}

// SetProviderTraits implements store.Store.
func (s *Store) SetProviderTraits(_ context.Context, uuid string, gen int64, traits []string) (placement.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	if err := placement.CheckGeneration(*p, gen); err != nil {
		return placement.Provider{}, fmt.Errorf("setting traits of %s: %w", uuid, err)
	}
	if err := placement.UnknownTraits(traits, s.isCustomTrait); err != nil {
		return placement.Provider{}, fmt.Errorf("setting traits of %s: %w", uuid, err)
	}
	p.Traits = placement.NormalizeNames(traits)
	p.Generation++
	s.note(store.ChangeProvider, uuid)
	return clone(*p), nil
}

// SetProviderAggregates implements store.Store.
func (s *Store) SetProviderAggregates(_ context.Context, uuid string, gen *int64, aggregates []string) (placement.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.providers[uuid]
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
	s.note(store.ChangeProvider, uuid)
	return clone(*p), nil
}

// CreateTrait implements store.Store.
func (s *Store) CreateTrait(_ context.Context, name string) (bool, error) {
	if err := placement.ValidateCustomTrait(name); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.traits[name] {
		return false, nil
	}
	s.traits[name] = true
	return true, nil
}

// CustomTraits implements store.Store.
func (s *Store) CustomTraits(_ context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.traits)), nil
}

// DeleteTrait implements store.Store.
func (s *Store) DeleteTrait(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.traits[name] {
		return fmt.Errorf("trait %s: %w", name, store.ErrNotFound)
	}
	for _, u := range slices.Sorted(maps.Keys(s.providers)) {
		if _, has := slices.BinarySearch(s.providers[u].Traits, name); has {
			return fmt.Errorf("deleting trait %s: provider %s has it: %w", name, u, store.ErrInUse)
		}
	}
	delete(s.traits, name)
	return nil
}

// CreateResourceClass implements store.Store.
func (s *Store) CreateResourceClass(_ context.Context, rc placement.ResourceClass) error {
	if !rc.IsCustom() || rc.Validate() != nil {
		return &placement.InvalidError{Msg: fmt.Sprintf("resource class %q: custom classes are CUSTOM_[A-Z0-9_]+", rc)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.classes[rc] {
		return fmt.Errorf("resource class %s: %w", rc, store.ErrExists)
	}
	s.classes[rc] = true
	return nil
}

// CustomResourceClasses implements store.Store.
func (s *Store) CustomResourceClasses(_ context.Context) ([]placement.ResourceClass, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.classes)), nil
}

// DeleteResourceClass implements store.Store.
func (s *Store) DeleteResourceClass(_ context.Context, rc placement.ResourceClass) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.classes[rc] {
		return fmt.Errorf("resource class %s: %w", rc, store.ErrNotFound)
	}
	for _, u := range slices.Sorted(maps.Keys(s.providers)) {
		if _, has := s.providers[u].Inventories[rc]; has {
			return fmt.Errorf("deleting resource class %s: provider %s has an inventory of it: %w", rc, u, store.ErrInUse)
		}
	}
	delete(s.classes, rc)
	return nil
}
