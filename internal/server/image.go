package server

import (
	"net/http"
	"strings"
)

// fakeImage is the one image keel offers: its fake hypervisors boot
// anything, and clients (openstackclient's `server create --image`) look
// an image up before they boot. The image API proper is not keel's.
var fakeImage = map[string]any{
	"id": "7f3b0d5e-6a2c-4c1e-9a55-000000000001", "name": "keel-fake", "status": "active",
	"visibility": "public", "disk_format": "raw", "container_format": "bare",
	"min_disk": 0, "min_ram": 0, "size": 1 << 20, "protected": false,
	"created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
	"self": "/v2/images/7f3b0d5e-6a2c-4c1e-9a55-000000000001", "schema": "/v2/schemas/image", "tags": []string{},
}

// imageRoutes serves the minimal image list under /image/v2.
func imageRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /image/v2/images", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		images := []any{}
		if name == "" || name == fakeImage["name"] {
			images = append(images, fakeImage)
		}
		writeJSON(w, http.StatusOK, map[string]any{"images": images, "schema": "/v2/schemas/images", "first": "/v2/images"})
	})
	mux.HandleFunc("GET /image/v2/images/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if id != fakeImage["id"] && !strings.EqualFold(id, fakeImage["name"].(string)) {
			http.Error(w, "404 Not Found: no image with ID "+id, http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, fakeImage)
	})
}

// imageVersions is the image service's version document, which
// keystoneauth reads (without a token) before it uses the image endpoint.
func imageVersions(baseURL string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusMultipleChoices, map[string]any{"versions": []any{map[string]any{
			"id": "v2.0", "status": "CURRENT",
			"links": []any{map[string]any{"rel": "self", "href": baseURL + "/image/v2/"}},
		}}})
	}
}
