package placement

import (
	"fmt"
	"maps"
	"slices"
)

// InventoryWrite replaces one provider's inventories, if the provider's
// generation is Generation (POST /reshaper's "inventories").
type InventoryWrite struct {
	UUID        string
	Generation  int64
	Inventories Inventories
}

// ReshapePlan is what a store persists for a reshape: the allocation plan
// (whose Providers holds the new generation of every provider touched,
// inventories' included) and each provider's final inventories.
type ReshapePlan struct {
	WritePlan
	Inventories map[string]Inventories
}

// PlanReshape decides a reshape (placement 1.30) against st, which must
// hold every provider named in invs and touched by writes: moving
// inventories and the allocations on them in one step, as a driver does
// when it moves VCPU from a compute node into NUMA children. Each
// inventory write's generation must be current (ConflictError) and its
// inventories valid; the allocations are decided by PlanWrites against
// the providers' old and new inventories together (so allocations can
// move off a class that goes and onto one that comes); then no class that
// goes may still be allocated (InUseError).
//
// Generations move as Placement moves them: an inventory write bumps its
// provider once for the interim inventories (when it names any), once
// more if allocations change there, and once for the final inventories.
func PlanReshape(st WriteState, invs []InventoryWrite, writes []AllocationWrite) (ReshapePlan, error) {
	final := map[string]Inventories{}
	interim := WriteState{Providers: maps.Clone(st.Providers), Consumers: st.Consumers}
	for _, iw := range invs {
		ps, ok := st.Providers[iw.UUID]
		if !ok {
			return ReshapePlan{}, fmt.Errorf("provider %s: %w", iw.UUID, ErrNotFound)
		}
		if _, dup := final[iw.UUID]; dup {
			return ReshapePlan{}, invalidf("provider %s given twice", iw.UUID)
		}
		if ps.Generation != iw.Generation {
			exp, act := iw.Generation, ps.Generation
			return ReshapePlan{}, &ConflictError{Kind: ProviderGeneration, UUID: iw.UUID, Expected: &exp, Actual: &act}
		}
		next := iw.Inventories.WithDefaults()
		if err := next.Validate(); err != nil {
			return ReshapePlan{}, err
		}
		final[iw.UUID] = next
		both := ps.Inventories.Clone()
		maps.Copy(both, next)
		ps.Inventories = both
		interim.Providers[iw.UUID] = ps
	}
	plan, err := PlanWrites(interim, writes)
	if err != nil {
		return ReshapePlan{}, err
	}
	// Usage once the writes are applied.
	usage := map[string]Resources{}
	for p, ps := range st.Providers {
		usage[p] = ps.Usage.Clone()
	}
	for _, ch := range plan.Consumers {
		for p, r := range st.Consumers[ch.UUID].Allocations {
			usage[p] = usage[p].Sub(r)
		}
		if ch.New != nil {
			for p, r := range ch.New.Allocations {
				usage[p] = usage[p].Add(r)
			}
		}
	}
	for _, iw := range invs {
		for _, rc := range slices.Sorted(maps.Keys(usage[iw.UUID])) {
			if _, stays := final[iw.UUID][rc]; !stays && usage[iw.UUID][rc] > 0 {
				return ReshapePlan{}, &InUseError{Provider: iw.UUID, Class: rc, Used: usage[iw.UUID][rc]}
			}
		}
	}
	for _, iw := range invs {
		gen := st.Providers[iw.UUID].Generation + 1
		if len(iw.Inventories) > 0 {
			gen++
		}
		if _, ok := plan.Providers[iw.UUID]; ok {
			gen++
		}
		plan.Providers[iw.UUID] = gen
	}
	return ReshapePlan{WritePlan: plan, Inventories: final}, nil
}
