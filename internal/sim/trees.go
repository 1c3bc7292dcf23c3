package sim

import (
	"context"
	"slices"

	"keel/internal/inproc"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// treeSpec adds the scenario's trees to the cloud's spec: its custom
// classes and traits, each host's child providers (rp-HOST-NAME, named
// HOST_NAME) and the sharing providers (rp-shared-NAME, with
// MISC_SHARES_VIA_AGGREGATE, in aggregate agg-NAME with the roots of the
// hosts of the groups they name).
func (w *world) treeSpec(sp *inproc.Spec) {
	classes, traits := w.sc.Custom()
	for _, rc := range classes {
		sp.ResourceClasses = append(sp.ResourceClasses, placement.ResourceClass(rc))
	}
	sp.Traits = traits
	inventories := func(res map[string]int64) placement.Inventories {
		out := placement.Inventories{}
		for k, n := range res {
			out[placement.ResourceClass(k)] = placement.NewInventory(n)
		}
		return out
	}
	for _, sh := range w.sc.Shared {
		agg := "agg-" + sh.Name
		tr := append(slices.Clone(sh.Traits), placement.SharesViaAggregate)
		sp.Shared = append(sp.Shared, inproc.Shared{
			Provider:   placement.Provider{UUID: "rp-shared-" + sh.Name, Name: sh.Name, Inventories: inventories(sh.Resources), Traits: placement.NormalizeNames(tr)},
			Aggregates: []string{agg},
		})
		for i, h := range w.hosts {
			if slices.Contains(sh.Groups, w.sc.HostGroups[h.Group].Prefix) {
				sp.Hosts[i].Aggregates = append(sp.Hosts[i].Aggregates, agg)
			}
		}
	}
	for i, h := range w.hosts {
		for _, ch := range h.Children {
			sp.Hosts[i].Children = append(sp.Hosts[i].Children, placement.Provider{UUID: "rp-" + h.Name + "-" + ch.Name, Name: h.Name + "_" + ch.Name,
				Inventories: inventories(ch.Resources), Traits: placement.NormalizeNames(slices.Clone(ch.Traits))})
		}
	}
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
