package placementapi

import (
	"encoding/json"
	"errors"
	"keel/internal/httpbody"
	"maps"
	"net/http"
	"slices"

	"github.com/google/uuid"

	"keel/internal/placement"
	"keel/internal/store"
)

func decode(r *http.Request, v any) error {
	if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, v); err != nil {
		if httpbody.IsTooLarge(err) {
			return errorf(http.StatusRequestEntityTooLarge, "Request is too large: %v", err)
		}
		return errorf(http.StatusBadRequest, "Malformed JSON: %v", err)
	}
	return nil
}

func (a *API) createProvider(w http.ResponseWriter, r *http.Request, minor int) error {
	var body struct {
		Name string `json:"name"`
		UUID string `json:"uuid"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Name == "" || len(body.Name) > 200 {
		return errorf(http.StatusBadRequest, "'name' is a required property of at most 200 characters")
	}
	if body.UUID == "" {
		body.UUID = uuid.NewString()
	} else if _, err := uuid.Parse(body.UUID); err != nil {
		return errorf(http.StatusBadRequest, "'uuid' %q is not a UUID", body.UUID)
	}
	p, err := a.st.CreateProvider(r.Context(), placement.Provider{UUID: body.UUID, Name: body.Name, Inventories: placement.Inventories{}})
	if err != nil {
		return err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	w.Header().Set("Location", scheme+"://"+r.Host+"/placement/resource_providers/"+p.UUID)
	if minor >= 20 {
		writeJSON(w, http.StatusOK, a.providerView(p, minor))
		return nil
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

func (a *API) deleteProvider(w http.ResponseWriter, r *http.Request, _ int) error {
	if _, err := a.provider(r); err != nil {
		return err
	}
	if err := a.st.DeleteProvider(r.Context(), r.PathValue("uuid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// putInventories is PUT /resource_providers/{uuid}/inventories: replaces
// every inventory if resource_provider_generation is current.
func (a *API) putInventories(w http.ResponseWriter, r *http.Request, minor int) error {
	p, err := a.provider(r)
	if err != nil {
		return err
	}
	var body struct {
		Generation  *int64                         `json:"resource_provider_generation"`
		Inventories map[string]placement.Inventory `json:"inventories"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Generation == nil || body.Inventories == nil {
		return errorf(http.StatusBadRequest, "'resource_provider_generation' and 'inventories' are required properties")
	}
	invs := placement.Inventories{}
	for rc, inv := range body.Inventories {
		if inv.Total < 1 {
			return errorf(http.StatusBadRequest, "inventory of %s: 'total' is a required property of at least 1", rc)
		}
		invs[placement.ResourceClass(rc)] = inv.WithDefaults()
	}
	np, err := a.st.SetInventories(r.Context(), p.UUID, *body.Generation, invs)
	if err != nil {
		return err
	}
	out := map[string]any{}
	for rc, inv := range np.Inventories {
		out[string(rc)] = inv
	}
	writeJSON(w, http.StatusOK, map[string]any{"inventories": out, "resource_provider_generation": np.Generation})
	return nil
}

// providerAllocations is GET /resource_providers/{uuid}/allocations.
func (a *API) providerAllocations(w http.ResponseWriter, r *http.Request, _ int) error {
	p, err := a.provider(r)
	if err != nil {
		return err
	}
	cs, err := a.st.ConsumersOn(r.Context(), p.UUID)
	if err != nil {
		return err
	}
	out := map[string]any{}
	for _, c := range cs {
		out[c.UUID] = map[string]any{"resources": c.Allocations[p.UUID]}
	}
	writeJSON(w, http.StatusOK, map[string]any{"allocations": out, "resource_provider_generation": p.Generation})
	return nil
}

// consumerAllocations is GET /allocations/{consumer}; an unknown consumer
// has no allocations (200, empty), as in Placement.
func (a *API) consumerAllocations(w http.ResponseWriter, r *http.Request, minor int) error {
	c, err := a.st.GetConsumer(r.Context(), r.PathValue("consumer"))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	allocs := map[string]any{}
	gens := map[string]int64{}
	if len(c.Allocations) > 0 {
		sums, err := a.st.ProviderSummaries(r.Context(), c.Providers())
		if err != nil {
			return err
		}
		for _, s := range sums {
			gens[s.UUID] = s.Generation
		}
	}
	for rp, res := range c.Allocations {
		allocs[rp] = map[string]any{"generation": gens[rp], "resources": res}
	}
	out := map[string]any{"allocations": allocs}
	if minor >= 12 && c.UUID != "" {
		out["project_id"], out["user_id"] = c.ProjectID, c.UserID
	}
	if minor >= 28 && c.UUID != "" {
		out["consumer_generation"] = c.Generation
	}
	if minor >= 38 && c.UUID != "" {
		out["consumer_type"] = c.Type
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// allocationBody is one consumer's allocations in the 1.12+ shape.
type allocationBody struct {
	Allocations map[string]struct {
		Resources map[string]int64 `json:"resources"`
	} `json:"allocations"`
	ProjectID          string `json:"project_id"`
	UserID             string `json:"user_id"`
	ConsumerGeneration *int64 `json:"consumer_generation"`
	ConsumerType       string `json:"consumer_type"`
	generationGiven    bool
}

func (b *allocationBody) UnmarshalJSON(data []byte) error {
	type plain allocationBody
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	_, b.generationGiven = raw["consumer_generation"]
	return json.Unmarshal(data, (*plain)(b))
}

// toWrite checks one consumer's body against the microversion and turns
// it into a store write.
func (b allocationBody) toWrite(consumer string, minor int) (placement.AllocationWrite, error) {
	if minor < 12 {
		return placement.AllocationWrite{}, errorf(http.StatusBadRequest, "keel's placement takes allocation writes in the 1.12 shape or later; send OpenStack-API-Version: placement 1.12 or newer")
	}
	if b.ProjectID == "" || b.UserID == "" {
		return placement.AllocationWrite{}, errorf(http.StatusBadRequest, "'project_id' and 'user_id' are required properties")
	}
	w := placement.AllocationWrite{ConsumerUUID: consumer, ProjectID: b.ProjectID, UserID: b.UserID,
		Type: placement.ConsumerInstance, Allocations: map[string]placement.Resources{}}
	if minor >= 28 {
		if !b.generationGiven {
			return w, errorf(http.StatusBadRequest, "'consumer_generation' is a required property")
		}
		w.ConsumerGeneration = b.ConsumerGeneration
	} else {
		w.AnyConsumerGeneration = true
	}
	if minor >= 38 {
		switch placement.ConsumerType(b.ConsumerType) {
		case placement.ConsumerInstance, placement.ConsumerMigration:
			w.Type = placement.ConsumerType(b.ConsumerType)
		default:
			return w, errorf(http.StatusBadRequest, "'consumer_type' must be INSTANCE or MIGRATION, got %q", b.ConsumerType)
		}
	}
	for rp, a := range b.Allocations {
		res := placement.Resources{}
		for rc, n := range a.Resources {
			if n < 1 {
				return w, errorf(http.StatusBadRequest, "allocation of %s on %s must be at least 1, got %d", rc, rp, n)
			}
			res[placement.ResourceClass(rc)] = n
		}
		w.Allocations[rp] = res
	}
	return w, nil
}

func (a *API) putAllocations(w http.ResponseWriter, r *http.Request, minor int) error {
	var body allocationBody
	if err := decode(r, &body); err != nil {
		return err
	}
	if len(body.Allocations) == 0 && minor < 34 {
		return errorf(http.StatusBadRequest, "'allocations' must not be empty (use DELETE to remove a consumer's allocations)")
	}
	wr, err := body.toWrite(r.PathValue("consumer"), minor)
	if err != nil {
		return err
	}
	if err := a.write(r, wr); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// postAllocations is POST /allocations (1.13): several consumers at once,
// all or nothing.
func (a *API) postAllocations(w http.ResponseWriter, r *http.Request, minor int) error {
	if minor < 13 {
		return errorf(http.StatusMethodNotAllowed, "POST /allocations needs placement 1.13 or newer")
	}
	var body map[string]allocationBody
	if err := decode(r, &body); err != nil {
		return err
	}
	writes := make([]placement.AllocationWrite, 0, len(body))
	for consumer, b := range body {
		wr, err := b.toWrite(consumer, minor)
		if err != nil {
			return err
		}
		writes = append(writes, wr)
	}
	if err := a.write(r, writes...); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) write(r *http.Request, writes ...placement.AllocationWrite) error {
	for _, wr := range writes {
		if len(wr.Allocations) == 0 {
			continue
		}
		sums, err := a.st.ProviderSummaries(r.Context(), slices.Collect(maps.Keys(wr.Allocations)))
		if err != nil {
			return err
		}
		if len(sums) != len(wr.Allocations) {
			return errorf(http.StatusBadRequest, "Allocation for consumer %s names a resource provider that does not exist", wr.ConsumerUUID)
		}
	}
	_, err := a.st.WriteAllocations(r.Context(), writes...)
	return err
}

func (a *API) deleteAllocations(w http.ResponseWriter, r *http.Request, _ int) error {
	consumer := r.PathValue("consumer")
	if _, err := a.st.GetConsumer(r.Context(), consumer); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, "No allocations for consumer '%s'", consumer)
		}
		return err
	}
	if _, err := a.st.WriteAllocations(r.Context(), placement.AllocationWrite{ConsumerUUID: consumer, AnyConsumerGeneration: true}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
