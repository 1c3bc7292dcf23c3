package placementapi

import (
	"errors"
	"fmt"
	"net/http"

	"keel/internal/placement"
)

// inventoryBody is one inventory as PUT and POST take it; the generation
// is required for PUT, and resource_class for POST.
type inventoryBody struct {
	Generation      *int64   `json:"resource_provider_generation"`
	ResourceClass   string   `json:"resource_class"`
	Total           *int64   `json:"total"`
	Reserved        *int64   `json:"reserved"`
	MinUnit         *int64   `json:"min_unit"`
	MaxUnit         *int64   `json:"max_unit"`
	StepSize        *int64   `json:"step_size"`
	AllocationRatio *float64 `json:"allocation_ratio"`
}

// maxInt is the largest integer Placement's database holds (and the
// default max_unit).
const maxInt = 2147483647

// maxRatio is the largest allocation_ratio Placement takes (a 32-bit
// float's largest value).
const maxRatio = 3.40282e+38

// inventory turns the body into an inventory with Placement's defaults.
func (b inventoryBody) inventory(provider, rc string, minor int) (placement.Inventory, error) {
	if b.Total == nil {
		return placement.Inventory{}, errorf(http.StatusBadRequest, "inventory of %s: 'total' is a required property", rc)
	}
	// Placement's schema bounds every integer field by its database's
	// largest integer, which is also max_unit's default.
	for name, v := range map[string]*int64{"total": b.Total, "reserved": b.Reserved, "min_unit": b.MinUnit, "max_unit": b.MaxUnit, "step_size": b.StepSize} {
		if v != nil && *v > maxInt {
			return placement.Inventory{}, errorf(http.StatusBadRequest, "JSON does not validate: %d is greater than the maximum of %d ('%s' of %s)", *v, maxInt, name, rc)
		}
	}
	inv := placement.NewInventory(*b.Total)
	inv.MaxUnit = maxInt
	set := func(dst *int64, src *int64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&inv.Reserved, b.Reserved)
	set(&inv.MinUnit, b.MinUnit)
	set(&inv.MaxUnit, b.MaxUnit)
	set(&inv.StepSize, b.StepSize)
	if b.AllocationRatio != nil {
		// Placement's schema bounds the ratio by the largest float its
		// database holds.
		if *b.AllocationRatio > maxRatio {
			return placement.Inventory{}, errorf(http.StatusBadRequest, "JSON does not validate: %g is greater than the maximum of %g ('allocation_ratio' of %s)", *b.AllocationRatio, maxRatio, rc)
		}
		inv.AllocationRatio = *b.AllocationRatio
	}
	if minor < 26 && inv.Reserved >= inv.Total {
		return inv, errorf(http.StatusBadRequest, "Unable to update inventory for resource provider %s: Invalid inventory for '%s' on resource provider '%s'. The reserved value is greater than or equal to total.", provider, rc, provider)
	}
	if inv.Reserved > inv.Total || inv.AllocationRatio < 0 {
		// (A negative ratio makes the capacity negative, which Placement
		// reports as it reports reserved past total.)
		return inv, errorf(http.StatusBadRequest, "Unable to update inventory for resource provider %s: Invalid inventory for '%s' on resource provider '%s'. The reserved value is greater than total.", provider, rc, provider)
	}
	if err := inv.Validate(placement.ResourceClass(rc)); err != nil {
		return inv, errorf(http.StatusBadRequest, "Unable to update inventory for resource provider: %v", err)
	}
	return inv, nil
}

func inventoryView(inv placement.Inventory, gen int64) map[string]any {
	return map[string]any{
		"resource_provider_generation": gen, "total": inv.Total, "reserved": inv.Reserved,
		"min_unit": inv.MinUnit, "max_unit": inv.MaxUnit, "step_size": inv.StepSize, "allocation_ratio": inv.AllocationRatio,
	}
}

func inventoriesView(p placement.Provider) map[string]any {
	invs := map[string]any{}
	for rc, inv := range p.Inventories {
		invs[string(rc)] = inv
	}
	return map[string]any{"inventories": invs, "resource_provider_generation": p.Generation}
}

func (a *API) inventories(w http.ResponseWriter, r *http.Request, minor int) error {
	p, _, err := a.providerSaying(r, "No resource provider with uuid %s found : %s")
	if err != nil {
		return err
	}
	if len(p.Inventories) == 0 && minor >= 15 {
		// No inventory, no modification time: Placement sends only
		// Cache-Control.
		w.Header().Set("Cache-Control", "no-cache")
		writeJSONAsIs(w, http.StatusOK, inventoriesView(p.Provider))
		return nil
	}
	writeJSON(w, http.StatusOK, inventoriesView(p.Provider))
	return nil
}

// setInventories writes a provider's inventories, checking that every
// class exists first.
func (a *API) setInventories(r *http.Request, uuid string, gen int64, invs placement.Inventories) (placement.Provider, error) {
	res := placement.Resources{}
	for rc := range invs {
		res[rc] = 1
	}
	if err := a.knownClasses(r, res); err != nil {
		he := asHTTPError(err)
		he.msg = "Unknown resource class in inventory for resource provider " + uuid + ": " + he.msg
		return placement.Provider{}, he
	}
	return a.st.SetInventories(r.Context(), uuid, gen, invs)
}

// putInventories is PUT /resource_providers/{uuid}/inventories: replaces
// every inventory if resource_provider_generation is current.
func (a *API) putInventories(w http.ResponseWriter, r *http.Request, minor int) error {
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	var body struct {
		Generation  *int64                   `json:"resource_provider_generation"`
		Inventories map[string]inventoryBody `json:"inventories"`
	}
	if err := decodeAs(r, schemaPutInventories, &body); err != nil {
		return err
	}
	if body.Generation == nil || body.Inventories == nil {
		return errorf(http.StatusBadRequest, "'resource_provider_generation' and 'inventories' are required properties")
	}
	if *body.Generation != p.Generation {
		return &httpError{status: http.StatusConflict, code: codeConcurrentUpdate, msg: "resource provider generation conflict"}
	}
	invs := placement.Inventories{}
	for rc, b := range body.Inventories {
		inv, err := b.inventory(p.UUID, rc, minor)
		if err != nil {
			return err
		}
		invs[placement.ResourceClass(rc)] = inv
	}
	np, err := a.setInventories(r, p.UUID, *body.Generation, invs)
	var inUse *placement.InUseError
	if errors.As(err, &inUse) {
		return &httpError{status: http.StatusConflict, code: codeInventoryInUse, msg: "update conflict: " + inUseMessage(inUse)}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, inventoriesView(np))
	return nil
}

// deleteInventories is DELETE /resource_providers/{uuid}/inventories
// (1.5): removes every inventory, refused while any is in use.
func (a *API) deleteInventories(w http.ResponseWriter, r *http.Request, minor int) error {
	if minor < 5 {
		return methodNotAllowed(r.Method)
	}
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	if _, err := a.st.SetInventories(r.Context(), p.UUID, p.Generation, placement.Inventories{}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// inventory is GET /resource_providers/{uuid}/inventories/{rc}.
func (a *API) inventory(w http.ResponseWriter, r *http.Request, _ int) error {
	p, _, err := a.providerSaying(r, "No resource provider with uuid %s found : %s")
	if err != nil {
		return err
	}
	rc := r.PathValue("rc")
	inv, ok := p.Inventories[placement.ResourceClass(rc)]
	if !ok {
		return errorf(http.StatusNotFound, "No inventory of class %s for %s", rc, p.UUID)
	}
	writeJSON(w, http.StatusOK, inventoryView(inv, p.Generation))
	return nil
}

// putInventory is PUT /resource_providers/{uuid}/inventories/{rc}: creates
// or replaces one class's inventory if the generation is current.
func (a *API) putInventory(w http.ResponseWriter, r *http.Request, minor int) error {
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	rc := r.PathValue("rc")
	var body inventoryBody
	if err := decodeAs(r, inventoryRecord, &body); err != nil {
		return err
	}
	if body.Generation == nil {
		return errorf(http.StatusBadRequest, "'resource_provider_generation' is a required property")
	}
	inv, err := body.inventory(p.UUID, rc, minor)
	if err != nil {
		return err
	}
	if *body.Generation != p.Generation {
		return &httpError{status: http.StatusConflict, code: codeConcurrentUpdate, msg: "resource provider generation conflict"}
	}
	if _, ok := p.Inventories[placement.ResourceClass(rc)]; !ok {
		return errorf(http.StatusBadRequest, "No inventory record with resource class for resource provider %s: No inventory of class %s found.", p.UUID, rc)
	}
	return a.changeInventory(w, r, p, *body.Generation, rc, &inv, http.StatusOK)
}

// postInventory is POST /resource_providers/{uuid}/inventories: adds one
// class's inventory (409 if the class already has one).
func (a *API) postInventory(w http.ResponseWriter, r *http.Request, minor int) error {
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	var body inventoryBody
	if err := decodeAs(r, schemaPostInventory, &body); err != nil {
		return err
	}
	// Placement takes resource_provider_generation here and checks
	// nothing with it: the inventory is added to what the provider has.
	if body.ResourceClass == "" {
		return errorf(http.StatusBadRequest, "JSON does not validate: 'resource_class' is a required property")
	}
	if _, ok := p.Inventories[placement.ResourceClass(body.ResourceClass)]; ok {
		return &httpError{status: http.StatusConflict, code: codeConcurrentUpdate,
			msg: fmt.Sprintf("Update conflict: Inventory for '%s' on resource provider '%s' already exists.", body.ResourceClass, p.UUID)}
	}
	inv, err := body.inventory(p.UUID, body.ResourceClass, minor)
	if err != nil {
		return err
	}
	w.Header().Set("Location", location(r, "/resource_providers/"+p.UUID+"/inventories/"+body.ResourceClass))
	return a.changeInventory(w, r, p, p.Generation, body.ResourceClass, &inv, http.StatusCreated)
}

// deleteInventory is DELETE /resource_providers/{uuid}/inventories/{rc}.
func (a *API) deleteInventory(w http.ResponseWriter, r *http.Request, _ int) error {
	p, _, err := a.provider(r)
	if err != nil {
		return err
	}
	rc := r.PathValue("rc")
	if _, ok := p.Inventories[placement.ResourceClass(rc)]; !ok {
		return errorf(http.StatusNotFound, "No inventory of class %s found for delete: No inventory of class %s found for delete", rc, rc)
	}
	return a.changeInventory(w, r, p, p.Generation, rc, nil, http.StatusNoContent)
}

// changeInventory sets (inv) or removes (nil) one class's inventory on
// top of the provider's others, with the writer's generation: if anything
// changed the provider since, the store refuses with a conflict.
func (a *API) changeInventory(w http.ResponseWriter, r *http.Request, p *entry, gen int64, rc string, inv *placement.Inventory, status int) error {
	invs := p.Inventories.Clone()
	if inv == nil {
		delete(invs, placement.ResourceClass(rc))
	} else {
		invs[placement.ResourceClass(rc)] = *inv
	}
	np, err := a.setInventories(r, p.UUID, gen, invs)
	if err != nil {
		return err
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return nil
	}
	writeJSON(w, status, inventoryView(np.Inventories[placement.ResourceClass(rc)], np.Generation))
	return nil
}

func (a *API) providerUsages(w http.ResponseWriter, r *http.Request, _ int) error {
	p, _, err := a.providerSaying(r, "No resource provider with uuid %s found: %s")
	if err != nil {
		return err
	}
	usages := map[string]int64{}
	for rc := range p.Inventories {
		usages[string(rc)] = p.Usage[rc]
	}
	writeJSON(w, http.StatusOK, map[string]any{"usages": usages, "resource_provider_generation": p.Generation})
	return nil
}
