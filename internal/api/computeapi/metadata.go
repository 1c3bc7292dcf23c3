package computeapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"keel/internal/records"
)

// serverMetadataRoutes adds /servers/{id}/metadata: the list, replace
// (PUT) and merge (POST) of a server's metadata, and per key show, put
// and delete, as Nova's server metadata API.
func (a *serverMetadataAPI) serverMetadataRoutes(route func(string, bool, func(http.ResponseWriter, *http.Request) error)) {
	route("GET /compute/v2.1/servers/{id}/metadata", false, a.listServerMetadata)
	route("PUT /compute/v2.1/servers/{id}/metadata", false, a.writeServerMetadata(true))
	route("POST /compute/v2.1/servers/{id}/metadata", false, a.writeServerMetadata(false))
	route("GET /compute/v2.1/servers/{id}/metadata/{key}", false, a.showServerMetadataItem)
	route("PUT /compute/v2.1/servers/{id}/metadata/{key}", false, a.putServerMetadataItem)
	route("DELETE /compute/v2.1/servers/{id}/metadata/{key}", false, a.deleteServerMetadataItem)
}

// metadataStates are the vm_states in which Nova changes a server's
// metadata (and then only with no task in progress).
var metadataStates = []records.VMState{records.VMActive, records.VMPaused, records.VMSuspended, records.VMStopped}

// metadataChangeable refuses a change where Nova does: a locked server
// (for a non-admin), a vm_state outside metadataStates or a task in
// progress, with Nova's 409 texts.
func metadataChangeable(r *http.Request, in records.Instance, what string) error {
	if err := checkLocked(r, in); err != nil {
		return err
	}
	if !slices.Contains(metadataStates, in.VMState) {
		return conflict("Cannot '" + what + "' instance " + in.UUID + " while it is in vm_state " + string(in.VMState))
	}
	if in.TaskState != records.TaskNone {
		return conflict("Cannot '" + what + "' instance " + in.UUID + " while it is in task_state " + string(in.TaskState))
	}
	return nil
}

func metadataOf(in records.Instance) map[string]string {
	if in.Metadata == nil {
		return map[string]string{}
	}
	return in.Metadata
}

// listServerMetadata is GET /servers/{id}/metadata.
func (a *serverMetadataAPI) listServerMetadata(w http.ResponseWriter, r *http.Request) error {
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"metadata": metadataOf(in)})
	return nil
}

// writeServerMetadata is PUT /servers/{id}/metadata (replace: the body's
// items are all the server keeps) and POST (merge: the body's items are
// added or changed, the others stay). Both answer with every item the
// server then has; the total counts against metadata_items.
func (a *serverMetadataAPI) writeServerMetadata(replace bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var body map[string]json.RawMessage
		if err := decode(r, &body); err != nil {
			return err
		}
		raw, ok := body["metadata"]
		if !ok {
			return badRequest("Invalid input for field/attribute metadata: 'metadata' is a required property")
		}
		for k := range body {
			if k != "metadata" {
				return badRequest("Additional properties are not allowed ('" + k + "' was unexpected)")
			}
		}
		meta, err := decodeMetadata(raw)
		if err != nil {
			return err
		}
		if meta == nil {
			return badRequest("Invalid input for field/attribute metadata: None is not of type 'object'")
		}
		in, err := a.modifyInstance(r, r.PathValue("id"), func(in *records.Instance) error {
			if err := metadataChangeable(r, *in, "update metadata"); err != nil {
				return err
			}
			next := maps.Clone(meta)
			if !replace {
				next = maps.Clone(in.Metadata)
				if next == nil {
					next = map[string]string{}
				}
				maps.Copy(next, meta)
			}
			if err := a.checkMetadataQuota(r.Context(), in.ProjectID, len(next)); err != nil {
				return err
			}
			in.Metadata = next
			return nil
		})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"metadata": metadataOf(in)})
		return nil
	}
}

// showServerMetadataItem is GET /servers/{id}/metadata/{key}.
func (a *serverMetadataAPI) showServerMetadataItem(w http.ResponseWriter, r *http.Request) error {
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	v, ok := in.Metadata[key]
	if !ok {
		return notFound("Metadata item was not found")
	}
	writeJSON(w, http.StatusOK, map[string]any{"meta": map[string]string{key: v}})
	return nil
}

// putServerMetadataItem is PUT /servers/{id}/metadata/{key} with
// {"meta": {key: value}}: exactly one item, named as in the path.
func (a *serverMetadataAPI) putServerMetadataItem(w http.ResponseWriter, r *http.Request) error {
	var body map[string]json.RawMessage
	if err := decode(r, &body); err != nil {
		return err
	}
	raw, ok := body["meta"]
	if !ok {
		return badRequest("Invalid input for field/attribute meta: 'meta' is a required property")
	}
	for k := range body {
		if k != "meta" {
			return badRequest("Additional properties are not allowed ('" + k + "' was unexpected)")
		}
	}
	meta, err := decodeMetadata(raw)
	if err != nil {
		return err
	}
	switch {
	case len(meta) == 0:
		return badRequest("Invalid input for field/attribute meta: it must have one item")
	case len(meta) > 1:
		return badRequest("Request body contains too many items")
	}
	key := r.PathValue("key")
	value, ok := meta[key]
	if !ok {
		return badRequest("Request body and URI mismatch")
	}
	if _, err := a.modifyInstance(r, r.PathValue("id"), func(in *records.Instance) error {
		if err := metadataChangeable(r, *in, "update metadata"); err != nil {
			return err
		}
		next := maps.Clone(in.Metadata)
		if next == nil {
			next = map[string]string{}
		}
		next[key] = value
		if err := a.checkMetadataQuota(r.Context(), in.ProjectID, len(next)); err != nil {
			return err
		}
		in.Metadata = next
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"meta": map[string]string{key: value}})
	return nil
}

// deleteServerMetadataItem is DELETE /servers/{id}/metadata/{key}.
func (a *serverMetadataAPI) deleteServerMetadataItem(w http.ResponseWriter, r *http.Request) error {
	key := r.PathValue("key")
	if _, err := a.modifyInstance(r, r.PathValue("id"), func(in *records.Instance) error {
		if _, ok := in.Metadata[key]; !ok {
			return notFound("Metadata item was not found")
		}
		if err := metadataChangeable(r, *in, "delete metadata"); err != nil {
			return err
		}
		in.Metadata = maps.Clone(in.Metadata)
		delete(in.Metadata, key)
		return nil
	}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
