package image

import (
	"net/http"
	"slices"
)

// schemas are the JSON schemas Glance serves at /v2/schemas/{name}, which
// clients read to tell an image's attributes from its properties (any
// other name: a string property).
var schemas = func() map[string]map[string]any {
	typed := func(types ...string) map[string]any {
		if len(types) == 1 {
			return map[string]any{"type": types[0]}
		}
		return map[string]any{"type": types}
	}
	with := func(s map[string]any, kv ...any) map[string]any {
		for i := 0; i+1 < len(kv); i += 2 {
			s[kv[i].(string)] = kv[i+1]
		}
		return s
	}
	nullEnum := func(vals []string) []any {
		out := []any{nil}
		for _, v := range vals {
			out = append(out, v)
		}
		return out
	}
	ro := func(s map[string]any, desc string) map[string]any {
		return with(s, "readOnly", true, "description", desc)
	}
	image := map[string]any{
		"name": "image",
		"properties": map[string]any{
			"id": with(typed("string"), "description", "The image's identifier, a UUID.",
				"pattern", "^([0-9a-fA-F]){8}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){4}-([0-9a-fA-F]){12}$"),
			"name":             with(typed("null", "string"), "maxLength", 255, "description", "A name for the image."),
			"status":           ro(with(typed("string"), "enum", []string{StatusQueued, StatusSaving, StatusActive}), "Where the image is in its life: queued (no data), saving (data arriving), active."),
			"visibility":       with(typed("string"), "enum", visibilities, "description", "Who sees the image."),
			"protected":        with(typed("boolean"), "description", "A protected image cannot be deleted."),
			"os_hidden":        with(typed("boolean"), "description", "A hidden image is left out of lists unless asked for."),
			"checksum":         ro(with(typed("null", "string"), "maxLength", 32), "The MD5 of the image's data."),
			"os_hash_algo":     ro(with(typed("null", "string"), "maxLength", 64), "The algorithm of os_hash_value."),
			"os_hash_value":    ro(with(typed("null", "string"), "maxLength", 128), "The hash of the image's data (os_hash_algo)."),
			"owner":            with(typed("null", "string"), "maxLength", 255, "description", "The project that owns the image."),
			"size":             ro(typed("null", "integer"), "The size of the image's data in bytes."),
			"virtual_size":     ro(typed("null", "integer"), "The virtual size of the image's disk in bytes."),
			"container_format": with(typed("null", "string"), "enum", nullEnum(containerFormats), "description", "The format of the image's container."),
			"disk_format":      with(typed("null", "string"), "enum", nullEnum(diskFormats), "description", "The format of the image's disk."),
			"created_at":       ro(typed("string"), "When the image was created."),
			"updated_at":       ro(typed("string"), "When the image was last changed."),
			"tags":             with(typed("array"), "items", with(typed("string"), "maxLength", maxTagLen), "description", "Strings tagging the image."),
			"direct_url":       ro(typed("string"), "Where the data is in the store (not shown)."),
			"min_ram":          with(typed("integer"), "description", "The RAM (MB) a server booted from the image needs."),
			"min_disk":         with(typed("integer"), "description", "The disk (GB) a server booted from the image needs."),
			"self":             ro(typed("string"), "The image's path."),
			"file":             ro(typed("string"), "The path of the image's data."),
			"schema":           ro(typed("string"), "The path of this schema."),
		},
		"additionalProperties": typed("string"),
		"links": []any{
			map[string]string{"rel": "self", "href": "{self}"},
			map[string]string{"rel": "enclosure", "href": "{file}"},
			map[string]string{"rel": "describedby", "href": "{schema}"},
		},
	}
	member := map[string]any{
		"name": "member",
		"properties": map[string]any{
			"created_at": ro(typed("string"), "When the membership was created."),
			"updated_at": ro(typed("string"), "When the membership was last changed."),
			"image_id":   ro(typed("string"), "The shared image."),
			"member_id":  ro(typed("string"), "The project the image is shared with."),
			"schema":     ro(typed("string"), "The path of this schema."),
			"status":     with(typed("string"), "enum", memberStatuses, "description", "The member's answer to the sharing."),
		},
	}
	list := func(name string, schema map[string]any, paged bool) map[string]any {
		props := map[string]any{name: with(typed("array"), "items", schema), "schema": typed("string")}
		links := []any{map[string]string{"rel": "describedby", "href": "{schema}"}}
		if paged {
			props["first"], props["next"] = typed("string"), typed("string")
			links = slices.Insert(links, 0, any(map[string]string{"rel": "first", "href": "{first}"}), any(map[string]string{"rel": "next", "href": "{next}"}))
		}
		return map[string]any{"name": name, "properties": props, "links": links}
	}
	return map[string]map[string]any{
		"image": image, "images": list("images", image, true),
		"member": member, "members": list("members", member, false),
	}
}()

// schema is GET /v2/schemas/{image,images,member,members}.
func (a *API) schema(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.caller(r); !ok {
		fail(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	s, ok := schemas[r.PathValue("name")]
	if !ok {
		fail(w, http.StatusNotFound, "No schema named "+r.PathValue("name")+".")
		return
	}
	writeJSON(w, http.StatusOK, s)
}
