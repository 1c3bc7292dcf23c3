package scenario

import (
	"maps"
	"math"
	"slices"

	"keel/internal/placement"
)

// ServerGroupPolicies are the policies a [[server_group]] may have.
var ServerGroupPolicies = []string{"affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"}

// validatePlacement checks the one-by-one instances, the server groups
// they name and the aggregates: known hosts, flavors and groups, and every
// host's instances (its group's and its own) within its capacity.
func (s *Scenario) validatePlacement(c *checker, names map[string]bool) {
	groups := map[string]bool{}
	for i, g := range s.ServerGroups {
		p := elem("server_group", i)
		switch {
		case g.Name == "":
			c.errf(p+".name", "missing: every server group needs a name")
		case groups[g.Name]:
			c.errf(p+".name", "server group %q is defined twice", g.Name)
		}
		groups[g.Name] = true
		if !slices.Contains(ServerGroupPolicies, g.Policy) {
			c.errf(p+".policy", "unknown policy %q (known: affinity, anti-affinity, soft-affinity, soft-anti-affinity)", g.Policy)
		}
		if g.MaxServerPerHost < 0 || g.MaxServerPerHost > 0 && g.Policy != "anti-affinity" {
			c.errf(p+".max_server_per_host", "must be >= 1, and only with policy anti-affinity; got %d", g.MaxServerPerHost)
		}
	}
	aggs := map[string]bool{}
	for i, a := range s.Aggregates {
		p := elem("aggregate", i)
		switch {
		case a.Name == "":
			c.errf(p+".name", "missing: every aggregate needs a name")
		case aggs[a.Name]:
			c.errf(p+".name", "aggregate %q is defined twice", a.Name)
		}
		aggs[a.Name] = true
		checkHosts(c, p+".hosts", a.Hosts, names)
		for _, k := range slices.Sorted(maps.Keys(a.Metadata)) {
			if k == "" {
				c.errf(p+".metadata", "a metadata key must not be empty")
			}
		}
	}
	if len(s.Instances) == 0 || c.err != nil {
		return
	}
	hosts := map[string]HostSpec{}
	total := 0
	for _, h := range s.Hosts() {
		hosts[h.Name] = h
		for _, n := range h.Instances {
			total += n
		}
	}
	if total+len(s.Instances) > MaxInstances {
		c.errf("instance", "too many instances: the scenario may start with at most %d", MaxInstances)
		return
	}
	type need struct{ vcpus, ram, disk int64 }
	needs := map[string]*need{}
	for i, in := range s.Instances {
		p := elem("instance", i)
		h, ok := hosts[in.Host]
		f, fok := s.FlavorByName(in.Flavor)
		switch {
		case in.Host == "":
			c.errf(p+".host", "missing: the host the instance is on")
		case !ok:
			c.errf(p+".host", "no host is named %q", in.Host)
		case in.Flavor == "":
			c.errf(p+".flavor", "missing: the instance's flavor")
		case !fok:
			c.errf(p+".flavor", "unknown flavor %q%s", in.Flavor, s.flavorList())
		case in.Group != "" && !groups[in.Group]:
			c.errf(p+".group", "no [[server_group]] is named %q", in.Group)
		case requestGroups(f):
			c.errf(p+".flavor", "flavor %q asks for request groups (resources…, granular trait…): initial instances are written on the host's own provider, so they take flavors without them", f.Name)
		case f.VCPUs > h.VCPUs || f.RAMMB > h.MemoryMB || f.DiskGB > h.DiskGB:
			c.errf(p+".flavor", "flavor %q is larger than host %s's totals (one allocation may not exceed a host's total, Placement's max_unit)", f.Name, h.Name)
		}
		if c.err != nil {
			return
		}
		n := needs[in.Host]
		if n == nil {
			n = &need{}
			for fname, k := range h.Instances {
				g, _ := s.FlavorByName(fname)
				n.vcpus += int64(k) * g.VCPUs
				n.ram += int64(k) * g.RAMMB
				n.disk += int64(k) * g.DiskGB
			}
			needs[in.Host] = n
		}
		n.vcpus += f.VCPUs
		n.ram += f.RAMMB
		n.disk += f.DiskGB
		reservedGB := h.ReservedDiskMB / 1024
		if h.ReservedDiskMB%1024 > 0 {
			reservedGB++
		}
		ratio := func(r, def float64) float64 {
			if r == 0 {
				return def
			}
			return r
		}
		for _, r := range []struct {
			unit        string
			need, total int64
			reserved    int64
			ratio       float64
		}{
			{"VCPU", n.vcpus, h.VCPUs, 0, ratio(h.CPUAllocationRatio, DefaultCPUAllocationRatio)},
			{"MiB of RAM", n.ram, h.MemoryMB, h.ReservedMemoryMB, ratio(h.RAMAllocationRatio, DefaultRAMAllocationRatio)},
			{"GiB of disk", n.disk, h.DiskGB, reservedGB, ratio(h.DiskAllocationRatio, DefaultDiskAllocationRatio)},
		} {
			if capacity := int64(math.Floor(float64(r.total-r.reserved) * r.ratio)); r.need > capacity {
				c.errf(p+".host", "host %s's instances need %d %s with this one but it offers %d ((%d - %d reserved) x %v)",
					h.Name, r.need, r.unit, capacity, r.total, r.reserved, r.ratio)
				return
			}
		}
	}
}

// requestGroups reports whether a flavor's extra specs ask for more than
// its own sizes from one provider (granular groups, other amounts): such
// a flavor cannot be written on a host's own provider. Unnamed traits
// (trait:NAME) are fine: the host's provider has them or not.
func requestGroups(f Flavor) bool {
	base := placement.Resources{placement.VCPU: f.VCPUs, placement.MemoryMB: f.RAMMB, placement.DiskGB: f.DiskGB}
	q, err := placement.FlavorQuery(base, f.ExtraSpecs)
	if err != nil {
		return false // refused with its reason by validateTrees
	}
	u, only := q.Unnamed()
	return !only || !u.Resources.Equal(base)
}
