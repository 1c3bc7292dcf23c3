package image

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"keel/internal/httpbody"
)

// The JSON-patch media types Glance takes on PATCH /v2/images/{id}: 2.1
// is RFC 6902's form ({"op": "replace", "path": "/name", "value": …}),
// 2.0 Glance's older one ({"replace": "/name", "value": …}).
const (
	patchType21 = "application/openstack-images-v2.1-json-patch"
	patchType20 = "application/openstack-images-v2.0-json-patch"
)

// reserved are names Glance keeps for itself: a patch naming one is
// refused (403).
var reserved = []string{"deleted", "deleted_at", "location"}

// patchOp is one operation of a patch: add, replace or remove at a path
// (split into its parts, unescaped).
type patchOp struct {
	op    string
	path  []string
	value json.RawMessage
}

// update is PATCH /v2/images/{id}: a JSON patch of the image's attributes,
// properties and tags, applied whole or not at all, by the owner or an
// admin (openstack image set / unset). As Glance: add sets (replacing a
// property that exists), replace and remove need the property to exist
// (409), read-only and reserved attributes and removing a base one are
// 403, formats change only while queued (403), public only by an admin.
// keel also takes an element path under /tags (/tags/0, /tags/-), which
// openstacksdk sends for `image set --tag`.
func (a *API) update(w http.ResponseWriter, r *http.Request) {
	im, c, ok := a.find(w, r)
	if !ok || !owns(w, c, im, "modify_image") {
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != patchType21 && ct != patchType20 {
		w.Header().Set("Accept-Patch", patchType21+", "+patchType20)
		fail(w, http.StatusUnsupportedMediaType, "Unsupported Content-Type "+ct+": a PATCH takes "+patchType21+" or "+patchType20+".")
		return
	}
	var raw []map[string]json.RawMessage
	if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, &raw); err != nil {
		if httpbody.IsTooLarge(err) {
			fail(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
			return
		}
		fail(w, http.StatusBadRequest, "Malformed JSON in request body.")
		return
	}
	ops, msg := parseOps(raw, ct == patchType20)
	if msg != "" {
		fail(w, http.StatusBadRequest, msg)
		return
	}
	if out, ok := a.change(w, im.ID, func(cur *Image) (int, string) { return applyPatch(c, cur, ops) }); ok {
		writeJSON(w, http.StatusOK, view(out))
	}
}

// parseOps reads a patch's operations (in the 2.0 form when old), or says
// what is wrong with them.
func parseOps(raw []map[string]json.RawMessage, old bool) ([]patchOp, string) {
	ops := make([]patchOp, 0, len(raw))
	for _, item := range raw {
		var op patchOp
		var path string
		if old {
			for _, name := range []string{"add", "replace", "remove"} {
				if p, ok := item[name]; ok {
					if op.op != "" || json.Unmarshal(p, &path) != nil {
						return nil, "Operation objects must contain exactly one member named \"add\", \"remove\", or \"replace\"."
					}
					op.op = name
				}
			}
		} else if json.Unmarshal(item["op"], &op.op) != nil || json.Unmarshal(item["path"], &path) != nil {
			return nil, "Operation objects must contain \"op\" and \"path\" strings."
		}
		if op.op != "add" && op.op != "replace" && op.op != "remove" {
			return nil, "Operation \"" + op.op + "\" not supported. Supported operations: add, remove, replace."
		}
		value, hasValue := item["value"]
		if op.op != "remove" && !hasValue {
			return nil, "Operation \"" + op.op + "\" requires a member named \"value\"."
		}
		op.value = value
		parts, msg := splitPointer(path)
		if msg != "" {
			return nil, msg
		}
		op.path = parts
		ops = append(ops, op)
	}
	return ops, ""
}

// splitPointer splits a JSON pointer into its unescaped parts: one, or
// two under /tags.
func splitPointer(path string) ([]string, string) {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return nil, "Pointer `" + path + "` does not start with \"/\"."
	}
	parts := strings.Split(rest, "/")
	for i, p := range parts {
		if strings.Contains(strings.NewReplacer("~0", "", "~1", "").Replace(p), "~") {
			return nil, "Pointer `" + path + "` contains \"~\" not part of a recognized escape sequence."
		}
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(p)
	}
	if parts[0] == "" || len(parts) > 2 || len(parts) == 2 && parts[0] != "tags" {
		return nil, "Nested paths are not allowed"
	}
	return parts, ""
}

// applyPatch applies ops to im for c, or says why not (status and
// message); im is then half-changed and must be dropped.
func applyPatch(c Caller, im *Image, ops []patchOp) (int, string) {
	wasPublic := im.Visibility == "public"
	for _, op := range ops {
		name := op.path[0]
		switch {
		case name == "id" || slices.Contains(readOnly, name):
			return http.StatusForbidden, "Attribute '" + name + "' is read-only."
		case slices.Contains(reserved, name):
			return http.StatusForbidden, "Attribute '" + name + "' is reserved."
		case len(op.path) == 2:
			if status, msg := patchTag(im, op); status != 0 {
				return status, msg
			}
		case slices.Contains(baseFields, name):
			if op.op == "remove" {
				return http.StatusForbidden, "Property " + name + " may not be removed."
			}
			if (name == "disk_format" || name == "container_format") && im.Status != StatusQueued {
				return http.StatusForbidden, "Attribute " + name + " can be only replaced for a queued image."
			}
			if status, msg := setField(c, im, name, op.value); status != 0 {
				return status, msg
			}
		default:
			if _, exists := im.Properties[name]; !exists && op.op != "add" {
				return http.StatusConflict, "Property " + name + " does not exist."
			}
			if op.op == "remove" {
				delete(im.Properties, name)
				continue
			}
			if status, msg := setField(c, im, name, op.value); status != 0 {
				return status, msg
			}
		}
	}
	if im.Visibility == "public" && !wasPublic && !c.Admin {
		return http.StatusForbidden, "You are not authorized to complete publicize_image action."
	}
	im.Tags = sortedTags(im.Tags)
	if len(im.Tags) > maxTags {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("Maximum number of tags exceeded (%d)", maxTags)
	}
	if len(im.Properties) == 0 {
		im.Properties = nil
	}
	return 0, ""
}

// patchTag applies an operation on one element of the tags (/tags/N,
// /tags/- to append).
func patchTag(im *Image, op patchOp) (int, string) {
	at := len(im.Tags)
	if op.path[1] != "-" || op.op != "add" {
		n, err := strconv.Atoi(op.path[1])
		limit := len(im.Tags)
		if op.op == "add" {
			limit++
		}
		if err != nil || n < 0 || n >= limit {
			return http.StatusBadRequest, "Invalid tag index " + op.path[1] + " in /tags/" + op.path[1]
		}
		at = n
	}
	var tag string
	if op.op != "remove" && (json.Unmarshal(op.value, &tag) != nil || len(tag) > maxTagLen) {
		return http.StatusBadRequest, badValue("tags")
	}
	switch op.op {
	case "add":
		im.Tags = slices.Insert(im.Tags, at, tag)
	case "replace":
		im.Tags[at] = tag
	case "remove":
		im.Tags = slices.Delete(im.Tags, at, at+1)
	}
	return 0, ""
}
