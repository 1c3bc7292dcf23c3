package sqlstore

import (
	"fmt"

	"keel/internal/placement"
	"keel/internal/store"
)

// The rules every provider write of both SQL stores follows, written once:
// the generation checked, the names normalised, the traits known, the
// parent checked, the generation bumped and the change noted. Each backend
// keeps its own reads and writes (ProviderTx and the put functions): the
// SQLite store's single writer and the PostgreSQL store's row locks and
// pipelines are deliberately different.

// ProviderTx is the part of a backend's write transaction the provider
// rules read through.
type ProviderTx interface {
	// LockProvider reads a provider with its inventories and usage,
	// locking its row where the backend locks rows; an error wrapping
	// store.ErrNotFound if there is none.
	LockProvider(uuid string) (*store.ProviderSummary, error)
	// ParentOf is placement.CheckParent's view of the providers.
	ParentOf(uuid string) (parent string, found bool, err error)
	// IsCustomTrait reports whether a custom trait was created (keeping it,
	// where the backend locks rows, until the transaction ends).
	IsCustomTrait(name string) (bool, error)
	// Note appends a change-stream entry (as Tx.Note).
	Note(kind store.ChangeKind, key string) error
}

// Edit decides an edit of an existing provider from its current state.
type Edit func(cur *store.ProviderSummary) (placement.Provider, error)

// EditProvider is the one composition of every edit of an existing
// provider: read (and lock) it, let edit check the change and decide the
// new state, write that with put (which also sees the current state), and
// note the provider in the change stream.
func EditProvider(tx ProviderTx, uuid string, edit Edit, put func(cur *store.ProviderSummary, next placement.Provider) error) (placement.Provider, error) {
	cur, err := tx.LockProvider(uuid)
	if err != nil {
		return placement.Provider{}, err
	}
	next, err := edit(cur)
	if err != nil {
		return placement.Provider{}, err
	}
	if err := put(cur, next); err != nil {
		return placement.Provider{}, err
	}
	if err := tx.Note(store.ChangeProvider, uuid); err != nil {
		return placement.Provider{}, err
	}
	return next, nil
}

// SetTraits is SetProviderTraits's edit: gen must be current, every trait
// standard or created; the names are normalised and the generation bumped.
func SetTraits(tx ProviderTx, gen int64, traits []string) Edit {
	return func(cur *store.ProviderSummary) (placement.Provider, error) {
		if err := placement.CheckGeneration(cur.Provider, gen); err != nil {
			return placement.Provider{}, err
		}
		if err := placement.UnknownTraits(traits, tx.IsCustomTrait); err != nil {
			return placement.Provider{}, err
		}
		out := cur.Provider
		out.Traits, out.Generation = placement.NormalizeNames(traits), cur.Generation+1
		return out, nil
	}
}

// SetAggregates is SetProviderAggregates's edit: gen, unless nil, must be
// current; the names are normalised and the generation bumped.
func SetAggregates(gen *int64, aggregates []string) Edit {
	return func(cur *store.ProviderSummary) (placement.Provider, error) {
		if gen != nil {
			if err := placement.CheckGeneration(cur.Provider, *gen); err != nil {
				return placement.Provider{}, err
			}
		}
		out := cur.Provider
		out.Aggregates, out.Generation = placement.NormalizeNames(aggregates), cur.Generation+1
		return out, nil
	}
}

// SetInventories is SetInventories's edit: placement.CheckInventoryUpdate
// (the generation, the classes in use, the inventories' own rules) on the
// inventories with their defaults, then the generation bumped. put removes
// the classes of cur that next does not have and writes next's.
func SetInventories(gen int64, invs placement.Inventories) Edit {
	return func(cur *store.ProviderSummary) (placement.Provider, error) {
		invs := invs.WithDefaults()
		if err := placement.CheckInventoryUpdate(cur.Provider, cur.Usage, gen, invs); err != nil {
			return placement.Provider{}, err
		}
		out := cur.Provider.Clone()
		out.Generation, out.Inventories = cur.Generation+1, invs.Clone()
		return out, nil
	}
}

// Rename is UpdateProvider's edit: placement.CheckParent on the new parent;
// the generation is not bumped, as in Placement. The name must not be
// empty (checked before the transaction, by CheckRename).
func Rename(tx ProviderTx, name, parent string, reparent bool) Edit {
	return func(cur *store.ProviderSummary) (placement.Provider, error) {
		if err := placement.CheckParent(cur.Provider, parent, reparent, tx.ParentOf); err != nil {
			return placement.Provider{}, err
		}
		out := cur.Provider
		out.Name, out.ParentUUID = name, parent
		return out, nil
	}
}

// CheckRename refuses an UpdateProvider without a name.
func CheckRename(name string) error {
	if name == "" {
		return &placement.InvalidError{Msg: "provider needs a name"}
	}
	return nil
}

// NewProvider checks and completes a provider to create, before its
// transaction: a UUID and a name, inventories with their defaults and
// valid, generation 1 with inventories (0 without), names normalised.
func NewProvider(p placement.Provider) (placement.Provider, error) {
	if p.UUID == "" || p.Name == "" {
		return placement.Provider{}, &placement.InvalidError{Msg: "provider needs a uuid and a name"}
	}
	p.Inventories = p.Inventories.WithDefaults()
	if err := p.Inventories.Validate(); err != nil {
		return placement.Provider{}, fmt.Errorf("creating provider %s: %w", p.UUID, err)
	}
	p.Generation = 0
	if len(p.Inventories) > 0 {
		p.Generation = 1
	}
	p = p.Clone()
	p.Traits, p.Aggregates = placement.NormalizeNames(p.Traits), placement.NormalizeNames(p.Aggregates)
	return p, nil
}

// CreateProvider is CreateProvider's composition inside the transaction,
// for p from NewProvider: the parent checked (it must exist), every trait
// standard or created, p written with put, and the change noted.
func CreateProvider(tx ProviderTx, p placement.Provider, put func() error) error {
	if err := placement.CheckParent(placement.Provider{UUID: p.UUID}, p.ParentUUID, false, tx.ParentOf); err != nil {
		return err
	}
	if err := placement.UnknownTraits(p.Traits, tx.IsCustomTrait); err != nil {
		return err
	}
	if err := put(); err != nil {
		return err
	}
	return tx.Note(store.ChangeProvider, p.UUID)
}

// DeleteProvider is DeleteProvider's composition inside the transaction:
// del checks (the provider exists, holds nothing, has no children) and
// deletes; then the change is noted.
func DeleteProvider(tx ProviderTx, uuid string, del func() error) error {
	if err := del(); err != nil {
		return err
	}
	return tx.Note(store.ChangeProvider, uuid)
}

// InOrder returns the providers read for ProviderSummaries in the order
// the interface promises: all of them as read (sorted by UUID) for nil
// uuids, otherwise those of uuids that exist, in the order asked for.
func InOrder(ps []*store.ProviderSummary, uuids []string) []store.ProviderSummary {
	out := make([]store.ProviderSummary, 0, len(ps))
	if uuids == nil {
		for _, p := range ps {
			out = append(out, *p)
		}
		return out
	}
	byUUID := make(map[string]*store.ProviderSummary, len(ps))
	for _, p := range ps {
		byUUID[p.UUID] = p
	}
	for _, u := range uuids {
		if p, ok := byUUID[u]; ok {
			out = append(out, *p)
		}
	}
	return out
}
