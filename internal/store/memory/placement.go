package memory

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"keel/internal/placement"
	"keel/internal/store"
)

// Placement is the in-memory store's placement: providers, their trees,
// traits, aggregates and custom resource classes (tree.go), and the
// consumers' allocations (consumers.go). It implements store.Placement.
type Placement struct {
	*core
	providers  map[string]*placement.Provider
	names      map[string]string // name → uuid
	usage      map[string]placement.Resources
	consumers  map[string]consumerRec           // consumers.go
	byProvider map[string][]placement.Consumer  // provider → its consumers' headers (no allocations), by UUID
	ids        ids                              // numbers for consumerRec
	traits     map[string]bool                  // created (custom) traits
	classes    map[placement.ResourceClass]bool // created (custom) resource classes
}

func newPlacement(c *core) *Placement {
	return &Placement{
		core:       c,
		providers:  map[string]*placement.Provider{},
		names:      map[string]string{},
		usage:      map[string]placement.Resources{},
		consumers:  map[string]consumerRec{},
		byProvider: map[string][]placement.Consumer{},
		traits:     map[string]bool{},
		classes:    map[placement.ResourceClass]bool{},
	}
}

// CreateProvider implements store.Store.
func (pl *Placement) CreateProvider(_ context.Context, p placement.Provider) (placement.Provider, error) {
	if p.UUID == "" || p.Name == "" {
		return placement.Provider{}, &placement.InvalidError{Msg: "provider needs a uuid and a name"}
	}
	p.Inventories = p.Inventories.WithDefaults()
	if err := p.Inventories.Validate(); err != nil {
		return placement.Provider{}, err
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if _, ok := pl.providers[p.UUID]; ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", p.UUID, store.ErrExists)
	}
	if _, ok := pl.names[p.Name]; ok {
		return placement.Provider{}, fmt.Errorf("provider name %q: %w", p.Name, store.ErrExists)
	}
	if err := pl.checkNewProvider(p); err != nil {
		return placement.Provider{}, err
	}
	p.Generation = 0
	if len(p.Inventories) > 0 {
		p.Generation = 1
	}
	p = p.Clone()
	p.Traits, p.Aggregates = placement.NormalizeNames(p.Traits), placement.NormalizeNames(p.Aggregates)
	pl.providers[p.UUID] = &p
	pl.names[p.Name] = p.UUID
	pl.note(store.ChangeProvider, p.UUID)
	return clone(p), nil
}

func clone(p placement.Provider) placement.Provider { return p.Clone() }

// GetProvider implements store.Store.
func (pl *Placement) GetProvider(_ context.Context, uuid string) (placement.Provider, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p, ok := pl.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	return clone(*p), nil
}

// ProviderSummaries implements store.Store.
func (pl *Placement) ProviderSummaries(_ context.Context, uuids []string) ([]store.ProviderSummary, error) {
	return pl.summaries(uuids, clone), nil
}

// SharedProviderSummaries is ProviderSummaries with each provider's
// inventories, traits and aggregates shared with the store, not copied
// (its usage is copied): the caller must not change them. The store never
// changes them in place — it replaces them whole — so they stay as they
// were read (scheduler.SharingSource).
func (pl *Placement) SharedProviderSummaries(_ context.Context, uuids []string) ([]store.ProviderSummary, error) {
	return pl.summaries(uuids, func(p placement.Provider) placement.Provider { return p }), nil
}

func (pl *Placement) summaries(uuids []string, copyOf func(placement.Provider) placement.Provider) []store.ProviderSummary {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if uuids == nil {
		for u := range pl.providers {
			uuids = append(uuids, u)
		}
		sort.Strings(uuids)
	}
	out := make([]store.ProviderSummary, 0, len(uuids))
	for _, u := range uuids {
		p, ok := pl.providers[u]
		if !ok {
			continue
		}
		out = append(out, store.ProviderSummary{Provider: copyOf(*p), Usage: pl.usage[u].Clone()})
	}
	return out
}

// SetInventories implements store.Store.
func (pl *Placement) SetInventories(_ context.Context, uuid string, gen int64, invs placement.Inventories) (placement.Provider, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p, ok := pl.providers[uuid]
	if !ok {
		return placement.Provider{}, fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	invs = invs.WithDefaults()
	if err := placement.CheckInventoryUpdate(*p, pl.usage[uuid], gen, invs); err != nil {
		return placement.Provider{}, fmt.Errorf("setting inventories of %s: %w", uuid, err)
	}
	p.Inventories = invs.Clone()
	p.Generation++
	pl.note(store.ChangeProvider, uuid)
	return clone(*p), nil
}

// DeleteProvider implements store.Store.
func (pl *Placement) DeleteProvider(_ context.Context, uuid string) error {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	p, ok := pl.providers[uuid]
	if !ok {
		return fmt.Errorf("provider %s: %w", uuid, store.ErrNotFound)
	}
	if len(pl.byProvider[uuid]) > 0 {
		return fmt.Errorf("deleting provider %s: %w", uuid, &placement.InUseError{Provider: uuid})
	}
	for _, q := range pl.providers {
		if q.ParentUUID == uuid {
			return fmt.Errorf("deleting provider %s: parent of %s: %w", uuid, q.UUID, store.ErrHasChildren)
		}
	}
	delete(pl.providers, uuid)
	delete(pl.names, p.Name)
	delete(pl.usage, uuid)
	pl.note(store.ChangeProvider, uuid)
	return nil
}

// GetConsumer implements store.Store.
func (pl *Placement) GetConsumer(_ context.Context, uuid string) (placement.Consumer, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	c, ok := pl.consumers[uuid]
	if !ok {
		return placement.Consumer{}, fmt.Errorf("consumer %s: %w", uuid, store.ErrNotFound)
	}
	return pl.ids.consumer(uuid, &c), nil
}

// ConsumersOn implements store.Store.
func (pl *Placement) ConsumersOn(_ context.Context, providerUUID string) ([]placement.Consumer, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	heads := pl.byProvider[providerUUID]
	out := make([]placement.Consumer, len(heads))
	for i, h := range heads {
		c := pl.consumers[h.UUID]
		out[i] = pl.ids.consumer(h.UUID, &c)
	}
	return out, nil
}

// ConsumerHeadersOn is ConsumersOn without the allocations (each
// consumer's Allocations is nil): what the resource tracker's audit reads
// of every consumer on its host (compute.ConsumerLister), without a copy
// of every allocation.
func (pl *Placement) ConsumerHeadersOn(_ context.Context, providerUUID string) ([]placement.Consumer, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	heads := pl.byProvider[providerUUID]
	out := make([]placement.Consumer, len(heads))
	copy(out, heads)
	return out, nil
}

// WriteAllocations implements store.Store.
func (pl *Placement) WriteAllocations(_ context.Context, writes ...placement.AllocationWrite) (placement.WritePlan, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	st := placement.WriteState{Providers: map[string]placement.ProviderState{}, Consumers: map[string]placement.Consumer{}}
	for _, w := range writes {
		if c, ok := pl.consumers[w.ConsumerUUID]; ok {
			st.Consumers[w.ConsumerUUID] = pl.ids.consumer(w.ConsumerUUID, &c)
		}
		for p := range w.ProviderGenerations {
			pl.addProviderState(st, p)
		}
	}
	for _, p := range placement.ProvidersTouched(st.Consumers, writes) {
		pl.addProviderState(st, p)
	}
	plan, err := placement.PlanWrites(st, writes)
	if err != nil {
		return placement.WritePlan{}, err
	}
	pl.apply(plan)
	return plan, nil
}

// apply persists an allocation plan (pl.mu held).
func (pl *Placement) apply(plan placement.WritePlan) {
	for _, ch := range plan.Consumers {
		if old, ok := pl.consumers[ch.UUID]; ok {
			old.eachProvider(func(pi int32, es []allocEntry) {
				p := pl.ids.provs[pi]
				u := pl.usageOf(p)
				for _, e := range es {
					if e.class != noClass {
						rc := pl.ids.classes[e.class]
						if u[rc] -= e.n; u[rc] == 0 {
							delete(u, rc)
						}
					}
				}
				pl.dropConsumerOn(p, ch.UUID)
			})
			delete(pl.consumers, ch.UUID)
		}
		if ch.New == nil {
			continue
		}
		rec := pl.ids.pack(ch.New)
		pl.consumers[ch.UUID] = rec
		head := rec.header(ch.UUID)
		rec.eachProvider(func(pi int32, es []allocEntry) {
			p := pl.ids.provs[pi]
			u := pl.usageOf(p)
			for _, e := range es {
				if e.class != noClass {
					rc := pl.ids.classes[e.class]
					u[rc] = placement.AddAmounts(u[rc], e.n)
				}
			}
			pl.addConsumerOn(p, head)
		})
	}
	var buf [4]string // on the stack: a claim's provider or two
	provs := buf[:0]
	for p := range plan.Providers {
		provs = append(provs, p)
	}
	slices.Sort(provs)
	for _, p := range provs {
		pl.providers[p].Generation = plan.Providers[p]
		pl.note(store.ChangeProvider, p)
	}
}

// usageOf is provider p's usage, made if it has none yet (as
// Resources.Add and Sub make it). Called with mu held.
func (pl *Placement) usageOf(p string) placement.Resources {
	u := pl.usage[p]
	if u == nil {
		u = placement.Resources{}
		pl.usage[p] = u
	}
	return u
}

// Reshape implements store.Store.
func (pl *Placement) Reshape(_ context.Context, invs []placement.InventoryWrite, writes []placement.AllocationWrite) (placement.ReshapePlan, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	st := placement.WriteState{Providers: map[string]placement.ProviderState{}, Consumers: map[string]placement.Consumer{}}
	for _, w := range writes {
		if c, ok := pl.consumers[w.ConsumerUUID]; ok {
			st.Consumers[w.ConsumerUUID] = pl.ids.consumer(w.ConsumerUUID, &c)
		}
	}
	for _, iw := range invs {
		pl.addProviderState(st, iw.UUID)
	}
	for _, p := range placement.ProvidersTouched(st.Consumers, writes) {
		pl.addProviderState(st, p)
	}
	plan, err := placement.PlanReshape(st, invs, writes)
	if err != nil {
		return placement.ReshapePlan{}, fmt.Errorf("reshaping: %w", err)
	}
	for u, next := range plan.Inventories {
		pl.providers[u].Inventories = next.Clone()
	}
	pl.apply(plan.WritePlan)
	return plan, nil
}

func (pl *Placement) addProviderState(st placement.WriteState, uuid string) {
	if _, done := st.Providers[uuid]; done {
		return
	}
	p, ok := pl.providers[uuid]
	if !ok {
		return
	}
	st.Providers[uuid] = placement.ProviderState{UUID: uuid, Generation: p.Generation, Inventories: p.Inventories, Usage: pl.usage[uuid]}
}
