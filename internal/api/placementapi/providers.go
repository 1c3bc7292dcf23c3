package placementapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"

	"keel/internal/placement"
	"keel/internal/store"
)

// providerView is a provider in Placement's shape for the microversion.
func (a *API) providerView(p placement.Provider, root string, minor int) map[string]any {
	// Links name the mount point, as Placement's (its SCRIPT_NAME).
	self := "/placement/resource_providers/" + p.UUID
	links := []any{map[string]any{"rel": "self", "href": self}}
	rels := []string{"inventories", "usages"}
	if minor >= 1 {
		rels = append(rels, "aggregates")
	}
	if minor >= 6 {
		rels = append(rels, "traits")
	}
	if minor >= 11 {
		rels = append(rels, "allocations")
	}
	for _, rel := range rels {
		links = append(links, map[string]any{"rel": rel, "href": self + "/" + rel})
	}
	v := map[string]any{"uuid": p.UUID, "name": p.Name, "generation": p.Generation, "links": links}
	if minor >= 14 {
		v["parent_provider_uuid"], v["root_provider_uuid"] = nullable(p.ParentUUID), root
	}
	return v
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// checkParams refuses query parameters the microversion does not take, as
// Placement's schemas do.
func checkParams(q url.Values, allowed ...string) error {
	for k := range q {
		if !slices.Contains(allowed, k) {
			return errorf(http.StatusBadRequest, "Invalid query string parameters: Additional properties are not allowed ('%s' was unexpected)", k)
		}
	}
	return nil
}

// providerFilter is what GET /resource_providers and
// GET /allocation_candidates select providers by.
type providerFilter struct {
	name, uuid   string
	inTree       string
	resources    placement.Resources
	traits       placement.TraitQuery
	rootTraits   placement.TraitQuery
	aggregates   placement.AggregateQuery
	hasResources bool
}

// match reports whether s passes f (in view v, for tree questions).
func (f *providerFilter) match(v *view, s *entry) bool {
	switch {
	case f.name != "" && s.Name != f.name,
		f.uuid != "" && s.UUID != f.uuid,
		f.inTree != "" && v.root(s.UUID) != v.root(f.inTree),
		!f.traits.Match(s.Traits),
		!f.aggregates.Match(s.Aggregates):
		return false
	}
	if !f.rootTraits.Empty() {
		r, ok := v.byUUID[v.root(s.UUID)]
		if !ok || !f.rootTraits.Match(r.Traits) {
			return false
		}
	}
	return !f.hasResources || placement.Fits(s.UUID, s.Inventories, s.Usage, f.resources) == nil
}

// parseFilter reads the filters common to provider lists and allocation
// candidates, each from the microversion that introduced it (per
// endpoint: since says when).
func (a *API) parseFilter(r *http.Request, minor int, since map[string]int) (*providerFilter, error) {
	q := r.URL.Query()
	allowed := []string{}
	for k, v := range since {
		if minor >= v {
			allowed = append(allowed, k)
		}
	}
	if err := checkParams(q, allowed...); err != nil {
		return nil, err
	}
	f := &providerFilter{name: q.Get("name"), uuid: q.Get("uuid")}
	// (Placement's schema checks both as its validator's uuid format.)
	if q.Has("uuid") && !isUUID(q.Get("uuid")) {
		return nil, errorf(http.StatusBadRequest, "Invalid query string parameters: %s is not a 'uuid'", pyStr(q.Get("uuid")))
	}
	if q.Has("in_tree") && minor >= 14 && !isUUID(q.Get("in_tree")) {
		return nil, errorf(http.StatusBadRequest, "Invalid query string parameters: %s is not a 'uuid'", pyStr(q.Get("in_tree")))
	}
	if q.Has("resources") {
		res, err := parseResources(q.Get("resources"))
		if err != nil {
			return nil, err
		}
		if err := a.knownClasses(r, res); err != nil {
			return nil, err
		}
		f.resources, f.hasResources = res, len(res) > 0
	}
	if q.Has("in_tree") {
		f.inTree = strings.TrimSpace(q.Get("in_tree"))
		if _, err := uuid.Parse(f.inTree); err != nil {
			return nil, errorf(http.StatusBadRequest, "Invalid query string parameters: Expected 'in_tree' parameter to be a format of uuid. Got: %s", q.Get("in_tree"))
		}
	}
	var err error
	if f.aggregates, err = parseMemberOf(q["member_of"], minor); err != nil {
		return nil, err
	}
	if f.traits, err = a.parseRequired(r, q["required"], "required", minor); err != nil {
		return nil, err
	}
	if f.rootTraits, err = a.parseRequired(r, q["root_required"], "root_required", minor); err != nil {
		return nil, err
	}
	return f, nil
}

// parseMemberOf reads member_of values: a UUID, "in:" a list (any of),
// "!" a UUID or "!in:" a list (forbidden, 1.32+); repeated from 1.24.
func parseMemberOf(vals []string, minor int) (placement.AggregateQuery, error) {
	var q placement.AggregateQuery
	if len(vals) > 1 && minor < 24 {
		return q, errorf(http.StatusBadRequest, "Multiple member_of parameters are not supported")
	}
	for _, v := range vals {
		if strings.Contains(v, ",") && !strings.HasPrefix(v, "in:") && !strings.HasPrefix(v, "!in:") {
			return q, errorf(http.StatusBadRequest, "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword using the valid microversion. Got: %s", v)
		}
		forbidden := strings.HasPrefix(v, "!")
		if forbidden && minor < 32 {
			return q, errorf(http.StatusBadRequest, "Forbidden member_of parameters are not supported in the specified microversion")
		}
		v = strings.TrimPrefix(strings.TrimPrefix(v, "!"), "in:")
		list := strings.Split(v, ",")
		for _, u := range list {
			if _, err := uuid.Parse(u); err != nil {
				return q, errorf(http.StatusBadRequest, "Invalid query string parameters: Expected 'member_of' parameter to contain valid UUID(s). Got: %s", u)
			}
		}
		if forbidden {
			q.Forbidden = append(q.Forbidden, list...)
		} else {
			q.AnyOf = append(q.AnyOf, list)
		}
	}
	return q, nil
}

// parseRequired reads required (or root_required) values: a list of
// traits, "!" marking forbidden ones (1.22+), or "in:" a list of which
// any will do (1.39+, when the parameter may also repeat; before, the
// last one counts). Every trait must exist.
func (a *API) parseRequired(r *http.Request, vals []string, param string, minor int) (placement.TraitQuery, error) {
	var q placement.TraitQuery
	if len(vals) > 1 && minor < 39 {
		vals = vals[len(vals)-1:]
	}
	var names []string
	for _, v := range vals {
		if strings.HasPrefix(v, "in:") {
			if minor < 39 {
				return q, errorf(http.StatusBadRequest, "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39. Got: %s", v)
			}
			var group []string
			for _, t := range strings.Split(v[3:], ",") {
				t = strings.TrimSpace(t)
				if t == "" || strings.HasPrefix(t, "!") {
					return q, errorf(http.StatusBadRequest, "Invalid query string parameters: Expected '%s' parameter value of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC without empty or forbidden traits. Got: %s", param, v)
				}
				group = append(group, t)
			}
			q.Required = append(q.Required, group)
			names = append(names, group...)
			continue
		}
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			forbidden := strings.HasPrefix(t, "!")
			t = strings.TrimLeft(t, "!")
			if t == "" {
				return q, errorf(http.StatusBadRequest, "Invalid query string parameters: Expected '%s' parameter value of the form: HW_CPU_X86_VMX,!CUSTOM_MAGIC. Got: %s", param, v)
			}
			if forbidden {
				if minor < 22 {
					return q, errorf(http.StatusBadRequest, "Invalid query string parameters: Expected '%s' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: %s", param, v)
				}
				q.Forbidden = append(q.Forbidden, t)
			} else {
				q.Required = append(q.Required, []string{t})
			}
			names = append(names, t)
		}
	}
	if len(names) > 0 {
		if err := a.knownTraits(r, names); err != nil {
			// Placement names the first trait it does not find.
			msg := err.Error()
			if head, list, ok := strings.Cut(msg, "No such trait(s): "); ok {
				first, _, _ := strings.Cut(list, ", ")
				msg = head + "No such trait(s): " + strings.TrimSuffix(first, ".") + "."
			}
			return q, &httpError{status: http.StatusBadRequest, code: codeUndefined, msg: fmt.Sprintf("Invalid trait(s) in %q parameter: %s", param, msg), unknownTrait: msg}
		}
	}
	return q, nil
}

// knownTraits returns an error naming the traits that do not exist.
func (a *API) knownTraits(r *http.Request, names []string) error {
	var custom []string
	return placement.UnknownTraits(names, func(n string) (bool, error) {
		if custom == nil {
			var err error
			if custom, err = a.st.CustomTraits(r.Context()); err != nil {
				return false, err
			}
		}
		_, ok := slices.BinarySearch(custom, n)
		return ok, nil
	})
}

// knownClasses refuses resource classes that are neither standard nor
// created.
func (a *API) knownClasses(r *http.Request, res placement.Resources) error {
	var custom []placement.ResourceClass
	for rc := range res {
		if rc.IsStandard() {
			continue
		}
		if custom == nil {
			var err error
			if custom, err = a.st.CustomResourceClasses(r.Context()); err != nil {
				return err
			}
		}
		if _, ok := slices.BinarySearch(custom, rc); !ok {
			return errorf(http.StatusBadRequest, "Invalid resource class in resources parameter: No such resource class %s.", rc)
		}
	}
	return nil
}

// listSince says from which microversion GET /resource_providers takes
// each filter.
var listSince = map[string]int{"name": 0, "uuid": 0, "member_of": 3, "resources": 4, "in_tree": 14, "required": 18}

func (a *API) listProviders(w http.ResponseWriter, r *http.Request, minor int) error {
	f, err := a.parseFilter(r, minor, listSince)
	if err != nil {
		return err
	}
	v, err := a.views.get(r.Context())
	if err != nil {
		return err
	}
	out := []any{}
	for _, s := range v.sorted {
		if f.match(v, s) {
			out = append(out, a.providerView(s.Provider, v.root(s.UUID), minor))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"resource_providers": out})
	return nil
}

func (a *API) showProvider(w http.ResponseWriter, r *http.Request, minor int) error {
	p, v, err := a.provider(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.providerView(p.Provider, v.root(p.UUID), minor))
	return nil
}

// provider looks up the provider the path names, in a view as new as the
// store's newest change.
func (a *API) provider(r *http.Request) (*entry, *view, error) {
	u := r.PathValue("uuid")
	v, err := a.views.get(r.Context())
	if err != nil {
		return nil, nil, err
	}
	p, ok := v.byUUID[u]
	if !ok {
		return nil, nil, errorf(http.StatusNotFound, "No resource provider with uuid %s found", u)
	}
	return p, v, nil
}

// exists reports whether provider u is in a view as new as the store's
// newest change (true when that cannot be read: the store decides).
func (a *API) exists(r *http.Request, u string) bool {
	v, err := a.views.get(r.Context())
	return err != nil || v.byUUID[u] != nil
}

// providerSaying is provider whose not-found refusal says what
// Placement's handler for the route says around its lookup's own words:
// format takes the path's UUID and those words (e.g. "No resource
// provider with uuid %s found : %s" for inventories).
func (a *API) providerSaying(r *http.Request, format string) (*entry, *view, error) {
	p, v, err := a.provider(r)
	if he, ok := err.(*httpError); ok && he.status == http.StatusNotFound {
		return nil, nil, errorf(http.StatusNotFound, format, r.PathValue("uuid"), he.msg)
	}
	return p, v, err
}

// providerBody is POST and PUT /resource_providers' body.
type providerBody struct {
	Name   string  `json:"name"`
	UUID   string  `json:"uuid"`
	Parent *string `json:"parent_provider_uuid"`
	parent bool    // parent_provider_uuid given (even null)
	keys   []string
}

func (b *providerBody) UnmarshalJSON(data []byte) error {
	type plain providerBody
	var raw map[string]jsonRaw
	if err := jsonUnmarshal(data, &raw); err != nil {
		return err
	}
	_, b.parent = raw["parent_provider_uuid"]
	for k := range raw {
		b.keys = append(b.keys, k)
	}
	return jsonUnmarshal(data, (*plain)(b))
}

func (b *providerBody) check(minor int, create bool) error {
	for _, k := range b.keys {
		if !(k == "name" || k == "uuid" && create || k == "parent_provider_uuid") {
			return errorf(http.StatusBadRequest, "JSON does not validate: Additional properties are not allowed ('%s' was unexpected)", k)
		}
	}
	if b.Name == "" || len(b.Name) > 200 {
		return errorf(http.StatusBadRequest, "'name' is a required property of at most 200 characters")
	}
	if b.parent && minor < 14 {
		return errorf(http.StatusBadRequest, "JSON does not validate: Additional properties are not allowed ('parent_provider_uuid' was unexpected)")
	}
	if b.Parent != nil {
		if _, err := uuid.Parse(*b.Parent); err != nil {
			return errorf(http.StatusBadRequest, "'parent_provider_uuid' %q is not a UUID", *b.Parent)
		}
	}
	if !create && b.UUID != "" {
		return errorf(http.StatusBadRequest, "JSON does not validate: Additional properties are not allowed ('uuid' was unexpected)")
	}
	return nil
}

func (a *API) createProvider(w http.ResponseWriter, r *http.Request, minor int) error {
	var body providerBody
	if err := decodeAs(r, createProviderSchemas[minor], &body); err != nil {
		return err
	}
	if err := body.check(minor, true); err != nil {
		return err
	}
	if body.UUID == "" {
		body.UUID = uuid.NewString()
	} else if _, err := uuid.Parse(body.UUID); err != nil {
		return errorf(http.StatusBadRequest, "'uuid' %q is not a UUID", body.UUID)
	}
	// A UUID in any form Placement takes (dashless among them) is kept
	// in the dashed form, so the two name one provider. (Not the parent:
	// Placement looks that up as written, and a dashless one does not
	// exist.)
	body.UUID = normUUID(body.UUID)
	if body.Parent != nil && *body.Parent != body.UUID && !a.exists(r, *body.Parent) {
		return errorf(http.StatusBadRequest, "Unable to create resource provider %q, %s: Object action create failed because: parent provider UUID does not exist.", body.Name, body.UUID)
	}
	np := placement.Provider{UUID: body.UUID, Name: body.Name, Inventories: placement.Inventories{}}
	if body.Parent != nil {
		np.ParentUUID = *body.Parent
	}
	p, err := a.st.CreateProvider(r.Context(), np)
	if err != nil {
		if errors.Is(err, store.ErrExists) {
			dup := "name: " + body.Name
			if v, verr := a.views.get(r.Context()); verr == nil && v.byUUID[body.UUID] != nil {
				dup = "uuid: " + body.UUID
			}
			return &httpError{status: http.StatusConflict, code: codeDuplicateName,
				msg: fmt.Sprintf("Conflicting resource provider %s already exists.", dup)}
		}
		if placement.IsInvalid(err) {
			return errorf(http.StatusBadRequest, "Unable to create resource provider %q, %s: %v", body.Name, body.UUID, err)
		}
		return err
	}
	w.Header().Set("Location", location(r, "/resource_providers/"+p.UUID))
	if minor >= 20 {
		root := p.UUID
		if p.ParentUUID != "" {
			if v, err := a.views.get(r.Context()); err == nil {
				root = v.root(p.UUID)
			}
		}
		writeJSON(w, http.StatusOK, a.providerView(p, root, minor))
		return nil
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

// updateProvider is PUT /resource_providers/{uuid}: a new name, and from
// 1.14 a parent (set once; changed or removed from 1.37).
func (a *API) updateProvider(w http.ResponseWriter, r *http.Request, minor int) error {
	cur, _, err := a.provider(r)
	if err != nil {
		return err
	}
	var body providerBody
	if err := decodeAs(r, updateProviderSchemas[minor], &body); err != nil {
		return err
	}
	if err := body.check(minor, false); err != nil {
		return err
	}
	parent := cur.ParentUUID
	if body.parent {
		parent = ""
		if body.Parent != nil {
			parent = *body.Parent
		}
	}
	if body.parent && body.Parent != nil && !a.exists(r, *body.Parent) {
		return errorf(http.StatusBadRequest, "Unable to save resource provider %s: Object action create failed because: parent provider UUID does not exist.", cur.UUID)
	}
	p, err := a.st.UpdateProvider(r.Context(), cur.UUID, body.Name, parent, minor >= 37)
	if err != nil {
		if errors.Is(err, store.ErrExists) {
			return &httpError{status: http.StatusConflict, code: codeDuplicateName,
				msg: fmt.Sprintf("Conflicting resource provider %s already exists.", body.Name)}
		}
		if placement.IsInvalid(err) {
			return errorf(http.StatusBadRequest, "Unable to save resource provider %s: %v", cur.UUID, err)
		}
		return err
	}
	v, err := a.views.get(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.providerView(p, v.root(p.UUID), minor))
	return nil
}

func (a *API) deleteProvider(w http.ResponseWriter, r *http.Request, _ int) error {
	p, v, err := a.providerSaying(r, "No resource provider with uuid %s found for delete%.0s")
	if err != nil {
		return err
	}
	// A parent is refused as one before its allocations are looked at,
	// as Placement refuses it.
	if slices.ContainsFunc(v.sorted, func(e *entry) bool { return e.ParentUUID == p.UUID }) {
		err = store.ErrHasChildren
	} else {
		err = a.st.DeleteProvider(r.Context(), p.UUID)
	}
	var inUse *placement.InUseError
	switch {
	case errors.As(err, &inUse):
		return &httpError{status: http.StatusConflict, code: codeProviderInUse,
			msg: "Unable to delete resource provider " + p.UUID + ": Resource provider has allocations."}
	case errors.Is(err, store.ErrHasChildren):
		return &httpError{status: http.StatusConflict, code: codeCannotDeleteParent,
			msg: "Unable to delete parent resource provider " + p.UUID + ": It has child resource providers."}
	case err != nil:
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
