package scenario

import (
	"maps"
	"regexp"
	"slices"

	"keel/internal/placement"
)

// providerName is what a child's or a sharing provider's name may hold.
var providerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// validateTrees checks the flavors' extra specs, the groups' child
// providers and the sharing providers.
func (s *Scenario) validateTrees(c *checker) {
	grouped := map[string]bool{} // flavors with request groups beyond the plain unnamed one
	for i, f := range s.Flavors {
		if len(f.ExtraSpecs) == 0 {
			continue
		}
		base := placement.Resources{placement.VCPU: f.VCPUs, placement.MemoryMB: f.RAMMB, placement.DiskGB: f.DiskGB}
		q, err := placement.FlavorQuery(base, f.ExtraSpecs)
		if err != nil {
			c.errf(elem("flavor", i)+".extra_specs", "%v", err)
			continue
		}
		u, only := q.Unnamed()
		grouped[f.Name] = !only || !u.Resources.Equal(base) || !u.Traits.Empty()
	}
	prefixes := map[string]bool{}
	for i, g := range s.HostGroups {
		p := elem("hosts", i)
		prefixes[g.Prefix] = true
		for _, fname := range slices.Sorted(maps.Keys(g.Instances)) {
			if g.Instances[fname] > 0 && grouped[fname] {
				c.errf(joinKey(p+".instances", fname), "flavor %q asks for request groups (resources…, trait…): initial instances are written on the host's own provider, so they take plain flavors; boot it with a workload", fname)
			}
		}
		seen := map[string]bool{}
		for j, ch := range g.Children {
			cp := elem(p+".child", j)
			switch {
			case !providerName.MatchString(ch.Name):
				c.errf(cp+".name", "must be 1 to 64 letters, digits, '_' or '-' (the provider is named HOST_NAME), got %q", ch.Name)
			case seen[ch.Name]:
				c.errf(cp+".name", "child %q is defined twice in this group", ch.Name)
			}
			seen[ch.Name] = true
			checkInventory(c, cp, ch.Resources, ch.Traits)
		}
	}
	seen := map[string]bool{}
	for i, sh := range s.Shared {
		p := elem("shared", i)
		switch {
		case !providerName.MatchString(sh.Name):
			c.errf(p+".name", "must be 1 to 64 letters, digits, '_' or '-', got %q", sh.Name)
		case seen[sh.Name]:
			c.errf(p+".name", "shared provider %q is defined twice", sh.Name)
		}
		seen[sh.Name] = true
		checkInventory(c, p, sh.Resources, sh.Traits)
		if len(sh.Groups) == 0 {
			c.errf(p+".groups", "missing: the prefixes of the [[hosts]] groups that share it")
		}
		for j, g := range sh.Groups {
			if !prefixes[g] {
				c.errf(elem(p+".groups", j), "no [[hosts]] group has prefix %q", g)
			}
		}
	}
}

// checkInventory checks a provider's resources (known classes, totals in
// 1..MaxSize, at least one) and traits (standard, or CUSTOM_ names).
func checkInventory(c *checker, p string, res map[string]int64, traits []string) {
	if len(res) == 0 {
		c.errf(p+".resources", "missing: at least one resource class with its total, e.g. { VGPU = 4 }")
	}
	for _, k := range slices.Sorted(maps.Keys(res)) {
		rc := placement.ResourceClass(k)
		kp := joinKey(p+".resources", k)
		if rc.Validate() != nil || (!rc.IsStandard() && !rc.IsCustom()) {
			c.errf(kp, "unknown resource class %q (a standard one, or CUSTOM_ and capitals, digits, '_')", k)
			continue
		}
		c.size(kp, res[k], 1, k)
	}
	for j, t := range traits {
		if !placement.IsStandardTrait(t) && placement.ValidateCustomTrait(t) != nil {
			c.errf(elem(p+".traits", j), "unknown trait %q (a standard one, or CUSTOM_ and capitals, digits, '_')", t)
		}
	}
}

// Custom returns the custom resource classes and traits the scenario's
// providers name, sorted: the simulator creates them first.
func (s *Scenario) Custom() (classes, traits []string) {
	cs, ts := map[string]bool{}, map[string]bool{}
	add := func(res map[string]int64, tr []string) {
		for k := range res {
			if placement.ResourceClass(k).IsCustom() {
				cs[k] = true
			}
		}
		for _, t := range tr {
			if !placement.IsStandardTrait(t) {
				ts[t] = true
			}
		}
	}
	for _, g := range s.HostGroups {
		add(nil, g.Traits)
		for _, ch := range g.Children {
			add(ch.Resources, ch.Traits)
		}
	}
	for _, sh := range s.Shared {
		add(sh.Resources, sh.Traits)
	}
	return slices.Sorted(maps.Keys(cs)), slices.Sorted(maps.Keys(ts))
}
