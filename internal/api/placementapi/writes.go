package placementapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"keel/internal/httpbody"
	"keel/internal/placement"
	"keel/internal/store"
)

// decode reads a JSON body into v; the body must say it is JSON (415
// otherwise, as Placement's handlers that take one).
func decode(r *http.Request, v any) error {
	return decodeAs(r, nil, v)
}

// decodeAs is decode with the body checked against Placement's schema s
// first (nil: none), so that a body of the wrong form is refused as
// Placement refuses it, before anything is looked up.
func decodeAs(r *http.Request, s *schema, v any) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	body, err := httpbody.Read(r, httpbody.DefaultLimit)
	if err != nil {
		if httpbody.IsTooLarge(err) {
			return errorf(http.StatusRequestEntityTooLarge, "Request is too large: %v", err)
		}
		return errorf(http.StatusBadRequest, "Malformed JSON: %v", err)
	}
	if s != nil && len(body) > 0 {
		if err := validateBody(body, s); err != nil {
			return err
		}
	}
	if err := httpbody.Unmarshal(body, v); err != nil {
		return errorf(http.StatusBadRequest, "Malformed JSON: %v", err)
	}
	return nil
}

// providerAllocations is GET /resource_providers/{uuid}/allocations:
// the consumers' allocations there (with their generations from 1.28).
func (a *API) providerAllocations(w http.ResponseWriter, r *http.Request, minor int) error {
	p, _, err := a.providerSaying(r, "Resource provider '%s' not found: %s")
	if err != nil {
		return err
	}
	cs, err := a.st.ConsumersOn(r.Context(), p.UUID)
	if err != nil {
		return err
	}
	out := map[string]any{}
	for _, c := range cs {
		e := map[string]any{"resources": c.Allocations[p.UUID]}
		if minor >= 28 {
			// From 1.28 each consumer's generation too, as Placement.
			e["consumer_generation"] = c.Generation
		}
		out[c.UUID] = e
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
	keys               []string
}

type allocationEntry struct {
	Resources map[string]int64 `json:"resources"`
	extra     string           // a key Placement's schema does not allow, if any
}

// UnmarshalJSON reads one provider's entry (1.12+): resources, and a
// generation Placement takes and ignores; any other key is remembered
// for toWrite to refuse.
func (e *allocationEntry) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	for k := range raw {
		if k != "resources" && k != "generation" {
			e.extra = k
		}
	}
	type plain allocationEntry
	return json.Unmarshal(data, (*plain)(e))
}

func (b *allocationBody) UnmarshalJSON(data []byte) error {
	type plain allocationBody
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	_, b.generationGiven = raw["consumer_generation"]
	b.raw = raw["allocations"]
	for k := range raw {
		b.keys = append(b.keys, k)
	}
	return json.Unmarshal(data, (*plain)(b))
}

// readAllocations decodes "allocations" in the microversion's shape.
func (b *allocationBody) readAllocations(minor int) error {
	if len(b.raw) == 0 || string(b.raw) == "null" {
		return errorf(http.StatusBadRequest, "'allocations' is a required property")
	}
	if minor >= 12 {
		if err := json.Unmarshal(b.raw, &b.Allocations); err != nil {
			return errorf(http.StatusBadRequest, "JSON does not validate: 'allocations' must be an object keyed by resource provider UUID: %s", httpbody.UserFacing(err))
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
		return errorf(http.StatusBadRequest, "JSON does not validate: before placement 1.12 'allocations' is a list of {resource_provider: {uuid}, resources}: %s", httpbody.UserFacing(err))
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

// rcPattern is the form of a resource class in Placement's schemas.
var rcPattern = regexp.MustCompile(`^[A-Z0-9_]+$`)

// consumerTypeRE is the form of a consumer type (1.38).
var consumerTypeRE = regexp.MustCompile(`^[A-Z0-9_]+$`)

// toWrite checks one consumer's body against the microversion and turns
// it into a store write.
func (b allocationBody) toWrite(consumer string, minor int) (placement.AllocationWrite, error) {
	for _, k := range b.keys {
		ok := k == "allocations" || (k == "project_id" || k == "user_id") && minor >= 8 ||
			k == "consumer_generation" && minor >= 28 || k == "mappings" && minor >= 34 || k == "consumer_type" && minor >= 38
		if !ok {
			return placement.AllocationWrite{}, errorf(http.StatusBadRequest, "JSON does not validate: Additional properties are not allowed ('%s' was unexpected)", k)
		}
	}
	if len(b.ProjectID) > 255 || len(b.UserID) > 255 {
		return placement.AllocationWrite{}, errorf(http.StatusBadRequest, "JSON does not validate: 'project_id' and 'user_id' are at most 255 characters")
	}
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
		if !isUUID(rp) || len(rp) != 36 {
			return w, errorf(http.StatusBadRequest, "JSON does not validate: Additional properties are not allowed ('%s' was unexpected)", rp)
		}
		if a.extra != "" {
			return w, errorf(http.StatusBadRequest, "JSON does not validate: Additional properties are not allowed ('%s' was unexpected)", a.extra)
		}
		if len(a.Resources) == 0 {
			return w, errorf(http.StatusBadRequest, "JSON does not validate: the resources of %s are a required, non-empty property", rp)
		}
		res := placement.Resources{}
		for rc, n := range a.Resources {
			if !rcPattern.MatchString(rc) {
				return w, errorf(http.StatusBadRequest, "JSON does not validate: '%s' does not match any of the regexes: '^[A-Z0-9_]+$'", rc)
			}
			if n < 1 {
				return w, errorf(http.StatusBadRequest, "allocation of %s on %s must be at least 1, got %d", rc, rp, n)
			}
			if n > maxInt {
				return w, errorf(http.StatusBadRequest, "JSON does not validate: %d is greater than the maximum of %d (allocation of %s on %s)", n, maxInt, rc, rp)
			}
			res[placement.ResourceClass(rc)] = n
		}
		w.Allocations[normUUID(rp)] = res
	}
	return w, nil
}

func (a *API) putAllocations(w http.ResponseWriter, r *http.Request, minor int) error {
	consumer := r.PathValue("consumer")
	if !isUUID(consumer) {
		return errorf(http.StatusBadRequest, "Malformed consumer_uuid: %s", consumer)
	}
	var body allocationBody
	if err := decodeAs(r, putAllocationSchemas[minor], &body); err != nil {
		return err
	}
	wr, err := body.toWrite(normUUID(consumer), minor)
	if err != nil {
		return err
	}
	if len(wr.Allocations) == 0 && minor < 28 {
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
		return errorf(http.StatusNotFound, "")
	}
	var body map[string]allocationBody
	if err := decodeAs(r, postAllocationSchemas[minor], &body); err != nil {
		return err
	}
	writes := make([]placement.AllocationWrite, 0, len(body))
	for consumer, b := range body {
		wr, err := b.toWrite(normUUID(consumer), minor)
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

// write applies allocation writes as Placement answers them: a stale
// consumer generation is 409 before anything else; then a class that does
// not exist is 400, and so is a provider that does not exist (the
// store's ErrNotFound); an amount outside an inventory's min_unit,
// max_unit or step_size (the store's InvalidError, the request being
// well-formed by then) is 409, as a full provider is. (A class that does
// not exist is in no inventory, so no write naming one succeeds: the
// classes are looked up only when the write fails.)
func (a *API) write(r *http.Request, writes ...placement.AllocationWrite) error {
	_, err := a.st.WriteAllocations(r.Context(), writes...)
	if err == nil || placement.IsConflict(err) {
		return err
	}
	if errors.Is(err, store.ErrNotFound) {
		if v, verr := a.views.get(r.Context()); verr == nil {
			for _, w := range writes {
				for _, p := range slices.Sorted(maps.Keys(w.Allocations)) {
					if v.byUUID[p] == nil {
						return errorf(http.StatusBadRequest, "Allocation for resource provider '%s' that does not exist.", p)
					}
				}
			}
		}
	}
	for _, w := range writes {
		for _, res := range w.Allocations {
			if cerr := a.knownClasses(r, res); cerr != nil {
				return errorf(http.StatusBadRequest, "Unable to allocate inventory for consumer %s: %s", w.ConsumerUUID,
					strings.TrimPrefix(cerr.Error(), "Invalid resource class in resources parameter: "))
			}
		}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusBadRequest, "Allocation names a resource provider that does not exist: %v", err)
	case placement.IsInvalid(err), placement.IsCapacity(err):
		msg := allocationMessage(err)
		if m := a.noInventoryMessage(r, err, writes); m != "" {
			msg = m
		}
		return errorf(http.StatusConflict, "Unable to allocate inventory: %s", msg)
	}
	return err
}

// classIDs are the ids Placement gives the first standard classes (their
// index in os-resource-classes), the order it names them in.
var classIDs = map[placement.ResourceClass]int{placement.VCPU: 0, placement.MemoryMB: 1, placement.DiskGB: 2}

// noInventoryMessage is Placement's text when a provider of the writes
// holds no inventory of any class they ask for: it names every class
// the writes ask for, in its ids' order. It returns "" for any other
// refusal, and when a class is not one whose id keel knows.
func (a *API) noInventoryMessage(r *http.Request, err error, writes []placement.AllocationWrite) string {
	var capErr *placement.CapacityError
	if !errors.As(err, &capErr) || capErr.Reason != "no inventory of this class" {
		return ""
	}
	v, verr := a.views.get(r.Context())
	if verr != nil || v.byUUID[capErr.Provider] == nil {
		return ""
	}
	asked := map[placement.ResourceClass]bool{}
	for _, w := range writes {
		for _, res := range w.Allocations {
			for rc := range res {
				if _, ok := classIDs[rc]; !ok {
					return ""
				}
				asked[rc] = true
			}
		}
	}
	for rc := range asked {
		if _, ok := v.byUUID[capErr.Provider].Inventories[rc]; ok {
			return ""
		}
	}
	names := slices.SortedFunc(maps.Keys(asked), func(a, b placement.ResourceClass) int { return classIDs[a] - classIDs[b] })
	strs := make([]string, len(names))
	for i, rc := range names {
		strs[i] = string(rc)
	}
	return fmt.Sprintf("Inventory for '%s' on resource provider '%s' invalid.", strings.Join(strs, ", "), capErr.Provider)
}

func (a *API) deleteAllocations(w http.ResponseWriter, r *http.Request, _ int) error {
	// As written: Placement deletes the allocations of the consumer the
	// path spells, and a dashless one has none.
	consumer := r.PathValue("consumer")
	if _, err := a.st.GetConsumer(r.Context(), consumer); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, "No allocations for consumer '%s'", r.PathValue("consumer"))
		}
		return err
	}
	if _, err := a.st.WriteAllocations(r.Context(), placement.AllocationWrite{ConsumerUUID: consumer, AnyConsumerGeneration: true, KeepProviderGenerations: true}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
