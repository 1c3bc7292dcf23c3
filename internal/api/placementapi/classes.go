package placementapi

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"keel/internal/placement"
	"keel/internal/store"
)

func classView(rc placement.ResourceClass) map[string]any {
	return map[string]any{"name": rc, "links": []any{map[string]any{"rel": "self", "href": "/placement/resource_classes/" + string(rc)}}}
}

// listClasses is GET /resource_classes (1.2): standard and custom.
func (a *API) listClasses(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 2); err != nil {
		return err
	}
	custom, err := a.st.CustomResourceClasses(r.Context())
	if err != nil {
		return err
	}
	out := []any{}
	for _, rc := range slices.Concat(placement.StandardClasses(), custom) {
		out = append(out, classView(rc))
	}
	writeJSON(w, http.StatusOK, map[string]any{"resource_classes": out})
	return nil
}

// classExists reports whether rc is standard or created.
func (a *API) classExists(r *http.Request, rc placement.ResourceClass) (bool, error) {
	if rc.IsStandard() {
		return true, nil
	}
	custom, err := a.st.CustomResourceClasses(r.Context())
	if err != nil {
		return false, err
	}
	_, ok := slices.BinarySearch(custom, rc)
	return ok, nil
}

// getClass is GET /resource_classes/{name}.
func (a *API) getClass(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 2); err != nil {
		return err
	}
	rc := placement.ResourceClass(r.PathValue("name"))
	ok, err := a.classExists(r, rc)
	if err != nil {
		return err
	}
	if !ok {
		return errorf(http.StatusNotFound, "No such resource class %s.", rc)
	}
	writeJSON(w, http.StatusOK, classView(rc))
	return nil
}

func checkCustomClass(rc placement.ResourceClass) error {
	if !rc.IsCustom() || rc.Validate() != nil {
		return errorf(http.StatusBadRequest, "JSON does not validate: the name %q must start with CUSTOM_ and use only A-Z, 0-9 and _ (at most 255 characters)", rc)
	}
	return nil
}

// postClass is POST /resource_classes (1.2): 201, or 409 if it exists.
func (a *API) postClass(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 2); err != nil {
		return err
	}
	var body struct {
		Name string `json:"name"`
	}
	if err := decodeAs(r, schemaResourceClass, &body); err != nil {
		return err
	}
	rc := placement.ResourceClass(body.Name)
	if err := checkCustomClass(rc); err != nil {
		return err
	}
	if err := a.st.CreateResourceClass(r.Context(), rc); err != nil {
		if errors.Is(err, store.ErrExists) {
			return errorf(http.StatusConflict, "Conflicting resource class already exists: %s", rc)
		}
		return err
	}
	w.Header().Set("Location", location(r, "/resource_classes/"+body.Name))
	w.WriteHeader(http.StatusCreated)
	return nil
}

// putClass is PUT /resource_classes/{name}: from 1.7 it creates the class
// (201) or confirms it (204); from 1.2 to 1.6 it renamed a custom class,
// which keel allows only while no inventory uses it.
func (a *API) putClass(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 2); err != nil {
		return err
	}
	rc := placement.ResourceClass(r.PathValue("name"))
	if minor >= 7 && !strings.HasPrefix(string(rc), "CUSTOM_") {
		// Placement checks the path's name against its schema.
		return errorf(http.StatusBadRequest, "JSON does not validate: '%s' does not match '^CUSTOM_[A-Z0-9_]+$'", rc)
	}
	if rc.IsStandard() {
		return errorf(http.StatusBadRequest, "Cannot update standard resource class %s", rc)
	}
	if err := checkCustomClass(rc); err != nil {
		return err
	}
	if minor < 7 {
		return a.renameClass(w, r, rc)
	}
	w.Header().Set("Location", location(r, "/resource_classes/"+string(rc)))
	err := a.st.CreateResourceClass(r.Context(), rc)
	switch {
	case errors.Is(err, store.ErrExists):
		w.WriteHeader(http.StatusNoContent)
	case err != nil:
		return err
	default:
		w.WriteHeader(http.StatusCreated)
	}
	return nil
}

func (a *API) renameClass(w http.ResponseWriter, r *http.Request, rc placement.ResourceClass) error {
	var body struct {
		Name string `json:"name"`
	}
	if err := decodeAs(r, schemaResourceClass, &body); err != nil {
		return err
	}
	to := placement.ResourceClass(body.Name)
	if err := checkCustomClass(to); err != nil {
		return err
	}
	if ok, err := a.classExists(r, rc); err != nil || !ok {
		if err == nil {
			err = errorf(http.StatusNotFound, "No such resource class %s.", rc)
		}
		return err
	}
	if to != rc {
		if ok, err := a.classExists(r, to); err != nil || ok {
			if err == nil {
				err = errorf(http.StatusConflict, "Resource class already exists: %s", to)
			}
			return err
		}
		if err := a.st.DeleteResourceClass(r.Context(), rc); err != nil {
			if errors.Is(err, store.ErrInUse) {
				return errorf(http.StatusConflict, "keel renames a resource class only while no inventory uses it: %v", err)
			}
			return err
		}
		if err := a.st.CreateResourceClass(r.Context(), to); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, classView(to))
	return nil
}

// deleteClass is DELETE /resource_classes/{name}: custom classes no
// inventory uses.
func (a *API) deleteClass(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 2); err != nil {
		return err
	}
	rc := placement.ResourceClass(r.PathValue("name"))
	if rc.IsStandard() {
		return errorf(http.StatusBadRequest, "Error in delete resource class: Cannot delete standard resource class %s.", rc)
	}
	err := a.st.DeleteResourceClass(r.Context(), rc)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, "No such resource class %s.", rc)
	case errors.Is(err, store.ErrInUse):
		return errorf(http.StatusConflict, "Error in delete resource class: Cannot delete resource class %s. Class is in use in inventory.", rc)
	case err != nil:
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
