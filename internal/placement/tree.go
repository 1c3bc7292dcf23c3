package placement

import "strings"

// CheckParent decides setting the parent of provider p to parent ("" for
// none): the parent must exist and must not be p or one of p's
// descendants, and an existing parent may be changed or removed only with
// reparent (placement 1.37). parentOf returns a provider's parent and
// whether the provider exists; stores call it inside their transaction.
func CheckParent(p Provider, parent string, reparent bool, parentOf func(uuid string) (string, bool, error)) error {
	if parent == p.ParentUUID {
		return nil
	}
	if p.ParentUUID != "" && !reparent {
		if parent == "" {
			return invalidf("provider %s: un-parenting a provider is not allowed before placement 1.37", p.UUID)
		}
		return invalidf("provider %s: re-parenting a provider is not allowed before placement 1.37", p.UUID)
	}
	if parent == "" {
		return nil
	}
	// Walk up from the new parent: meeting p means a loop.
	for cur, depth := parent, 0; cur != ""; depth++ {
		if cur == p.UUID {
			return invalidf("provider %s: making %s its parent would create a loop in the provider tree", p.UUID, parent)
		}
		next, ok, err := parentOf(cur)
		if err != nil {
			return err
		}
		if !ok {
			return invalidf("provider %s: parent provider %s does not exist", p.UUID, cur)
		}
		if depth > 1000 {
			return invalidf("provider %s: provider tree above %s is deeper than 1000", p.UUID, parent)
		}
		cur = next
	}
	return nil
}

// UnknownTraits returns the traits that are neither standard nor created
// (isCustom reports the created ones), as an InvalidError, or nil.
func UnknownTraits(traits []string, isCustom func(string) (bool, error)) error {
	var unknown []string
	for _, t := range traits {
		if IsStandardTrait(t) {
			continue
		}
		ok, err := isCustom(t)
		if err != nil {
			return err
		}
		if !ok {
			unknown = append(unknown, t)
		}
	}
	if len(unknown) > 0 {
		return invalidf("No such trait(s): %s", strings.Join(unknown, ", "))
	}
	return nil
}

// CheckGeneration returns a provider-generation ConflictError unless gen is
// p's generation.
func CheckGeneration(p Provider, gen int64) error {
	if p.Generation == gen {
		return nil
	}
	exp, act := gen, p.Generation
	return &ConflictError{Kind: ProviderGeneration, UUID: p.UUID, Expected: &exp, Actual: &act}
}
