package placement

import (
	"fmt"
	"slices"
	"sort"
)

// Provider is a resource provider: a host's placement record.
type Provider struct {
	UUID        string      `json:"uuid"`
	Name        string      `json:"name"`
	Generation  int64       `json:"generation"`
	Inventories Inventories `json:"inventories"`
	// ParentUUID is the provider's parent in its provider tree; "" for a
	// root provider (every host's provider).
	ParentUUID string `json:"parent_provider_uuid,omitempty"`
	// Traits and Aggregates (aggregate UUIDs) are sorted, without
	// duplicates.
	Traits     []string `json:"traits,omitempty"`
	Aggregates []string `json:"aggregates,omitempty"`
}

// Clone returns a deep copy of p.
func (p Provider) Clone() Provider {
	p.Inventories = p.Inventories.Clone()
	p.Traits = slices.Clone(p.Traits)
	p.Aggregates = slices.Clone(p.Aggregates)
	return p
}

// Capacities returns the capacity per class.
func (p Provider) Capacities() Resources {
	out := make(Resources, len(p.Inventories))
	for rc, inv := range p.Inventories {
		out[rc] = inv.Capacity()
	}
	return out
}

// ConsumerType distinguishes instances from migrations (placement 1.38).
type ConsumerType string

// Consumer types.
const (
	ConsumerInstance  ConsumerType = "INSTANCE"
	ConsumerMigration ConsumerType = "MIGRATION"
	// ConsumerUnknown is the type of a consumer created through placement
	// before 1.38, which could not say (Placement's name for it).
	ConsumerUnknown ConsumerType = "unknown"
)

// Consumer is whoever holds allocations: an instance, or a migration holding
// the source side of a move.
type Consumer struct {
	UUID       string       `json:"uuid"`
	ProjectID  string       `json:"project_id"`
	UserID     string       `json:"user_id"`
	Type       ConsumerType `json:"consumer_type"`
	Generation int64        `json:"generation"`
	// Allocations maps provider UUID to the resources held there.
	Allocations map[string]Resources `json:"allocations"`
}

// Clone returns a deep copy of c.
func (c Consumer) Clone() Consumer {
	out := c
	out.Allocations = make(map[string]Resources, len(c.Allocations))
	for p, r := range c.Allocations {
		out.Allocations[p] = r.Clone()
	}
	return out
}

// Providers lists the provider UUIDs c holds allocations on, sorted.
func (c Consumer) Providers() []string {
	out := make([]string, 0, len(c.Allocations))
	for p := range c.Allocations {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// AllocationWrite replaces all allocations of one consumer (PUT
// /allocations/{consumer}); several in one call are applied atomically (POST
// /allocations), which is how a move hands the source side to a migration
// consumer while claiming the destination for the instance.
type AllocationWrite struct {
	ConsumerUUID string
	ProjectID    string
	UserID       string
	// Type is the consumer's type; empty keeps an existing consumer's
	// type and gives a new one NewType (INSTANCE if that is empty too).
	Type    ConsumerType
	NewType ConsumerType
	// ConsumerGeneration is the generation the writer last saw; nil means the
	// consumer must not exist yet. Ignored when AnyConsumerGeneration is set
	// (Placement before 1.28, and internal moves that hold their own lock).
	ConsumerGeneration    *int64
	AnyConsumerGeneration bool
	// Allocations maps provider UUID to resources; empty deletes the
	// consumer's allocations (and the consumer).
	Allocations map[string]Resources
	// KeepProviderGenerations leaves the generations of the providers
	// this write only releases allocations on as they are (Placement's
	// DELETE /allocations/{consumer} does not bump them); they are still
	// in the plan, at their current generation.
	KeepProviderGenerations bool
	// ProviderGenerations optionally names the generation the writer saw for
	// some providers (the scheduler does, from its host view); a mismatch is
	// a ConflictError of kind ProviderGeneration.
	ProviderGenerations map[string]int64
}

// ProviderState is what PlanWrites needs to know about one provider.
type ProviderState struct {
	UUID        string
	Generation  int64
	Inventories Inventories
	Usage       Resources
}

// WriteState is the current state of every provider and consumer a set of
// writes touches, as read by a store inside its transaction.
type WriteState struct {
	Providers map[string]ProviderState
	Consumers map[string]Consumer // absent: consumer does not exist
}

// ConsumerChange is one consumer's outcome: New is nil when it is deleted.
type ConsumerChange struct {
	UUID string
	New  *Consumer
}

// WritePlan is what a store persists to apply a set of writes.
type WritePlan struct {
	Consumers []ConsumerChange
	// Providers maps every provider the writes touched (those allocated on
	// now or before, as Placement counts them) to its new generation.
	Providers map[string]int64
}

// ProvidersTouched lists, sorted, every provider a set of writes may change:
// those named in the writes and those the consumers hold now.
func ProvidersTouched(current map[string]Consumer, writes []AllocationWrite) []string {
	set := map[string]bool{}
	for _, w := range writes {
		for p := range w.Allocations {
			set[p] = true
		}
		for p := range current[w.ConsumerUUID].Allocations {
			set[p] = true
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// PlanWrites decides a set of allocation writes against the current state:
// generation checks first (consumers, then the provider generations the
// writer named), then validity and capacity with the written consumers'
// old allocations removed. It returns the plan or a typed error
// (*ConflictError, *CapacityError, *InvalidError, or one wrapping
// ErrNotFound).
func PlanWrites(st WriteState, writes []AllocationWrite) (WritePlan, error) {
	seen := map[string]bool{}
	for _, w := range writes {
		if w.ConsumerUUID == "" {
			return WritePlan{}, invalidf("allocation write without a consumer")
		}
		if seen[w.ConsumerUUID] {
			return WritePlan{}, invalidf("consumer %s written twice in one request", w.ConsumerUUID)
		}
		seen[w.ConsumerUUID] = true
		if err := checkConsumerGeneration(st, w); err != nil {
			return WritePlan{}, err
		}
		for p, gen := range w.ProviderGenerations {
			ps, ok := st.Providers[p]
			if !ok {
				return WritePlan{}, fmt.Errorf("provider %s: %w", p, ErrNotFound)
			}
			if ps.Generation != gen {
				exp, act := gen, ps.Generation
				return WritePlan{}, &ConflictError{Kind: ProviderGeneration, UUID: p, Expected: &exp, Actual: &act}
			}
		}
	}

	// Usage without the rewritten consumers' current allocations.
	usage := map[string]Resources{}
	for p, ps := range st.Providers {
		usage[p] = ps.Usage.Clone()
	}
	changed := map[string]bool{} // provider → its generation moves
	for _, w := range writes {
		for p, r := range st.Consumers[w.ConsumerUUID].Allocations {
			usage[p] = usage[p].Sub(r)
			changed[p] = changed[p] || !w.KeepProviderGenerations
		}
	}

	plan := WritePlan{Providers: map[string]int64{}}
	var buf [4]string
	for _, w := range writes {
		for _, p := range sortedKeys(w.Allocations, buf[:0]) {
			r := w.Allocations[p]
			ps, ok := st.Providers[p]
			if !ok {
				return WritePlan{}, fmt.Errorf("allocating for consumer %s: provider %s: %w", w.ConsumerUUID, p, ErrNotFound)
			}
			if len(r) == 0 {
				return WritePlan{}, invalidf("consumer %s: no resources given for provider %s", w.ConsumerUUID, p)
			}
			for rc, n := range r {
				if n < 1 {
					return WritePlan{}, invalidf("consumer %s: amount %d of %s on %s must be at least 1", w.ConsumerUUID, n, rc, p)
				}
			}
			if err := Fits(p, ps.Inventories, usage[p], r); err != nil {
				return WritePlan{}, fmt.Errorf("allocating for consumer %s: %w", w.ConsumerUUID, err)
			}
			usage[p] = usage[p].Add(r)
			changed[p] = true
		}
		plan.Consumers = append(plan.Consumers, consumerChange(st, w))
	}
	for p, bump := range changed {
		plan.Providers[p] = st.Providers[p].Generation
		if bump {
			plan.Providers[p]++
		}
	}
	return plan, nil
}

// sortedKeys appends m's keys to buf, sorted: with a buffer on the
// caller's stack, a write to a provider or two allocates no list.
func sortedKeys[V any](m map[string]V, buf []string) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}

func checkConsumerGeneration(st WriteState, w AllocationWrite) error {
	if w.AnyConsumerGeneration {
		return nil
	}
	cur, exists := st.Consumers[w.ConsumerUUID]
	switch {
	case w.ConsumerGeneration == nil && !exists:
		return nil
	case w.ConsumerGeneration == nil && exists:
		act := cur.Generation
		return &ConflictError{Kind: ConsumerGeneration, UUID: w.ConsumerUUID, Actual: &act}
	case !exists:
		exp := *w.ConsumerGeneration
		return &ConflictError{Kind: ConsumerGeneration, UUID: w.ConsumerUUID, Expected: &exp}
	case cur.Generation != *w.ConsumerGeneration:
		exp, act := *w.ConsumerGeneration, cur.Generation
		return &ConflictError{Kind: ConsumerGeneration, UUID: w.ConsumerUUID, Expected: &exp, Actual: &act}
	}
	return nil
}

func consumerChange(st WriteState, w AllocationWrite) ConsumerChange {
	if len(w.Allocations) == 0 {
		return ConsumerChange{UUID: w.ConsumerUUID}
	}
	cur, exists := st.Consumers[w.ConsumerUUID]
	c := Consumer{UUID: w.ConsumerUUID, ProjectID: w.ProjectID, UserID: w.UserID, Type: w.Type, Generation: 1}
	if exists {
		c.Generation = cur.Generation + 1
		if c.ProjectID == "" {
			c.ProjectID = cur.ProjectID
		}
		if c.UserID == "" {
			c.UserID = cur.UserID
		}
		if c.Type == "" {
			c.Type = cur.Type
		}
	}
	if c.Type == "" {
		c.Type = w.NewType
	}
	if c.Type == "" {
		c.Type = ConsumerInstance
	}
	c.Allocations = make(map[string]Resources, len(w.Allocations))
	for p, r := range w.Allocations {
		c.Allocations[p] = r.Clone()
	}
	return ConsumerChange{UUID: w.ConsumerUUID, New: &c}
}

// CheckInventoryUpdate decides replacing a provider's inventories: the
// writer's generation must match, every inventory must be valid, and a
// class still in use may not be removed. Lowering capacity below usage is
// allowed, as in Placement (the provider is then over capacity and accepts
// no new allocations of that class).
func CheckInventoryUpdate(p Provider, usage Resources, expectedGen int64, invs Inventories) error {
	if p.Generation != expectedGen {
		exp, act := expectedGen, p.Generation
		return &ConflictError{Kind: ProviderGeneration, UUID: p.UUID, Expected: &exp, Actual: &act}
	}
	if err := invs.Validate(); err != nil {
		return err
	}
	for rc, n := range usage {
		if _, ok := invs[rc]; !ok && n > 0 {
			return &InUseError{Provider: p.UUID, Class: rc, Used: n}
		}
	}
	return nil
}

// InUseError is an inventory removal refused because allocations use it.
type InUseError struct {
	Provider string
	Class    ResourceClass
	Used     int64
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("provider %s: cannot remove inventory of %s: %d in use", e.Provider, e.Class, e.Used)
}
