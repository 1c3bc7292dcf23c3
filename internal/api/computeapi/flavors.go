package computeapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"keel/internal/records"
	"keel/internal/store"
)

func (a *flavorsAPI) flavorView(r *http.Request, f records.Flavor, detail bool) map[string]any {
	v := map[string]any{"id": f.ID, "name": f.Name, "links": a.link("flavors", f.ID)}
	if version(r).AtLeast(55) {
		v["description"] = nil
		if f.Description != "" {
			v["description"] = f.Description
		}
	}
	if !detail {
		return v
	}
	v["ram"], v["vcpus"], v["disk"] = f.RAMMB, f.VCPUs, f.DiskGB
	v["OS-FLV-EXT-DATA:ephemeral"] = 0
	v["OS-FLV-DISABLED:disabled"] = false
	v["swap"] = ""
	v["rxtx_factor"] = 1.0
	v["os-flavor-access:is_public"] = !f.Private
	if version(r).AtLeast(61) {
		specs := f.ExtraSpecs
		if specs == nil {
			specs = map[string]string{}
		}
		v["extra_specs"] = specs
	}
	return v
}

// listFlavors is GET /flavors[/detail], sorted by id as Nova does, with
// Nova's minRam, minDisk, limit and marker.
func (a *flavorsAPI) listFlavors(detail bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		q := r.URL.Query()
		var minRAM, minDisk int64
		for _, p := range []struct {
			name string
			dst  *int64
		}{{"minRam", &minRAM}, {"minDisk", &minDisk}} {
			if s := q.Get(p.name); s != "" {
				n, err := strconv.ParseInt(s, 10, 64)
				if err != nil || n < 0 {
					return badRequest("Invalid " + p.name + " filter [" + s + "]")
				}
				*p.dst = n
			}
		}
		limit := -1
		if q.Has("limit") {
			n, err := strconv.Atoi(q.Get("limit"))
			if err != nil || n < 0 {
				return badRequest("Invalid input for query parameters limit. Value: " + q.Get("limit") + ". not a non-negative integer")
			}
			limit = min(n, 1000)
		}
		filter, err := parseFlavorFilter(r)
		if err != nil {
			return err
		}
		fs, err := a.store.ListFlavors(r.Context())
		if err != nil {
			return err
		}
		fs = slices.DeleteFunc(fs, func(f records.Flavor) bool { return !listedFlavor(r, f, filter) })
		if m := q.Get("marker"); m != "" {
			i := slices.IndexFunc(fs, func(f records.Flavor) bool { return f.ID == m })
			if i < 0 {
				return badRequest("marker [" + m + "] not found")
			}
			fs = fs[i+1:]
		}
		var sel []records.Flavor
		for _, f := range fs {
			if f.RAMMB >= minRAM && f.DiskGB >= minDisk {
				sel = append(sel, f)
			}
		}
		body := map[string]any{}
		if limit >= 0 && len(sel) > limit {
			sel = sel[:limit]
			if limit > 0 {
				body["flavors_links"] = a.nextLink(r, "flavors", sel[limit-1].ID)
			}
		}
		out := make([]any, 0, len(sel))
		for _, f := range sel {
			out = append(out, a.flavorView(r, f, detail))
		}
		body["flavors"] = out
		writeJSON(w, http.StatusOK, body)
		return nil
	}
}

func (a *flavorsAPI) showFlavor(w http.ResponseWriter, r *http.Request) error {
	f, err := a.flavor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"flavor": a.flavorView(r, f, true)})
	return nil
}

// flavorExtraSpecs lists a flavor's extra specs (openstackclient reads
// them for every flavor it shows).
func (a *flavorsAPI) flavorExtraSpecs(w http.ResponseWriter, r *http.Request) error {
	f, err := a.flavor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	specs := f.ExtraSpecs
	if specs == nil {
		specs = map[string]string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"extra_specs": specs})
	return nil
}

// flavor finds a flavor by id (as Nova does), or by name for the
// convenience of keel's own client.
func (a *base) flavor(r *http.Request, ref string) (records.Flavor, error) {
	return findFlavor(r, a.store, ref)
}

func (a *flavorsAPI) flavor(r *http.Request, ref string) (records.Flavor, error) {
	return findFlavor(r, a.store, ref)
}

// findFlavor finds a flavor visible to r's caller in flavors by id, or
// by name.
func findFlavor(r *http.Request, flavors store.Flavors, ref string) (records.Flavor, error) {
	f, err := flavors.GetFlavor(r.Context(), ref)
	if err == nil && !flavorVisible(r, f) {
		return records.Flavor{}, notFoundf("Flavor %s could not be found.", ref)
	}
	if err == nil || !isNotFound(err) {
		return f, err
	}
	fs, lerr := flavors.ListFlavors(r.Context())
	if lerr != nil {
		return records.Flavor{}, lerr
	}
	for _, f := range fs {
		if f.Name == ref && flavorVisible(r, f) {
			return f, nil
		}
	}
	return records.Flavor{}, notFoundf("Flavor %s could not be found.", ref)
}

func (a *flavorsAPI) createFlavor(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Flavor *struct {
			Name  string `json:"name"`
			ID    any    `json:"id"`
			RAM   any    `json:"ram"`
			VCPUs any    `json:"vcpus"`
			Disk  any    `json:"disk"`
			// Description and IsPublic: see applyCreateOptions.
			Description jsonRaw `json:"description"`
			IsPublic    jsonRaw `json:"os-flavor-access:is_public"`
			// Checked as Nova checks them; keel's flavors have no swap,
			// ephemeral disk or rxtx factor to keep.
			Swap      any `json:"swap"`
			Ephemeral any `json:"OS-FLV-EXT-DATA:ephemeral"`
			RxTx      any `json:"rxtx_factor"`
		} `json:"flavor"`
	}
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	fb := body.Flavor
	if fb == nil || fb.Name == "" {
		return badRequest("Invalid input for field/attribute flavor: 'name' is a required property")
	}
	if err := checkName(fb.Name); err != nil {
		return err
	}
	f := records.Flavor{Name: fb.Name}
	var err error
	size := func(field string, v any, min int64) (int64, error) {
		if v == nil {
			return 0, badRequest("Invalid input for field/attribute flavor: '" + field + "' is a required property")
		}
		return intValue(field, v, min, maxDBInt)
	}
	if f.RAMMB, err = size("ram", fb.RAM, 1); err != nil {
		return err
	}
	if f.VCPUs, err = size("vcpus", fb.VCPUs, 1); err != nil {
		return err
	}
	if f.DiskGB, err = size("disk", fb.Disk, 0); err != nil {
		return err
	}
	for _, o := range []struct {
		field string
		v     any
	}{{"swap", fb.Swap}, {"OS-FLV-EXT-DATA:ephemeral", fb.Ephemeral}} {
		if o.v == nil || o.v == "" {
			continue
		}
		if _, err := intValue(o.field, o.v, 0, maxDBInt); err != nil {
			return err
		}
	}
	if err := checkRxTx(fb.RxTx); err != nil {
		return err
	}
	if err := applyCreateOptions(r, &f, fb.Description, fb.IsPublic); err != nil {
		return err
	}
	switch id := fb.ID.(type) {
	case nil:
		f.ID = uuid.NewString()
	case string:
		if err := checkFlavorID(id); err != nil {
			return err
		}
		f.ID = id
	case float64:
		if id != float64(int64(id)) || id < 0 || id > maxDBInt {
			return badRequest("Invalid input for field/attribute id. Value: " + strconv.FormatFloat(id, 'g', -1, 64) + ". It must be a whole number or a string")
		}
		f.ID = strconv.FormatInt(int64(id), 10)
	default:
		return badRequest("Invalid input for field/attribute id")
	}
	f, err = a.store.CreateFlavor(r.Context(), f)
	if err != nil {
		if statusOf(err) == http.StatusConflict {
			return conflict("Flavor with name or id already exists: " + err.Error())
		}
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"flavor": a.flavorView(r, f, true)})
	return nil
}

// positiveInt reads a JSON number or numeric string ≥ min.
func positiveInt(field string, v any, min int64) (int64, error) {
	var n int64
	switch x := v.(type) {
	case float64:
		if x != float64(int64(x)) {
			return 0, badRequest("Invalid input for field/attribute " + field + ": not an integer")
		}
		n = int64(x)
	case string:
		p, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, badRequest("Invalid input for field/attribute " + field + ": not an integer")
		}
		n = p
	case nil:
		return 0, badRequest("Invalid input for field/attribute flavor: '" + field + "' is a required property")
	default:
		return 0, badRequest("Invalid input for field/attribute " + field)
	}
	if n < min {
		return 0, badRequest("Invalid input for field/attribute " + field + ": must be at least " + strconv.FormatInt(min, 10))
	}
	return n, nil
}

func (a *flavorsAPI) deleteFlavor(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.DeleteFlavor(r.Context(), r.PathValue("id")); err != nil {
		if isNotFound(err) {
			return notFoundf("Flavor %s could not be found.", r.PathValue("id"))
		}
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// extraSpecKey is the shape Nova allows for an extra spec's key.
var extraSpecKey = regexp.MustCompile(`^[a-zA-Z0-9\-_:. ]{1,255}$`)

// decodeExtraSpecs reads an object of extra specs: keys of Nova's shape,
// values strings (numbers and booleans are taken as their text, as Nova
// accepts them) of at most 255 characters.
func decodeExtraSpecs(raw jsonRaw) (map[string]string, error) {
	var in map[string]any
	if err := json.Unmarshal(raw, &in); err != nil || in == nil {
		return nil, badRequest("Invalid input for field/attribute extra_specs: must be an object")
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if !extraSpecKey.MatchString(k) {
			return nil, badRequest("Invalid input for field/attribute extra_specs. Key " + k + " does not match '^[a-zA-Z0-9-_:. ]{1,255}$'")
		}
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case float64, bool:
			s = fmt.Sprint(x)
		default:
			return nil, badRequest("Invalid input for field/attribute extra_specs." + k + ": not a string")
		}
		if len(s) > 255 {
			return nil, badRequest("Invalid input for field/attribute extra_specs." + k + ": longer than 255 characters")
		}
		out[k] = s
	}
	return out, nil
}

// updateExtraSpecs applies fn to a flavor's extra specs in the store.
func (a *flavorsAPI) updateExtraSpecs(r *http.Request, fn func(specs map[string]string) error) error {
	f, err := a.flavor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	_, err = a.store.UpdateFlavor(r.Context(), f.ID, func(f *records.Flavor) error {
		if f.ExtraSpecs == nil {
			f.ExtraSpecs = map[string]string{}
		}
		return fn(f.ExtraSpecs)
	})
	if isNotFound(err) {
		return notFoundf("Flavor %s could not be found.", f.ID)
	}
	return err
}

// setExtraSpecs is POST /flavors/{id}/os-extra_specs: the given specs are
// added or replaced, the others kept.
func (a *flavorsAPI) setExtraSpecs(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Specs jsonRaw `json:"extra_specs"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Specs == nil {
		return badRequest("Invalid input for field/attribute extra_specs: 'extra_specs' is a required property")
	}
	specs, err := decodeExtraSpecs(body.Specs)
	if err != nil {
		return err
	}
	if err := a.updateExtraSpecs(r, func(cur map[string]string) error {
		maps.Copy(cur, specs)
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"extra_specs": specs})
	return nil
}

// showExtraSpec is GET /flavors/{id}/os-extra_specs/{key}.
func (a *flavorsAPI) showExtraSpec(w http.ResponseWriter, r *http.Request) error {
	f, err := a.flavor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	v, ok := f.ExtraSpecs[key]
	if !ok {
		return notFoundf("Flavor %s has no extra specs with key %s.", f.ID, key)
	}
	writeJSON(w, http.StatusOK, map[string]any{key: v})
	return nil
}

// putExtraSpec is PUT /flavors/{id}/os-extra_specs/{key}: the body names
// exactly that key.
func (a *flavorsAPI) putExtraSpec(w http.ResponseWriter, r *http.Request) error {
	var raw jsonRaw
	if err := decode(r, &raw); err != nil {
		return err
	}
	specs, err := decodeExtraSpecs(raw)
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	if _, ok := specs[key]; !ok || len(specs) != 1 {
		return badRequest("Request body and URI mismatch: the body must hold exactly the key " + key)
	}
	if err := a.updateExtraSpecs(r, func(cur map[string]string) error {
		cur[key] = specs[key]
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, specs)
	return nil
}

// deleteExtraSpec is DELETE /flavors/{id}/os-extra_specs/{key}.
func (a *flavorsAPI) deleteExtraSpec(w http.ResponseWriter, r *http.Request) error {
	key := r.PathValue("key")
	if err := a.updateExtraSpecs(r, func(cur map[string]string) error {
		if _, ok := cur[key]; !ok {
			return notFoundf("Flavor %s has no extra specs with key %s.", r.PathValue("id"), key)
		}
		delete(cur, key)
		return nil
	}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
