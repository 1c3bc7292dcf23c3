package scenario

import (
	"fmt"
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
			} else if k := slices.Index(sh.Groups, g); k < j {
				c.errf(elem(p+".groups", j), "group %q is listed twice", g)
			}
		}
	}
	if c.err == nil {
		s.checkProviderCount(c)
	}
	if c.err == nil {
		s.checkProviderNames(c)
	}
}

// The simulator's providers: a host's is named as the host, with the id
// rp-HOST; its child NAME is named HOST_NAME, with the id rp-HOST-NAME; a
// sharing provider is named as written, with the id rp-shared-NAME
// (internal/sim's world and trees build them so).

// HostProviderID is the id of host's own provider.
func HostProviderID(host string) string { return "rp-" + host }

// ChildProviderName is the name of child's provider under host.
func ChildProviderName(host, child string) string { return host + "_" + child }

// ChildProviderID is the id of child's provider under host.
func ChildProviderID(host, child string) string { return "rp-" + host + "-" + child }

// SharedProviderID is the id of a sharing provider.
func SharedProviderID(name string) string { return "rp-shared-" + name }

// checkProviderNames refuses two providers with one name or one id — a
// child HOST_NAME that is also a host's name, a sharing provider named as
// a host, a child id rp-HOST-NAME that is also another host's rp-HOST —
// which Placement would refuse when the run builds them. Hosts come first
// (their names are unique already), then the children group by group, then
// the sharing providers; the later one is blamed.
func (s *Scenario) checkProviderNames(c *checker) {
	if len(s.Shared) == 0 && !slices.ContainsFunc(s.HostGroups, func(g HostGroup) bool { return len(g.Children) > 0 }) {
		return // hosts alone: unique names, unique ids
	}
	type owner struct{ who, where string }
	names, ids := map[string]owner{}, map[string]owner{}
	groupNames := make([][]string, len(s.HostGroups))
	for i, g := range s.HostGroups {
		groupNames[i] = g.HostNames()
		where := fmt.Sprintf("hosts[%d], line %d", i, c.ix.line(elem("hosts", i)))
		for _, h := range groupNames[i] {
			o := owner{"host " + h, where}
			names[h] = o
			ids[HostProviderID(h)] = o
		}
	}
	claim := func(path, who, name, id, where string) bool {
		if o, taken := names[name]; taken {
			c.errf(path, "provider name %q (%s) is taken by %s (%s); rename one of them", name, who, o.who, o.where)
			return false
		}
		if o, taken := ids[id]; taken {
			c.errf(path, "provider id %q (%s) is taken by %s (%s); rename one of them", id, who, o.who, o.where)
			return false
		}
		names[name] = owner{who, where}
		ids[id] = owner{who, where}
		return true
	}
	for i, g := range s.HostGroups {
		for j, ch := range g.Children {
			cp := elem(elem("hosts", i)+".child", j)
			where := fmt.Sprintf("%s, line %d", cp, c.ix.line(cp))
			for _, h := range groupNames[i] {
				if !claim(cp+".name", fmt.Sprintf("child %q of host %s", ch.Name, h), ChildProviderName(h, ch.Name), ChildProviderID(h, ch.Name), where) {
					return
				}
			}
		}
	}
	for i, sh := range s.Shared {
		p := elem("shared", i)
		if !claim(p+".name", fmt.Sprintf("shared provider %q", sh.Name), sh.Name, SharedProviderID(sh.Name), fmt.Sprintf("%s, line %d", p, c.ix.line(p))) {
			return
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
