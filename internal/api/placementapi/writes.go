package placementapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"

	"keel/internal/httpbody"
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

// providerAllocations is GET /resource_providers/{uuid}/allocations.
func (a *API) providerAllocations(w http.ResponseWriter, r *http.Request, _ int) error {
	p, _, err := a.provider(r)
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

// allocationBody is one consumer's allocations: keyed by provider from
// 1.12, a list of {resource_provider: {uuid}, resources} before.
type allocationBody struct {
	Allocations        map[string]allocationEntry `json:"-"`
	ProjectID          string                     `json:"project_id"`
	UserID             string                     `json:"user_id"`
	ConsumerGeneration *int64                     `json:"consumer_generation"`
	ConsumerType       string                     `json:"consumer_type"`
	generationGiven    bool
	raw                json.RawMessage // "allocations", decoded by shape
}

type allocationEntry struct {
	Resources map[string]int64 `json:"resources"`
}

func (b *allocationBody) UnmarshalJSON(data []byte) error {
	type plain allocationBody
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	_, b.generationGiven = raw["consumer_generation"]
	b.raw = raw["allocations"]
	return json.Unmarshal(data, (*plain)(b))
}

// readAllocations decodes "allocations" in the microversion's shape.
func (b *allocationBody) readAllocations(minor int) error {
	if len(b.raw) == 0 || string(b.raw) == "null" {
		return errorf(http.StatusBadRequest, "'allocations' is a required property")
	}
	if minor >= 12 {
		if err := json.Unmarshal(b.raw, &b.Allocations); err != nil {
			return errorf(http.StatusBadRequest, "JSON does not validate: 'allocations' must be an object keyed by resource provider UUID: %v", err)
		}
		return nil
	}
	var list []struct {
		ResourceProvider struct {
			UUID string `json:"uuid"`
		} `json:"resource_provider"`
		Resources map[string]int64 `json:"resources"`
	}
	if err := json.Unmarshal(b.raw, &list); err != nil {
		return errorf(http.StatusBadRequest, "JSON does not validate: before placement 1.12 'allocations' is a list of {resource_provider: {uuid}, resources}: %v", err)
	}
	if len(list) == 0 {
		return errorf(http.StatusBadRequest, "JSON does not validate: [] is too short")
	}
	b.Allocations = map[string]allocationEntry{}
	for _, e := range list {
		if e.ResourceProvider.UUID == "" || len(e.Resources) == 0 {
			return errorf(http.StatusBadRequest, "JSON does not validate: each allocation needs resource_provider.uuid and resources")
		}
		if _, dup := b.Allocations[e.ResourceProvider.UUID]; dup {
			return errorf(http.StatusBadRequest, "Allocation for resource provider '%s' that does not exist or is given twice.", e.ResourceProvider.UUID)
		}
		b.Allocations[e.ResourceProvider.UUID] = allocationEntry{Resources: e.Resources}
	}
	return nil
}

// incompleteConsumer is the project and user Placement records for a
// consumer written before 1.8, which could not name them.
const incompleteConsumer = "00000000-0000-0000-0000-000000000000"

// consumerTypeRE is the form of a consumer type (1.38).
var consumerTypeRE = regexp.MustCompile(`^[A-Z0-9_]+$`)

// toWrite checks one consumer's body against the microversion and turns
// it into a store write.
func (b allocationBody) toWrite(consumer string, minor int) (placement.AllocationWrite, error) {
	if err := b.readAllocations(minor); err != nil {
		return placement.AllocationWrite{}, err
	}
	if minor < 8 && b.ProjectID == "" && b.UserID == "" {
		b.ProjectID, b.UserID = incompleteConsumer, incompleteConsumer
	}
	if b.ProjectID == "" || b.UserID == "" {
		return placement.AllocationWrite{}, errorf(http.StatusBadRequest, "'project_id' and 'user_id' are required properties")
	}
	// Before 1.38 a write cannot say what the consumer is: an existing
	// consumer keeps its type, a new one is "unknown", as in Placement.
	w := placement.AllocationWrite{ConsumerUUID: consumer, ProjectID: b.ProjectID, UserID: b.UserID,
		NewType: placement.ConsumerUnknown, Allocations: map[string]placement.Resources{}}
	if minor >= 28 {
		if !b.generationGiven {
			return w, errorf(http.StatusBadRequest, "'consumer_generation' is a required property")
		}
		w.ConsumerGeneration = b.ConsumerGeneration
	} else {
		w.AnyConsumerGeneration = true
	}
	if minor >= 38 {
		if len(b.ConsumerType) > 255 || !consumerTypeRE.MatchString(b.ConsumerType) {
			return w, errorf(http.StatusBadRequest, "'consumer_type' is a required property of the form [A-Z0-9_]+, got %q", b.ConsumerType)
		}
		w.Type = placement.ConsumerType(b.ConsumerType)
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
	wr, err := body.toWrite(r.PathValue("consumer"), minor)
	if err != nil {
		return err
	}
	if len(wr.Allocations) == 0 && minor < 34 {
		return errorf(http.StatusBadRequest, "'allocations' must not be empty (use DELETE to remove a consumer's allocations)")
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

// write applies allocation writes; the store's decision names a provider
// that does not exist with ErrNotFound, which Placement answers with 400.
func (a *API) write(r *http.Request, writes ...placement.AllocationWrite) error {
	_, err := a.st.WriteAllocations(r.Context(), writes...)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusBadRequest, "Allocation names a resource provider that does not exist: %v", err)
	}
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
