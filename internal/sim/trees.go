package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// buildTrees creates the scenario's custom classes and traits, each
// host's child providers (rp-HOST-NAME, named HOST_NAME) and the sharing
// providers (rp-shared-NAME, with MISC_SHARES_VIA_AGGREGATE, in aggregate
// agg-NAME with the roots of the hosts of the groups they name).
func (w *world) buildTrees(ctx context.Context) error {
	classes, traits := w.sc.Custom()
	for _, rc := range classes {
		if err := w.store.CreateResourceClass(ctx, placement.ResourceClass(rc)); err != nil {
			return fmt.Errorf("creating resource class %s: %w", rc, err)
		}
	}
	for _, t := range traits {
		if _, err := w.store.CreateTrait(ctx, t); err != nil {
			return fmt.Errorf("creating trait %s: %w", t, err)
		}
	}
	inventories := func(res map[string]int64) placement.Inventories {
		out := placement.Inventories{}
		for k, n := range res {
			out[placement.ResourceClass(k)] = placement.NewInventory(n)
		}
		return out
	}
	aggs := map[string][]string{} // host → aggregates
	for _, sh := range w.sc.Shared {
		agg := "agg-" + sh.Name
		tr := append(slices.Clone(sh.Traits), placement.SharesViaAggregate)
		if _, err := w.store.CreateProvider(ctx, placement.Provider{UUID: "rp-shared-" + sh.Name, Name: sh.Name,
			Inventories: inventories(sh.Resources), Traits: placement.NormalizeNames(tr)}); err != nil {
			return fmt.Errorf("creating shared provider %s: %w", sh.Name, err)
		}
		if _, err := w.store.SetProviderAggregates(ctx, "rp-shared-"+sh.Name, nil, []string{agg}); err != nil {
			return fmt.Errorf("aggregate of shared provider %s: %w", sh.Name, err)
		}
		for _, h := range w.hosts {
			if slices.Contains(sh.Groups, w.sc.HostGroups[h.Group].Prefix) {
				aggs[h.Name] = append(aggs[h.Name], agg)
			}
		}
	}
	for _, h := range w.hosts {
		for _, ch := range h.Children {
			if _, err := w.store.CreateProvider(ctx, placement.Provider{UUID: "rp-" + h.Name + "-" + ch.Name, Name: h.Name + "_" + ch.Name,
				ParentUUID: "rp-" + h.Name, Inventories: inventories(ch.Resources), Traits: placement.NormalizeNames(slices.Clone(ch.Traits))}); err != nil {
				return fmt.Errorf("creating child %s of %s: %w", ch.Name, h.Name, err)
			}
		}
	}
	for _, h := range slices.Sorted(maps.Keys(aggs)) {
		if _, err := w.store.SetProviderAggregates(ctx, "rp-"+h, nil, aggs[h]); err != nil {
			return fmt.Errorf("aggregates of %s: %w", h, err)
		}
	}
	return nil
}

// treeOf lists the providers of the chosen host's tree (its own and its
// children's), whose sums the scheduler's weighers read.
func (w *world) treeOf(sel scheduler.Selection) []string {
	out := []string{sel.ProviderUUID}
	if len(w.sc.Shared) == 0 && !w.trees() {
		return out
	}
	for _, h := range w.hosts {
		if h.Name == sel.Host {
			for _, ch := range h.Children {
				out = append(out, "rp-"+h.Name+"-"+ch.Name)
			}
		}
	}
	return out
}

// trees reports whether some host group has child providers.
func (w *world) trees() bool {
	for _, g := range w.sc.HostGroups {
		if len(g.Children) > 0 {
			return true
		}
	}
	return false
}

// claimedOn is what a decision's claim holds on the chosen host's tree:
// the flavor on the host's provider, or, with trees or sharing providers,
// the instance's allocation there as the store has it.
func (w *world) claimedOn(inst records.Instance, sel scheduler.Selection) placement.Resources {
	if len(w.sc.Shared) == 0 && !w.trees() {
		return inst.Flavor.Resources()
	}
	c, err := w.store.GetConsumer(context.Background(), inst.UUID)
	if err != nil {
		return nil
	}
	out := placement.Resources{}
	for _, p := range w.treeOf(sel) {
		out.Add(c.Allocations[p])
	}
	return out
}
