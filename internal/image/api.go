package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"keel/internal/httpbody"
)

// Caller is who asks: the project that owns what it creates, and whether
// it is an admin (who sees and changes every image).
type Caller struct {
	ProjectID string
	Admin     bool
}

// API serves Glance's v2 image API under /image/v2.
type API struct {
	st     *Store
	caller func(*http.Request) (Caller, bool)
	mux    *http.ServeMux
}

// New returns the image API over st; caller tells who asks (false: no
// one, 401).
func New(st *Store, caller func(*http.Request) (Caller, bool)) *API {
	a := &API{st: st, caller: caller, mux: http.NewServeMux()}
	a.mux.HandleFunc("GET /image/v2/images", a.list)
	a.mux.HandleFunc("POST /image/v2/images", a.create)
	a.mux.HandleFunc("GET /image/v2/images/{id}", a.show)
	a.mux.HandleFunc("PATCH /image/v2/images/{id}", a.update)
	a.mux.HandleFunc("DELETE /image/v2/images/{id}", a.delete)
	a.mux.HandleFunc("PUT /image/v2/images/{id}/file", a.upload)
	a.mux.HandleFunc("GET /image/v2/images/{id}/file", a.download)
	a.mux.HandleFunc("PUT /image/v2/images/{id}/tags/{tag}", a.addTag)
	a.mux.HandleFunc("DELETE /image/v2/images/{id}/tags/{tag}", a.deleteTag)
	a.mux.HandleFunc("POST /image/v2/images/{id}/members", a.createMember)
	a.mux.HandleFunc("GET /image/v2/images/{id}/members", a.listMembers)
	a.mux.HandleFunc("GET /image/v2/images/{id}/members/{member}", a.showMember)
	a.mux.HandleFunc("PUT /image/v2/images/{id}/members/{member}", a.updateMember)
	a.mux.HandleFunc("DELETE /image/v2/images/{id}/members/{member}", a.deleteMember)
	a.mux.HandleFunc("GET /image/v2/schemas/{name}", a.schema)
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mux.ServeHTTP(&errorWriter{ResponseWriter: w, json: wantsJSON(r)}, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// view is an image as Glance shows it: unset fields null, the properties
// beside the others.
func view(im Image) map[string]any {
	null := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var size, virtual any
	if im.Size != nil {
		size = *im.Size
	}
	if im.VirtualSize != nil {
		virtual = *im.VirtualSize
	}
	tags := im.Tags
	if tags == nil {
		tags = []string{}
	}
	v := map[string]any{}
	for k, p := range im.Properties {
		v[k] = p
	}
	for k, x := range map[string]any{
		"id": im.ID, "name": null(im.Name), "status": im.Status, "visibility": im.Visibility,
		"protected": im.Protected, "os_hidden": im.Hidden, "owner": null(im.Owner),
		"disk_format": null(im.DiskFormat), "container_format": null(im.ContainerFormat),
		"min_disk": im.MinDisk, "min_ram": im.MinRAM, "size": size, "virtual_size": virtual,
		"checksum": null(im.Checksum), "os_hash_algo": null(im.HashAlgo), "os_hash_value": null(im.HashValue),
		"tags": tags, "created_at": im.CreatedAt.Format(time.RFC3339), "updated_at": im.UpdatedAt.Format(time.RFC3339),
		"self": "/v2/images/" + im.ID, "file": "/v2/images/" + im.ID + "/file", "schema": "/v2/schemas/image",
	} {
		v[k] = x
	}
	return v
}

// Visible reports whether c sees im: its own, public and community ones
// (the latter not listed unless asked for) and shared ones c is a member
// of, whatever the member's status (listed once accepted) — the images c
// may boot servers from, as Glance shows them to Nova.
func Visible(c Caller, im Image) bool {
	if c.Admin || im.Owner == c.ProjectID || im.Visibility == "public" || im.Visibility == "community" {
		return true
	}
	_, member := im.Member(c.ProjectID)
	return im.Visibility == "shared" && member
}

// find reads the path's image as c sees it; it answers and returns false
// if there is none.
func (a *API) find(w http.ResponseWriter, r *http.Request) (Image, Caller, bool) {
	c, ok := a.caller(r)
	if !ok {
		fail(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return Image{}, c, false
	}
	id := r.PathValue("id")
	im, err := a.st.Get(id)
	if err == nil && !Visible(c, im) {
		err = ErrNotFound
	}
	if errors.Is(err, ErrNotFound) {
		fail(w, http.StatusNotFound, "No image found with ID "+id)
		return Image{}, c, false
	}
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return Image{}, c, false
	}
	return im, c, true
}

// owns reports whether c may change im, answering 403 if not.
func owns(w http.ResponseWriter, c Caller, im Image, action string) bool {
	if c.Admin || im.Owner == c.ProjectID {
		return true
	}
	fail(w, http.StatusForbidden, "You are not authorized to complete "+action+" action.")
	return false
}

var (
	diskFormats      = []string{"ami", "ari", "aki", "vhd", "vhdx", "vmdk", "raw", "qcow2", "vdi", "iso", "ploop"}
	containerFormats = []string{"ami", "ari", "aki", "bare", "ovf", "ova", "docker", "compressed"}
	visibilities     = []string{"public", "private", "shared", "community"}
	// readOnly are the attributes Glance computes; a create naming one is
	// refused (403).
	readOnly = []string{"status", "checksum", "size", "virtual_size", "os_hash_algo", "os_hash_value",
		"created_at", "updated_at", "self", "file", "schema", "direct_url", "locations"}
)

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	c, ok := a.caller(r)
	if !ok {
		fail(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	var body map[string]json.RawMessage
	if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, &body); err != nil {
		if httpbody.IsTooLarge(err) {
			fail(w, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
			return
		}
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	im, status, msg := a.fromBody(c, body)
	if status != 0 {
		fail(w, status, msg)
		return
	}
	out, err := a.st.Create(im)
	if errors.Is(err, ErrExists) {
		fail(w, http.StatusConflict, "Image with identifier "+im.ID+" already exists!")
		return
	}
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Location", "/v2/images/"+out.ID)
	writeJSON(w, http.StatusCreated, view(out))
}

// fromBody builds a new image from a create's body, or says why not
// (status and message).
func (a *API) fromBody(c Caller, body map[string]json.RawMessage) (Image, int, string) {
	im := Image{ID: uuid.NewString(), Visibility: "shared", Owner: c.ProjectID, Properties: map[string]string{}}
	for k, raw := range body {
		if slices.Contains(readOnly, k) {
			return Image{}, http.StatusForbidden, "Attribute '" + k + "' is read-only."
		}
		if k == "id" {
			if json.Unmarshal(raw, &im.ID) != nil || uuid.Validate(im.ID) != nil {
				return Image{}, http.StatusBadRequest, badValue("id")
			}
			continue
		}
		if status, msg := setField(c, &im, k, raw); status != 0 {
			return Image{}, status, msg
		}
	}
	if im.Visibility == "public" && !c.Admin {
		return Image{}, http.StatusForbidden, "You are not authorized to complete publicize_image action."
	}
	if len(im.Properties) == 0 {
		im.Properties = nil
	}
	return im, 0, ""
}

// badValue is Glance's schema message for a field's bad value.
func badValue(field string) string {
	return "Provided object does not match schema 'image': invalid value for '" + field + "'"
}

// baseFields are the image attributes a client may set (the others
// of Glance's schema are read-only); any other name is a property.
var baseFields = []string{"name", "visibility", "disk_format", "container_format", "owner", "protected", "os_hidden", "min_disk", "min_ram", "tags"}

// Limits Glance keeps: image_tag_quota and image_property_quota, with
// the lengths its schema allows.
const (
	maxTags       = 128
	maxProperties = 128
	maxTagLen     = 255
	maxPropLen    = 65535
)

// setField sets one attribute (or, for a name not in baseFields, a
// property) of im from its JSON value for c, or says why not (status and
// message).
func setField(c Caller, im *Image, k string, raw json.RawMessage) (int, string) {
	str := func(into *string, allowed []string) bool {
		if string(raw) == "null" {
			*into = ""
			return true
		}
		var s string
		if json.Unmarshal(raw, &s) != nil || allowed != nil && !slices.Contains(allowed, s) || len(s) > 255 {
			return false
		}
		*into = s
		return true
	}
	var ok bool
	switch k {
	case "name":
		ok = str(&im.Name, nil)
	case "visibility":
		ok = str(&im.Visibility, visibilities)
	case "disk_format":
		ok = str(&im.DiskFormat, diskFormats)
	case "container_format":
		ok = str(&im.ContainerFormat, containerFormats)
	case "owner":
		ok = str(&im.Owner, nil)
		if ok && im.Owner != c.ProjectID && !c.Admin {
			return http.StatusForbidden, "You are not permitted to create images owned by '" + im.Owner + "'."
		}
	case "protected", "os_hidden":
		b := &im.Protected
		if k == "os_hidden" {
			b = &im.Hidden
		}
		ok = json.Unmarshal(raw, b) == nil
	case "min_disk", "min_ram":
		n := &im.MinDisk
		if k == "min_ram" {
			n = &im.MinRAM
		}
		ok = json.Unmarshal(raw, n) == nil && *n >= 0
	case "tags":
		var tags []string
		ok = json.Unmarshal(raw, &tags) == nil && !slices.ContainsFunc(tags, func(t string) bool { return len(t) > maxTagLen })
		im.Tags = sortedTags(tags)
		if len(im.Tags) > maxTags {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("Maximum number of tags exceeded (%d)", maxTags)
		}
	default:
		var s string
		ok = json.Unmarshal(raw, &s) == nil && len(s) <= maxPropLen
		if im.Properties == nil {
			im.Properties = map[string]string{}
		}
		im.Properties[k] = s
		if len(im.Properties) > maxProperties {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("Maximum number of properties exceeded (%d)", maxProperties)
		}
	}
	if !ok {
		return http.StatusBadRequest, badValue(k)
	}
	return 0, ""
}

func (a *API) show(w http.ResponseWriter, r *http.Request) {
	if im, _, ok := a.find(w, r); ok {
		writeJSON(w, http.StatusOK, view(im))
	}
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) {
	im, c, ok := a.find(w, r)
	if !ok || !owns(w, c, im, "delete_image") {
		return
	}
	if im.Protected {
		fail(w, http.StatusForbidden, "Image "+im.ID+" is protected and cannot be deleted.")
		return
	}
	if err := a.st.Delete(im.ID); err != nil {
		if errors.Is(err, ErrNotFound) {
			fail(w, http.StatusNotFound, "No image found with ID "+im.ID)
			return
		}
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) upload(w http.ResponseWriter, r *http.Request) {
	im, c, ok := a.find(w, r)
	if !ok || !owns(w, c, im, "upload_image") {
		return
	}
	if im.DiskFormat == "" || im.ContainerFormat == "" {
		fail(w, http.StatusBadRequest, "Properties disk_format, container_format must be set prior to saving data.")
		return
	}
	if im.Status != StatusQueued {
		fail(w, http.StatusConflict, "Image status transition from "+im.Status+" to saving is not allowed")
		return
	}
	if r.ContentLength > a.st.cap {
		fail(w, http.StatusRequestEntityTooLarge, "The provided image is too large.")
		return
	}
	// The body may take longer than the server's read timeout: the cap
	// bounds it, and only an owner (authenticated) gets here.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	_, err := a.st.Upload(im.ID, r.Body)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrTooLarge):
		fail(w, http.StatusRequestEntityTooLarge, "The provided image is too large.")
	case errors.Is(err, ErrBusy), errors.Is(err, ErrStatus):
		fail(w, http.StatusConflict, "Image status transition from "+im.Status+" to saving is not allowed")
	case errors.Is(err, ErrNotFound):
		fail(w, http.StatusNotFound, "No image found with ID "+im.ID)
	default:
		// The body ended early or could not be read: Glance answers 400
		// and the image stays queued.
		fail(w, http.StatusBadRequest, "Failed to upload image data: "+err.Error())
	}
}

func (a *API) download(w http.ResponseWriter, r *http.Request) {
	im, _, ok := a.find(w, r)
	if !ok {
		return
	}
	if im.Status != StatusActive {
		w.WriteHeader(http.StatusNoContent) // no data yet, as Glance
		return
	}
	f, err := a.st.Open(im.ID)
	if errors.Is(err, ErrNotFound) {
		fail(w, http.StatusNotFound, "Image "+im.ID+" has no data.")
		return
	}
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-MD5", im.Checksum)
	if im.Size != nil {
		w.Header().Set("Content-Length", strconv.FormatInt(*im.Size, 10))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}

// list is GET /v2/images: Glance's filters (name, status, visibility,
// owner, disk_format, container_format, tag, size_min, size_max,
// protected, os_hidden, member_status, and any other name for the
// property of that name), sort_key/sort_dir (created_at desc by default)
// and limit/marker paging with a next link.
func (a *API) list(w http.ResponseWriter, r *http.Request) {
	c, ok := a.caller(r)
	if !ok {
		fail(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	q := r.URL.Query()
	all, err := a.st.List()
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	keep, msg := filter(c, q)
	if msg != "" {
		fail(w, http.StatusBadRequest, msg)
		return
	}
	var ims []Image
	for _, im := range all {
		if keep(im) {
			ims = append(ims, im)
		}
	}
	key, dir := q.Get("sort_key"), q.Get("sort_dir")
	if key == "" {
		key = "created_at"
	}
	if dir == "" {
		dir = "desc"
	}
	less, ok := sortKeys[key]
	if !ok || dir != "asc" && dir != "desc" {
		fail(w, http.StatusBadRequest, "Invalid sort key or direction: "+key+" "+dir)
		return
	}
	slices.SortStableFunc(ims, func(x, y Image) int {
		n := less(x, y)
		if n == 0 {
			n = strings.Compare(x.ID, y.ID)
		}
		if dir == "desc" {
			n = -n
		}
		return n
	})
	if m := q.Get("marker"); m != "" {
		i := slices.IndexFunc(ims, func(im Image) bool { return im.ID == m })
		if i < 0 {
			fail(w, http.StatusBadRequest, "marker "+m+" could not be found.")
			return
		}
		ims = ims[i+1:]
	}
	out := map[string]any{"schema": "/v2/schemas/images", "first": "/v2/images"}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			fail(w, http.StatusBadRequest, "limit param must be an integer")
			return
		}
		if len(ims) > n {
			ims = ims[:n]
			if n > 0 {
				next := url.Values{}
				for k, v := range q {
					next[k] = v
				}
				next.Set("marker", ims[n-1].ID)
				out["next"] = "/v2/images?" + next.Encode()
			}
		}
	}
	views := make([]any, 0, len(ims))
	for _, im := range ims {
		views = append(views, view(im))
	}
	out["images"] = views
	writeJSON(w, http.StatusOK, out)
}

// listParams are the list's parameters other than property filters:
// any other name filters on the property of that name, as Glance's.
var listParams = map[string]bool{"name": true, "status": true, "visibility": true, "owner": true, "disk_format": true,
	"container_format": true, "tag": true, "size_min": true, "size_max": true, "protected": true, "os_hidden": true,
	"member_status": true, "sort_key": true, "sort_dir": true, "limit": true, "marker": true}

func hasProp(im Image, k string) bool {
	_, ok := im.Properties[k]
	return ok
}

// sortKeys are the sort keys Glance takes that keel keeps.
var sortKeys = map[string]func(x, y Image) int{
	"created_at": func(x, y Image) int { return x.CreatedAt.Compare(y.CreatedAt) },
	"updated_at": func(x, y Image) int { return x.UpdatedAt.Compare(y.UpdatedAt) },
	"name":       func(x, y Image) int { return strings.Compare(x.Name, y.Name) },
	"status":     func(x, y Image) int { return strings.Compare(x.Status, y.Status) },
	"id":         func(x, y Image) int { return strings.Compare(x.ID, y.ID) },
	"size": func(x, y Image) int {
		sz := func(im Image) int64 {
			if im.Size == nil {
				return -1
			}
			return *im.Size
		}
		return int(sz(x) - sz(y))
	},
	"disk_format":      func(x, y Image) int { return strings.Compare(x.DiskFormat, y.DiskFormat) },
	"container_format": func(x, y Image) int { return strings.Compare(x.ContainerFormat, y.ContainerFormat) },
}

// filter returns what keeps an image in a list for c and the query q
// (Glance's filters, member_status for shared images among them), or a
// message saying which filter is wrong.
func filter(c Caller, q url.Values) (func(Image) bool, string) {
	vis := q.Get("visibility")
	if vis != "" && vis != "all" && !slices.Contains(visibilities, vis) {
		return nil, "Invalid visibility value: " + vis
	}
	memberStatus := q.Get("member_status")
	if memberStatus == "" {
		memberStatus = MemberAccepted
	}
	if memberStatus != "all" && !slices.Contains(memberStatuses, memberStatus) {
		return nil, "Invalid status value: " + memberStatus
	}
	var sizeMin, sizeMax int64 = -1, -1
	for _, f := range []struct {
		name string
		into *int64
	}{{"size_min", &sizeMin}, {"size_max", &sizeMax}} {
		if s := q.Get(f.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return nil, f.name + " must be a non-negative integer"
			}
			*f.into = n
		}
	}
	eq := func(name, got string) bool { return !q.Has(name) || q.Get(name) == got }
	return func(im Image) bool {
		if !Visible(c, im) {
			return false
		}
		// A shared image c is a member of is listed while its membership
		// has the member_status asked for (accepted unless said).
		if m, member := im.Member(c.ProjectID); member && im.Visibility == "shared" && im.Owner != c.ProjectID &&
			memberStatus != "all" && m.Status != memberStatus {
			return false
		}
		switch {
		case vis == "" && im.Visibility == "community" && im.Owner != c.ProjectID:
			return false
		case vis != "" && vis != "all" && im.Visibility != vis:
			return false
		case !eq("name", im.Name), !eq("status", im.Status), !eq("owner", im.Owner),
			!eq("disk_format", im.DiskFormat), !eq("container_format", im.ContainerFormat),
			!eq("protected", strconv.FormatBool(im.Protected)):
			return false
		case q.Get("os_hidden") != "true" && im.Hidden, q.Get("os_hidden") == "true" && !im.Hidden:
			return false
		}
		for k, vs := range q {
			if !listParams[k] && (im.Properties[k] != vs[0] || vs[0] == "" && !hasProp(im, k)) {
				return false
			}
		}
		for _, t := range q["tag"] {
			if !slices.Contains(im.Tags, t) {
				return false
			}
		}
		if sizeMin >= 0 && (im.Size == nil || *im.Size < sizeMin) || sizeMax >= 0 && (im.Size == nil || *im.Size > sizeMax) {
			return false
		}
		return true
	}, ""
}
