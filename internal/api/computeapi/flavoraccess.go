package computeapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"keel/internal/records"
)

// Flavor access and descriptions, as Nova serves them: a flavor created
// with os-flavor-access:is_public false is private — admins see it, and a
// member only when its project is on the flavor's access list (elsewhere
// the flavor does not exist for it: 404 on show, 400 on boot); its
// access list is kept on the flavor's record. From microversion 2.55 a
// flavor has a description, set on create and by PUT /flavors/{id}.

func (a *flavorsAPI) flavorAccessRoutes(route func(string, bool, func(http.ResponseWriter, *http.Request) error)) {
	route("PUT /compute/v2.1/flavors/{id}", true, a.updateFlavor)
	route("GET /compute/v2.1/flavors/{id}/os-flavor-access", true, a.listFlavorAccess)
	route("POST /compute/v2.1/flavors/{id}/action", true, a.flavorAction)
}

// flavorVisible reports whether the caller may see f: public flavors to
// all, private ones to admins and to the projects on their access list.
func flavorVisible(r *http.Request, f records.Flavor) bool {
	c := caller(r)
	return !f.Private || c.Admin || slices.Contains(f.Projects, c.ProjectID)
}

// flavorFilter is which flavors a list shows (Nova's is_public filter).
type flavorFilter int

const (
	// listUsable: public flavors and the private ones the caller's
	// project is on the access list of (members always; admins by
	// default, is_public true).
	listUsable flavorFilter = iota
	listPrivate
	listAll
)

// listedFlavor reports whether a list under filter shows f.
func listedFlavor(r *http.Request, f records.Flavor, filter flavorFilter) bool {
	switch filter {
	case listAll:
		return true
	case listPrivate:
		return f.Private
	}
	return !f.Private || slices.Contains(f.Projects, caller(r).ProjectID)
}

// parseFlavorFilter reads the is_public query parameter, which only
// admins may set (a member's filter is fixed): "none" lists all.
func parseFlavorFilter(r *http.Request) (flavorFilter, error) {
	s := r.URL.Query().Get("is_public")
	if s == "" || !caller(r).Admin {
		return listUsable, nil
	}
	if strings.EqualFold(s, "none") {
		return listAll, nil
	}
	b, ok := strictBool(s)
	if !ok {
		return 0, badRequest("Invalid is_public filter [" + s + "]")
	}
	if b {
		return listUsable, nil
	}
	return listPrivate, nil
}

// strictBool reads the spellings of a boolean Nova's strutils accepts.
func strictBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, true
	case "0", "f", "false", "off", "n", "no":
		return false, true
	}
	return false, false
}

// applyCreateOptions sets a new flavor's description (2.55+) and
// os-flavor-access:is_public from the create body.
func applyCreateOptions(r *http.Request, f *records.Flavor, description, isPublic jsonRaw) error {
	if description != nil {
		if !version(r).AtLeast(55) {
			return badRequest("Invalid input for field/attribute flavor. Additional properties are not allowed ('description' was unexpected)")
		}
		d, err := decodeDescription(description)
		if err != nil {
			return err
		}
		f.Description = d
	}
	if isPublic != nil && string(isPublic) != "null" {
		var v any
		_ = json.Unmarshal(isPublic, &v)
		switch x := v.(type) {
		case bool:
			f.Private = !x
		case string:
			b, ok := strictBool(x)
			if !ok {
				return badRequest("Invalid input for field/attribute os-flavor-access:is_public. Value: " + x + ". '" + x + "' is not of type 'boolean'")
			}
			f.Private = !b
		default:
			return badRequest("Invalid input for field/attribute os-flavor-access:is_public. Value: " + string(isPublic) + ". " + string(isPublic) + " is not of type 'boolean'")
		}
	}
	return nil
}

// decodeDescription reads a flavor description: a string of at most
// 65535 characters, or null (no description).
func decodeDescription(raw jsonRaw) (string, error) {
	var d *string
	if err := json.Unmarshal(raw, &d); err != nil {
		return "", badRequest("Invalid input for field/attribute description. Value: " + string(raw) + ". " + string(raw) + " is not of type 'string', 'null'")
	}
	if d == nil {
		return "", nil
	}
	if utf8.RuneCountInString(*d) > 65535 {
		return "", badRequest("Invalid input for field/attribute description. The description is too long (at most 65535 characters)")
	}
	return *d, nil
}

// updateFlavor is PUT /flavors/{id} (2.55+): only the description
// changes; the answer is the flavor's view.
func (a *flavorsAPI) updateFlavor(w http.ResponseWriter, r *http.Request) error {
	if !version(r).AtLeast(55) {
		return notFound("The resource could not be found.")
	}
	var body struct {
		Flavor map[string]jsonRaw `json:"flavor"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Flavor == nil {
		return badRequest("Invalid input for field/attribute flavor. 'flavor' is a required property")
	}
	raw, ok := body.Flavor["description"]
	if !ok {
		return badRequest("Invalid input for field/attribute flavor. 'description' is a required property")
	}
	for k := range body.Flavor {
		if k != "description" {
			return badRequest("Invalid input for field/attribute flavor. Additional properties are not allowed ('" + k + "' was unexpected)")
		}
	}
	d, err := decodeDescription(raw)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	f, err := a.store.UpdateFlavor(r.Context(), id, func(f *records.Flavor) error {
		f.Description = d
		return nil
	})
	if isNotFound(err) {
		return notFoundf("Flavor %s could not be found.", id)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"flavor": a.flavorView(r, f, true)})
	return nil
}

func flavorAccessView(f records.Flavor) map[string]any {
	out := make([]any, 0, len(f.Projects))
	for _, p := range f.Projects {
		out = append(out, map[string]string{"flavor_id": f.ID, "tenant_id": p})
	}
	return map[string]any{"flavor_access": out}
}

// listFlavorAccess is GET /flavors/{id}/os-flavor-access.
func (a *flavorsAPI) listFlavorAccess(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	f, err := a.store.GetFlavor(r.Context(), id)
	if isNotFound(err) {
		return notFoundf("Flavor %s could not be found.", id)
	}
	if err != nil {
		return err
	}
	if !f.Private {
		return notFound("Access list not available for public flavors.")
	}
	writeJSON(w, http.StatusOK, flavorAccessView(f))
	return nil
}

// flavorAction is POST /flavors/{id}/action: addTenantAccess and
// removeTenantAccess, answered with the flavor's access list.
func (a *flavorsAPI) flavorAction(w http.ResponseWriter, r *http.Request) error {
	var body map[string]jsonRaw
	if err := decode(r, &body); err != nil {
		return err
	}
	var name string
	var raw jsonRaw
	for k, v := range body {
		if k == "addTenantAccess" || k == "removeTenantAccess" {
			name, raw = k, v
		}
	}
	if name == "" {
		return badRequest("There is no such action: " + strings.Join(mapKeys(body), ","))
	}
	var arg struct {
		Tenant *string `json:"tenant"`
	}
	if err := json.Unmarshal(raw, &arg); err != nil || arg.Tenant == nil {
		return badRequest("Invalid input for field/attribute " + name + ". 'tenant' is a required property")
	}
	p := *arg.Tenant
	if p == "" || len(p) > 255 {
		return badRequest("Invalid input for field/attribute tenant. Value: " + p + ". must be 1 to 255 characters")
	}
	id := r.PathValue("id")
	if _, err := a.store.GetFlavor(r.Context(), id); err != nil {
		if isNotFound(err) {
			return notFoundf("Flavor %s could not be found.", id)
		}
		return err
	}
	var refused error
	f, err := a.store.UpdateFlavor(r.Context(), id, func(f *records.Flavor) error {
		has := slices.Contains(f.Projects, p)
		switch {
		case name == "addTenantAccess" && !f.Private:
			refused = conflict("Can not add access to a public flavor.")
		case name == "addTenantAccess" && has:
			refused = conflict("Flavor access already exists for flavor " + id + " and project " + p + " combination.")
		case name == "addTenantAccess":
			f.Projects = append(f.Projects, p)
		case !has:
			refused = notFound("Flavor access not found for " + id + " / " + p + " combination.")
		default:
			f.Projects = slices.DeleteFunc(f.Projects, func(x string) bool { return x == p })
		}
		return refused
	})
	if refused != nil {
		return refused
	}
	if isNotFound(err) {
		return notFoundf("Flavor %s could not be found.", id)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, flavorAccessView(f))
	return nil
}

func mapKeys(m map[string]jsonRaw) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
