package computeapi

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"keel/internal/image"
)

// imagesAPI serves /images: Nova's image proxy, up to 2.35 (404 from
// 2.36; the metadata calls up to 2.38, 404 from 2.39), over keel's image
// service as the caller sees it there.
type imagesAPI struct {
	links
	images *image.Store
	// imageURL is the image service's base URL (the alternate links).
	imageURL string
}

// imageRoutes adds the image proxy's routes.
func (a *imagesAPI) imageRoutes(route func(string, bool, func(http.ResponseWriter, *http.Request) error)) {
	route("GET /compute/v2.1/images", false, a.proxied(36, a.listImages(false)))
	route("GET /compute/v2.1/images/detail", false, a.proxied(36, a.listImages(true)))
	route("GET /compute/v2.1/images/{id}", false, a.proxied(36, a.showImage))
	route("DELETE /compute/v2.1/images/{id}", false, a.proxied(36, a.deleteImage))
	route("GET /compute/v2.1/images/{id}/metadata", false, a.proxied(39, a.listImageMetadata))
	route("POST /compute/v2.1/images/{id}/metadata", false, a.proxied(39, a.setImageMetadata(false)))
	route("PUT /compute/v2.1/images/{id}/metadata", false, a.proxied(39, a.setImageMetadata(true)))
	route("GET /compute/v2.1/images/{id}/metadata/{key}", false, a.proxied(39, a.showImageMetadataItem))
	route("PUT /compute/v2.1/images/{id}/metadata/{key}", false, a.proxied(39, a.putImageMetadataItem))
	route("DELETE /compute/v2.1/images/{id}/metadata/{key}", false, a.proxied(39, a.deleteImageMetadataItem))
}

// proxied refuses a proxy call from the microversion Nova removed it at
// (2.36 for the images, 2.39 for their metadata: 404, as Nova) and
// without an image service.
func (a *imagesAPI) proxied(removedAt int, h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if version(r).AtLeast(removedAt) || a.images == nil {
			return notFound("The resource could not be found.")
		}
		return h(w, r)
	}
}

func imageCaller(r *http.Request) image.Caller {
	c := caller(r)
	return image.Caller{ProjectID: c.ProjectID, Admin: c.Admin}
}

// find reads image id as the caller sees it: 404 "Image not found." if
// it does not.
func (a *imagesAPI) find(r *http.Request, id string) (image.Image, error) {
	im, err := a.images.Get(id)
	if errors.Is(err, image.ErrNotFound) || err == nil && !image.Visible(imageCaller(r), im) {
		return image.Image{}, notFound("Image not found.")
	}
	return im, err
}

// owned is find for a change: the owner (or an admin) only, else 403 as
// Glance answers Nova.
func (a *imagesAPI) owned(r *http.Request, id string) (image.Image, error) {
	im, err := a.find(r, id)
	if err != nil {
		return im, err
	}
	c := imageCaller(r)
	if !c.Admin && im.Owner != c.ProjectID {
		return im, &apiError{http.StatusForbidden, "You are not authorized to access image " + id + "."}
	}
	return im, nil
}

// novaImageStatus is Nova's status of a Glance status, and its progress.
func novaImageStatus(status string) (string, int) {
	switch status {
	case image.StatusActive:
		return "ACTIVE", 100
	case image.StatusSaving:
		return "SAVING", 50
	case image.StatusQueued:
		return "SAVING", 25
	}
	return "UNKNOWN", 0
}

func (a *imagesAPI) imageLinks(id string) []map[string]string {
	return append(a.link("images", id), map[string]string{
		"rel": "alternate", "type": "application/vnd.openstack.image", "href": a.imageURL + "/images/" + id,
	})
}

// imageView is an image as Nova's proxy shows it: summary (id, name,
// links) or detail.
func (a *imagesAPI) imageView(im image.Image, detail bool) map[string]any {
	v := map[string]any{"id": im.ID, "name": im.Name, "links": a.imageLinks(im.ID)}
	if !detail {
		return v
	}
	status, progress := novaImageStatus(im.Status)
	meta := maps.Clone(im.Properties)
	if meta == nil {
		meta = map[string]string{}
	}
	v["minRam"], v["minDisk"], v["metadata"] = im.MinRAM, im.MinDisk, meta
	v["status"], v["progress"] = status, progress
	v["created"], v["updated"] = im.CreatedAt.UTC().Format(time.RFC3339), im.UpdatedAt.UTC().Format(time.RFC3339)
	var size any
	if im.Size != nil {
		size = *im.Size
	}
	v["OS-EXT-IMG-SIZE:size"] = size
	if server := im.Properties["instance_uuid"]; server != "" {
		v["server"] = map[string]any{"id": server, "links": a.link("servers", server)}
	}
	return v
}

// listImages is GET /images[/detail]: the images the caller sees, with
// Nova's filters (name, status, changes-since, server, type, minRam,
// minDisk) and limit/marker paging, newest first.
func (a *imagesAPI) listImages(detail bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		q := r.URL.Query()
		all, err := a.images.List()
		if err != nil {
			return err
		}
		var since time.Time
		if s := q.Get("changes-since"); s != "" {
			if since, err = time.Parse(time.RFC3339, s); err != nil {
				return badRequest("Invalid filter field: changes-since.")
			}
		}
		num := func(name string) (int64, error) {
			if !q.Has(name) {
				return -1, nil
			}
			n, err := strconv.ParseInt(q.Get(name), 10, 64)
			if err != nil || n < 0 {
				return 0, badRequest("Invalid filter field: " + name + ".")
			}
			return n, nil
		}
		minRAM, err := num("minRam")
		if err != nil {
			return err
		}
		minDisk, err := num("minDisk")
		if err != nil {
			return err
		}
		c := imageCaller(r)
		var ims []image.Image
		for _, im := range all {
			status, _ := novaImageStatus(im.Status)
			server := q.Get("server")
			server = server[strings.LastIndex(server, "/")+1:]
			switch {
			case !image.Visible(c, im), im.Hidden,
				im.Visibility == "community" && im.Owner != c.ProjectID,
				q.Has("name") && im.Name != q.Get("name"),
				q.Has("status") && !strings.EqualFold(q.Get("status"), status),
				!since.IsZero() && im.UpdatedAt.Before(since),
				q.Has("server") && im.Properties["instance_uuid"] != server,
				q.Has("type") && im.Properties["image_type"] != q.Get("type"),
				minRAM >= 0 && im.MinRAM < minRAM, minDisk >= 0 && im.MinDisk < minDisk:
				continue
			}
			if m, ok := im.Member(c.ProjectID); ok && im.Owner != c.ProjectID && m.Status != image.MemberAccepted {
				continue
			}
			ims = append(ims, im)
		}
		slices.SortStableFunc(ims, func(x, y image.Image) int {
			if n := y.CreatedAt.Compare(x.CreatedAt); n != 0 {
				return n
			}
			return strings.Compare(y.ID, x.ID)
		})
		if m := q.Get("marker"); m != "" {
			i := slices.IndexFunc(ims, func(im image.Image) bool { return im.ID == m })
			if i < 0 {
				return badRequest("marker [" + m + "] not found")
			}
			ims = ims[i+1:]
		}
		out := map[string]any{}
		if l := q.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 0 {
				return badRequest("limit param must be an integer")
			}
			if len(ims) > n {
				ims = ims[:n]
				if n > 0 {
					next := r.URL.Query()
					next.Set("marker", ims[n-1].ID)
					path := "images"
					if detail {
						path = "images/detail"
					}
					out["images_links"] = []map[string]string{{"rel": "next", "href": a.baseURL + "/v2.1/" + path + "?" + next.Encode()}}
				}
			}
		}
		views := make([]any, 0, len(ims))
		for _, im := range ims {
			views = append(views, a.imageView(im, detail))
		}
		out["images"] = views
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

// showImage is GET /images/{id}.
func (a *imagesAPI) showImage(w http.ResponseWriter, r *http.Request) error {
	im, err := a.find(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"image": a.imageView(im, true)})
	return nil
}

// deleteImage is DELETE /images/{id}: the owner's (or an admin's),
// unless protected (403). Servers booted from it keep running and keep
// naming it, as with Nova and Glance.
func (a *imagesAPI) deleteImage(w http.ResponseWriter, r *http.Request) error {
	im, err := a.owned(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if im.Protected {
		return &apiError{http.StatusForbidden, "Image " + im.ID + " is protected and cannot be deleted."}
	}
	if err := a.images.Delete(im.ID); errors.Is(err, image.ErrNotFound) {
		return notFound("Image not found.")
	} else if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listImageMetadata is GET /images/{id}/metadata: the image's properties.
func (a *imagesAPI) listImageMetadata(w http.ResponseWriter, r *http.Request) error {
	im, err := a.find(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"metadata": orEmpty(im.Properties)})
	return nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// maxImageMetadata is Nova's metadata_items quota default, which bounds
// an image's properties through the proxy.
const maxImageMetadata = 128

// readImageMeta reads a metadata body ({"metadata": {…}} or, for one
// item, {"meta": {…}}): string keys of 1 to 255 characters, string values
// up to 255.
func readImageMeta(r *http.Request, key string) (map[string]string, error) {
	var body map[string]map[string]any
	if err := decode(r, &body); err != nil {
		return nil, err
	}
	raw, ok := body[key]
	if !ok {
		return nil, badRequest("Malformed request body")
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		s, isStr := v.(string)
		if !isStr || k == "" || len(k) > 255 || len(s) > 255 {
			return nil, badRequest("Invalid metadata: keys and values must be strings of at most 255 characters, keys not empty")
		}
		out[k] = s
	}
	return out, nil
}

// changeMetadata applies fn to the properties of the caller's image id
// and stores them, within metadata_items.
func (a *imagesAPI) changeMetadata(r *http.Request, id string, fn func(props map[string]string) error) (image.Image, error) {
	if _, err := a.owned(r, id); err != nil {
		return image.Image{}, err
	}
	out, err := a.images.Update(id, func(im *image.Image) error {
		props := maps.Clone(im.Properties)
		if props == nil {
			props = map[string]string{}
		}
		if err := fn(props); err != nil {
			return err
		}
		if len(props) > maxImageMetadata {
			return &apiError{http.StatusForbidden, "Quota exceeded for metadata_items: Requested " + strconv.Itoa(len(props)) + ", but already used 0 of " + strconv.Itoa(maxImageMetadata) + " metadata_items"}
		}
		im.Properties = props
		if len(props) == 0 {
			im.Properties = nil
		}
		return nil
	})
	if errors.Is(err, image.ErrNotFound) {
		return out, notFound("Image not found.")
	}
	return out, err
}

// setImageMetadata is POST (merge) or PUT (replace) /images/{id}/metadata.
func (a *imagesAPI) setImageMetadata(replace bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		meta, err := readImageMeta(r, "metadata")
		if err != nil {
			return err
		}
		im, err := a.changeMetadata(r, r.PathValue("id"), func(props map[string]string) error {
			if replace {
				clear(props)
			}
			maps.Copy(props, meta)
			return nil
		})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"metadata": orEmpty(im.Properties)})
		return nil
	}
}

// showImageMetadataItem is GET /images/{id}/metadata/{key}.
func (a *imagesAPI) showImageMetadataItem(w http.ResponseWriter, r *http.Request) error {
	im, err := a.find(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	v, ok := im.Properties[key]
	if !ok {
		return notFound("Image " + im.ID + " has no metadata item " + key + ".")
	}
	writeJSON(w, http.StatusOK, map[string]any{"meta": map[string]string{key: v}})
	return nil
}

// putImageMetadataItem is PUT /images/{id}/metadata/{key} {"meta":
// {key: value}}: the body names the path's key only.
func (a *imagesAPI) putImageMetadataItem(w http.ResponseWriter, r *http.Request) error {
	key := r.PathValue("key")
	meta, err := readImageMeta(r, "meta")
	if err != nil {
		return err
	}
	if _, ok := meta[key]; !ok {
		return badRequest("Request body and URI mismatch")
	}
	if len(meta) > 1 {
		return badRequest("Request body contains too many items")
	}
	if _, err := a.changeMetadata(r, r.PathValue("id"), func(props map[string]string) error {
		props[key] = meta[key]
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"meta": meta})
	return nil
}

// deleteImageMetadataItem is DELETE /images/{id}/metadata/{key}.
func (a *imagesAPI) deleteImageMetadataItem(w http.ResponseWriter, r *http.Request) error {
	key := r.PathValue("key")
	if _, err := a.changeMetadata(r, r.PathValue("id"), func(props map[string]string) error {
		if _, ok := props[key]; !ok {
			return notFound("Image " + r.PathValue("id") + " has no metadata item " + key + ".")
		}
		delete(props, key)
		return nil
	}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
