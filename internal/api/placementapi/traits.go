package placementapi

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"keel/internal/placement"
	"keel/internal/store"
)

// needs refuses a request below the microversion an endpoint appeared in
// (Placement answers 404 for a route that does not exist yet).
func needs(minor, since int) error {
	if minor < since {
		return errorf(http.StatusNotFound, "")
	}
	return nil
}

// listTraits is GET /traits (1.6) with name=in:A,B or name=startswith:P
// and associated=true|false.
func (a *API) listTraits(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 6); err != nil {
		return err
	}
	q := r.URL.Query()
	if err := checkParams(q, "name", "associated"); err != nil {
		return err
	}
	var keep func(string) bool
	if q.Has("name") {
		op, arg, ok := strings.Cut(q.Get("name"), ":")
		switch {
		case ok && op == "in":
			names := strings.Split(arg, ",")
			keep = func(n string) bool { return slices.Contains(names, n) }
		case ok && op == "startswith":
			keep = func(n string) bool { return strings.HasPrefix(n, arg) }
		default:
			return errorf(http.StatusBadRequest, "Badly formatted name parameter. Expected name query string parameter in form: ?name=[in|startswith]:[name1,name2|prefix]. Got: \"%s\"", q.Get("name"))
		}
	}
	var used map[string]bool
	if q.Has("associated") {
		want := strings.ToLower(q.Get("associated"))
		if want != "true" && want != "false" {
			return errorf(http.StatusBadRequest, "The query parameter \"associated\" only accepts \"true\" or \"false\"")
		}
		v, err := a.views.get(r.Context())
		if err != nil {
			return err
		}
		used = map[string]bool{}
		for _, s := range v.sorted {
			for _, t := range s.Traits {
				used[t] = true
			}
		}
		prev := keep
		keep = func(n string) bool { return used[n] == (want == "true") && (prev == nil || prev(n)) }
	}
	custom, err := a.st.CustomTraits(r.Context())
	if err != nil {
		return err
	}
	out := []string{}
	for _, n := range slices.Concat(placement.StandardTraits(), custom) {
		if keep == nil || keep(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	writeJSON(w, http.StatusOK, map[string]any{"traits": out})
	return nil
}

// putTrait is PUT /traits/{name}: creates a custom trait (201), or
// confirms it exists (204).
func (a *API) putTrait(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 6); err != nil {
		return err
	}
	name := r.PathValue("name")
	created := false
	if !placement.IsStandardTrait(name) {
		if err := placement.ValidateCustomTrait(name); err != nil {
			return err
		}
		var err error
		if created, err = a.st.CreateTrait(r.Context(), name); err != nil {
			return err
		}
	}
	w.Header().Set("Location", location(r, "/traits/"+name))
	noCache(w)
	if created {
		w.WriteHeader(http.StatusCreated)
	} else {
		w.WriteHeader(http.StatusNoContent)
	}
	return nil
}

// getTrait is GET /traits/{name}: 204 if it exists.
func (a *API) getTrait(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 6); err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := a.knownTraits(r, []string{name}); err != nil {
		if placement.IsInvalid(err) {
			return errorf(http.StatusNotFound, "No such trait(s): %s.", name)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteTrait is DELETE /traits/{name}: custom traits no provider has.
func (a *API) deleteTrait(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 6); err != nil {
		return err
	}
	name := r.PathValue("name")
	if placement.IsStandardTrait(name) {
		return errorf(http.StatusBadRequest, "Cannot delete standard trait %s.", name)
	}
	err := a.st.DeleteTrait(r.Context(), name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "No such trait(s): %s.", name)
	case errors.Is(err, store.ErrInUse):
		return errorf(http.StatusConflict, "The trait %s is in use by a resource provider.", name)
	case err != nil:
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func traitsView(p placement.Provider) map[string]any {
	traits := p.Traits
	if traits == nil {
		traits = []string{}
	}
	return map[string]any{"traits": traits, "resource_provider_generation": p.Generation}
}

// providerTraits is GET /resource_providers/{uuid}/traits.
func (a *API) providerTraits(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 6); err != nil {
		return err
	}
	p, _, err := a.providerSaying(r, "No resource provider with uuid %s found: %s")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, traitsView(p.Provider))
	return nil
}

// putProviderTraits is PUT /resource_providers/{uuid}/traits: replaces
// the provider's traits if the generation is current.
func (a *API) putProviderTraits(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 6); err != nil {
		return err
	}
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	var body struct {
		Traits     []string `json:"traits"`
		Generation *int64   `json:"resource_provider_generation"`
	}
	if err := decodeAs(r, schemaProviderTraits, &body); err != nil {
		return err
	}
	if body.Traits == nil || body.Generation == nil {
		return errorf(http.StatusBadRequest, "'traits' and 'resource_provider_generation' are required properties")
	}
	if *body.Generation != p.Generation {
		return &httpError{status: http.StatusConflict, code: codeConcurrentUpdate, msg: generationChanged}
	}
	np, err := a.st.SetProviderTraits(r.Context(), p.UUID, *body.Generation, body.Traits)
	if placement.IsInvalid(err) && strings.Contains(err.Error(), "No such trait(s): ") {
		_, names, _ := strings.Cut(err.Error(), "No such trait(s): ")
		return errorf(http.StatusBadRequest, "No such trait %s", names)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, traitsView(np))
	return nil
}

// generationChanged is Placement's text for a stale generation in PUT of
// a provider's traits or aggregates.
const generationChanged = "Resource provider's generation already changed. Please update the generation and try again."

// deleteProviderTraits is DELETE /resource_providers/{uuid}/traits.
func (a *API) deleteProviderTraits(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 6); err != nil {
		return err
	}
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	if _, err := a.st.SetProviderTraits(r.Context(), p.UUID, p.Generation, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// providerAggregates is GET /resource_providers/{uuid}/aggregates (1.1;
// with the generation from 1.19).
func (a *API) providerAggregates(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 1); err != nil {
		return err
	}
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, aggregatesView(p.Provider, minor))
	return nil
}

func aggregatesView(p placement.Provider, minor int) map[string]any {
	aggs := p.Aggregates
	if aggs == nil {
		aggs = []string{}
	}
	out := map[string]any{"aggregates": aggs}
	if minor >= 19 {
		out["resource_provider_generation"] = p.Generation
	}
	return out
}

// putProviderAggregates is PUT /resource_providers/{uuid}/aggregates: a
// bare list of UUIDs before 1.19; from 1.19 {aggregates,
// resource_provider_generation}, checked.
func (a *API) putProviderAggregates(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 1); err != nil {
		return err
	}
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	var aggs []string
	var gen *int64
	if minor >= 19 {
		var body struct {
			Aggregates []string `json:"aggregates"`
			Generation *int64   `json:"resource_provider_generation"`
		}
		if err := decode(r, &body); err != nil {
			return err
		}
		if body.Aggregates == nil || body.Generation == nil {
			return errorf(http.StatusBadRequest, "'aggregates' and 'resource_provider_generation' are required properties")
		}
		aggs, gen = body.Aggregates, body.Generation
	} else if err := decode(r, &aggs); err != nil {
		return err
	}
	if gen != nil && *gen != p.Generation {
		return &httpError{status: http.StatusConflict, code: codeConcurrentUpdate, msg: generationChanged}
	}
	for _, u := range aggs {
		if !isUUID(u) {
			return errorf(http.StatusBadRequest, "JSON does not validate: '%s' is not a 'uuid'", u)
		}
	}
	if len(placement.NormalizeNames(aggs)) != len(aggs) {
		return errorf(http.StatusBadRequest, "JSON does not validate: aggregates has non-unique elements")
	}
	np, err := a.st.SetProviderAggregates(r.Context(), p.UUID, gen, aggs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, aggregatesView(np, minor))
	return nil
}
