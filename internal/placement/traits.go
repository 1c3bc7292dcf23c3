package placement

import (
	"regexp"
	"slices"
)

// Traits are qualitative properties of a provider (COMPUTE_VOLUME_MULTI_ATTACH,
// HW_CPU_X86_AVX2, CUSTOM_FAST_NIC). The standard ones are the os-traits
// names and always exist; custom ones (CUSTOM_*) exist once created.

var standardTraits = func() map[string]bool {
	m := make(map[string]bool, len(standardTraitNames))
	for _, n := range standardTraitNames {
		m[n] = true
	}
	return m
}()

// customNameRE is the form of custom trait and resource class names.
var customNameRE = regexp.MustCompile(`^CUSTOM_[A-Z0-9_]+$`)

// IsStandardTrait reports whether name is one of the standard traits.
func IsStandardTrait(name string) bool { return standardTraits[name] }

// StandardTraits lists the standard traits, sorted. The caller must not
// modify the slice.
func StandardTraits() []string { return standardTraitNames }

// ValidateCustomTrait checks the form of a custom trait's name: CUSTOM_
// followed by A-Z, 0-9 and _, at most 255 characters.
func ValidateCustomTrait(name string) error {
	if len(name) > 255 || !customNameRE.MatchString(name) {
		return invalidf("The trait is invalid. A valid trait must be no longer than 255 characters, start with the prefix \"CUSTOM_\" and use following characters: \"A\"-\"Z\", \"0\"-\"9\" and \"_\"")
	}
	return nil
}

// NormalizeNames returns names sorted, without duplicates and never nil.
func NormalizeNames(names []string) []string {
	out := slices.Clone(names)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TraitQuery is a request's trait constraints: every group in Required
// needs at least one of its traits on the provider (a group of one is a
// plain required trait; a longer one is placement 1.39's "in:"), and none
// of Forbidden may be there.
type TraitQuery struct {
	Required  [][]string
	Forbidden []string
}

// Empty reports whether q constrains nothing.
func (q TraitQuery) Empty() bool { return len(q.Required) == 0 && len(q.Forbidden) == 0 }

// Match reports whether a provider with traits (sorted) passes q.
func (q TraitQuery) Match(traits []string) bool {
	return matchSets(traits, q.Required, q.Forbidden)
}

// AggregateQuery is a request's member_of constraints: the provider must
// be in at least one aggregate of every group of AnyOf and in none of
// Forbidden.
type AggregateQuery struct {
	AnyOf     [][]string
	Forbidden []string
}

// Empty reports whether q constrains nothing.
func (q AggregateQuery) Empty() bool { return len(q.AnyOf) == 0 && len(q.Forbidden) == 0 }

// Match reports whether a provider in aggregates (sorted) passes q.
func (q AggregateQuery) Match(aggregates []string) bool {
	return matchSets(aggregates, q.AnyOf, q.Forbidden)
}

func matchSets(have []string, anyOf [][]string, none []string) bool {
	has := func(n string) bool { _, ok := slices.BinarySearch(have, n); return ok }
	for _, n := range none {
		if has(n) {
			return false
		}
	}
	for _, group := range anyOf {
		if !slices.ContainsFunc(group, has) {
			return false
		}
	}
	return true
}
