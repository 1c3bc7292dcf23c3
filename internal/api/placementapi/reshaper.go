package placementapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"

	"keel/internal/placement"
	"keel/internal/store"
)

// reshaper is POST /reshaper (1.30): replace the inventories of several
// providers and the allocations of several consumers in one atomic step,
// as a virt driver does when it moves a compute node's inventory into
// child providers (NUMA cells, GPUs) with the allocations on it.
func (a *API) reshaper(w http.ResponseWriter, r *http.Request, minor int) error {
	if err := needs(minor, 30); err != nil {
		return err
	}
	if err := requireJSON(r); err != nil {
		return err
	}
	var body map[string]json.RawMessage
	if err := decodeAs(r, reshaperSchemas[minor], &body); err != nil {
		return err
	}
	for k := range body {
		if k != "inventories" && k != "allocations" {
			return errorf(http.StatusBadRequest, "JSON does not validate: Additional properties are not allowed ('%s' was unexpected)", k)
		}
	}
	if body["inventories"] == nil || body["allocations"] == nil {
		return errorf(http.StatusBadRequest, "JSON does not validate: 'inventories' and 'allocations' are required properties")
	}
	var invBody map[string]struct {
		Generation  *int64                   `json:"resource_provider_generation"`
		Inventories map[string]inventoryBody `json:"inventories"`
	}
	if err := json.Unmarshal(body["inventories"], &invBody); err != nil {
		return errorf(http.StatusBadRequest, "JSON does not validate: 'inventories' must be an object keyed by resource provider UUID: %v", err)
	}
	if len(invBody) == 0 {
		return errorf(http.StatusBadRequest, "JSON does not validate: {} does not have enough properties")
	}
	var allocBody map[string]allocationBody
	if err := json.Unmarshal(body["allocations"], &allocBody); err != nil {
		return errorf(http.StatusBadRequest, "JSON does not validate: 'allocations' must be an object keyed by consumer UUID: %v", err)
	}
	v, err := a.views.get(r.Context())
	if err != nil {
		return err
	}
	var invs []placement.InventoryWrite
	for _, u := range slices.Sorted(maps.Keys(invBody)) {
		ib := invBody[u]
		if !isUUID(u) {
			return errorf(http.StatusBadRequest, "JSON does not validate: Additional properties are not allowed ('%s' was unexpected)", u)
		}
		if ib.Generation == nil || ib.Inventories == nil {
			return errorf(http.StatusBadRequest, "JSON does not validate: 'resource_provider_generation' and 'inventories' are required properties of %s", u)
		}
		u = normUUID(u)
		p, ok := v.byUUID[u]
		if !ok {
			return &httpError{status: http.StatusBadRequest, code: codeProviderNotFound,
				msg: fmt.Sprintf("Resource provider %s in inventories not found: No resource provider with uuid %s found", u, u)}
		}
		if *ib.Generation != p.Generation {
			return &httpError{status: http.StatusConflict, code: codeConcurrentUpdate,
				msg: fmt.Sprintf("resource provider generation conflict for provider %s: actual: %d, given: %d", u, p.Generation, *ib.Generation)}
		}
		iw := placement.InventoryWrite{UUID: u, Generation: *ib.Generation, Inventories: placement.Inventories{}}
		for rc, b := range ib.Inventories {
			if placement.ResourceClass(rc).Validate() != nil {
				// Of the schema's form, but no class there could be.
				return errorf(http.StatusBadRequest, "malformed reshaper data: No such resource class %s.", rc)
			}
			inv, err := b.inventory(u, rc, minor)
			if err != nil {
				return err
			}
			iw.Inventories[placement.ResourceClass(rc)] = inv
		}
		invs = append(invs, iw)
	}
	writes := make([]placement.AllocationWrite, 0, len(allocBody))
	for _, consumer := range slices.Sorted(maps.Keys(allocBody)) {
		b := allocBody[consumer]
		wr, err := b.toWrite(normUUID(consumer), max(minor, 28))
		if err != nil {
			return err
		}
		writes = append(writes, wr)
	}
	// A class that does not exist is found once the consumers are (as
	// Placement finds it, in its write).
	for _, iw := range invs {
		res := placement.Resources{}
		for rc := range iw.Inventories {
			res[rc] = 1
		}
		if err := a.knownClasses(r, res); err != nil {
			return errorf(http.StatusBadRequest, "malformed reshaper data: %s", strings.TrimPrefix(err.Error(), "Invalid resource class in resources parameter: "))
		}
	}
	if _, err := a.st.Reshape(r.Context(), invs, writes); err != nil {
		var inUse *placement.InUseError
		var conflict *placement.ConflictError
		switch {
		case errors.As(err, &conflict) && conflict.Kind == placement.ConsumerGeneration:
			return asHTTPError(conflict)
		case errors.As(err, &conflict) && conflict.Kind == placement.ProviderGeneration && conflict.Expected != nil && conflict.Actual != nil:
			return &httpError{status: http.StatusConflict, code: codeConcurrentUpdate,
				msg: fmt.Sprintf("resource provider generation conflict for provider %s: actual: %d, given: %d", conflict.UUID, *conflict.Actual, *conflict.Expected)}
		case errors.As(err, &inUse):
			return &httpError{status: http.StatusConflict, code: codeInventoryInUse, msg: "update conflict: " + inUseMessage(inUse)}
		case placement.IsConflict(err):
			return &httpError{status: http.StatusConflict, code: codeConcurrentUpdate, msg: "update conflict: " + err.Error()}
		case errors.Is(err, store.ErrNotFound):
			return errorf(http.StatusBadRequest, "malformed reshaper data: %v", err)
		case placement.IsCapacity(err), placement.IsInvalid(err):
			return errorf(http.StatusConflict, "Unable to allocate inventory: %s", allocationMessage(err))
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// requireJSON refuses a body that is not application/json (415), as
// Placement's handlers that take one do.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		if ct == "" {
			ct = "None"
		}
		return &httpError{status: http.StatusUnsupportedMediaType, code: codeUndefined, media: ct,
			msg: fmt.Sprintf("The media type %s is not supported, use application/json", ct)}
	}
	return nil
}
