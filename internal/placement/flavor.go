package placement

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// specKey is a flavor extra spec (or image property) that names a request
// group: resources or trait, an optional group suffix, and the class or
// trait after the colon (Nova's pattern: suffixes of 1–64 letters, digits,
// '_' or '-').
var specKey = regexp.MustCompile(`^(resources|trait)([a-zA-Z0-9_-]{1,64})?:(.+)$`)

// FlavorQuery builds the allocation candidates request Nova's scheduler
// builds for a flavor: resources:CLASS=N in the unnamed group and
// resourcesN:CLASS=N in granular group N (N = 0 asks for none); the CPU
// policy specs (hw:cpu_policy=dedicated: PCPU instead of VCPU; mixed:
// PCPU for hw:cpu_dedicated_mask's CPUs, VCPU for the rest;
// hw:emulator_threads_policy=isolate: one PCPU more;
// hw:cpu_thread_policy=isolate|require: HW_CPU_HYPERTHREADING forbidden
// or required) in the unnamed group; then each class of base (the
// flavor's VCPU, MEMORY_MB, DISK_GB) that no group names yet — VCPU
// only when no group names PCPU either — in the unnamed group.
// trait:NAME=required|forbidden and traitN:NAME=… constrain the unnamed
// group and group N; group_policy=none|isolate sets the policy. specs
// are read in order, a later map's keys giving way to an earlier one's
// (the flavor's extra specs first, then the image's properties, of which
// only trait: counts). As in Nova, a key with an unknown class, a
// negative or non-integer amount, or a trait value other than required
// or forbidden is ignored; groups left with no resources and no traits
// are dropped. It fails when more than one granular group has resources
// and group_policy is missing or not none or isolate (Placement refuses
// such a request), and on CPU policy specs Nova's API refuses (see
// HardwareSpecs; the other hw: specs are not read here).
func FlavorQuery(base Resources, specs ...map[string]string) (CandidateQuery, error) {
	if !asksGroups(specs) && !hasZero(base) {
		// The common case: the flavor alone, without a copy.
		q := CandidateQuery{NestedAware: true}
		if len(base) > 0 {
			q.Groups = []RequestGroup{{Resources: base}}
		}
		return q, nil
	}
	type group struct {
		res    Resources
		traits map[string]string
	}
	groups := map[string]*group{"": {res: Resources{}, traits: map[string]string{}}}
	get := func(sfx string) *group {
		g := groups[sfx]
		if g == nil {
			g = &group{res: Resources{}, traits: map[string]string{}}
			groups[sfx] = g
		}
		return g
	}
	policy := ""
	seen := map[string]bool{}
	named := map[ResourceClass]bool{} // classes some group asks for (even 0)
	for si, m := range specs {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v := m[k]
			if k == "group_policy" && si == 0 {
				policy = v
				continue
			}
			sm := specKey.FindStringSubmatch(k)
			if sm == nil || seen[k] {
				continue
			}
			kind, sfx, name := sm[1], sm[2], sm[3]
			if kind == "resources" {
				if si > 0 {
					continue // an image property does not ask for resources
				}
				rc := ResourceClass(name)
				n, err := strconv.ParseInt(v, 10, 64)
				if rc.Validate() != nil || (!rc.IsCustom() && !rc.IsStandard()) || err != nil || n < 0 {
					continue
				}
				seen[k] = true
				get(sfx).res[rc] = n
				named[rc] = true
				continue
			}
			if v != "required" && v != "forbidden" {
				continue
			}
			seen[k] = true
			get(sfx).traits[name] = v
		}
	}
	var flavorSpecs map[string]string
	if len(specs) > 0 {
		flavorSpecs = specs[0]
	}
	cpu, err := readCPUSpecs(base[VCPU], flavorSpecs)
	if err != nil {
		return CandidateQuery{}, err
	}
	unnamed := groups[""]
	if cpu.pcpus > 0 {
		unnamed.res[PCPU] = AddAmounts(unnamed.res[PCPU], cpu.pcpus)
		named[PCPU] = true
	}
	if cpu.vcpus > 0 {
		unnamed.res[VCPU] = AddAmounts(unnamed.res[VCPU], cpu.vcpus)
		named[VCPU] = true
	}
	if cpu.trait != "" {
		unnamed.traits[Hyperthreading] = cpu.trait
	}
	for rc, n := range base {
		if !named[rc] && (rc != VCPU || !named[PCPU]) {
			unnamed.res[rc] = n
		}
	}
	var q CandidateQuery
	granular := 0
	for _, sfx := range slices.Sorted(maps.Keys(groups)) {
		g := groups[sfx]
		maps.DeleteFunc(g.res, func(_ ResourceClass, n int64) bool { return n == 0 })
		if len(g.res) == 0 && len(g.traits) == 0 {
			continue
		}
		rg := RequestGroup{Suffix: sfx, Resources: g.res}
		for _, t := range slices.Sorted(maps.Keys(g.traits)) {
			if g.traits[t] == "required" {
				rg.Traits.Required = append(rg.Traits.Required, []string{t})
			} else {
				rg.Traits.Forbidden = append(rg.Traits.Forbidden, t)
			}
		}
		if len(g.res) == 0 && sfx != "" {
			// A granular group of traits alone is resourceless, which
			// only same_subtree gives a meaning to: Nova drops it.
			continue
		}
		if sfx != "" {
			granular++
		}
		q.Groups = append(q.Groups, rg)
	}
	switch policy {
	case "isolate":
		q.Isolate = true
	case "none":
	case "":
		if granular > 1 {
			return q, invalidf("the flavor has %d granular resource groups but no group_policy extra spec (none or isolate)", granular)
		}
	default:
		if granular > 1 {
			return q, invalidf("the flavor's group_policy %q is neither none nor isolate", policy)
		}
	}
	q.NestedAware = true
	return q, nil
}

// asksGroups reports whether some key of specs names a request group or
// the group policy.
func asksGroups(specs []map[string]string) bool {
	for _, m := range specs {
		for k := range m {
			if strings.HasPrefix(k, "resources") || strings.HasPrefix(k, "trait") || k == "group_policy" ||
				k == specCPUPolicy || k == specCPUThreadPolicy || k == specDedicatedMask || k == specEmulatorThreads {
				return true
			}
		}
	}
	return false
}

func hasZero(r Resources) bool {
	for _, n := range r {
		if n == 0 {
			return true
		}
	}
	return false
}

// Total returns the sum of every group's resources: what a claim of q's
// candidates holds in all.
func (q CandidateQuery) Total() Resources {
	out := Resources{}
	for _, g := range q.Groups {
		for rc, n := range g.Resources {
			out[rc] += n
		}
	}
	return out
}

// Unnamed returns q's unnamed group and whether q has nothing else (no
// granular group): a request any single provider with the resources and
// traits can satisfy on its own.
func (q CandidateQuery) Unnamed() (RequestGroup, bool) {
	var u RequestGroup
	only := true
	for _, g := range q.Groups {
		if g.Suffix == "" {
			u = g
		} else {
			only = false
		}
	}
	return u, only
}

// String describes q in the allocation candidates query's syntax
// (resources=…&resources1=…&required1=…), for messages.
func (q CandidateQuery) String() string {
	s := ""
	add := func(k, v string) {
		if s != "" {
			s += "&"
		}
		s += k + "=" + v
	}
	for _, g := range q.Groups {
		if len(g.Resources) > 0 {
			r := ""
			for _, rc := range sortedClasses(g.Resources) {
				if r != "" {
					r += ","
				}
				r += fmt.Sprintf("%s:%d", rc, g.Resources[rc])
			}
			add("resources"+g.Suffix, r)
		}
		t := ""
		for _, grp := range g.Traits.Required {
			for _, name := range grp {
				if t != "" {
					t += ","
				}
				t += name
			}
		}
		for _, name := range g.Traits.Forbidden {
			if t != "" {
				t += ","
			}
			t += "!" + name
		}
		if t != "" {
			add("required"+g.Suffix, t)
		}
	}
	if q.Isolate {
		add("group_policy", "isolate")
	}
	return s
}
