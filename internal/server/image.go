package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"

	"keel/internal/config"
	"keel/internal/identity"
	"keel/internal/image"
)

// builtinImage is the image every keel cloud has: clients
// (openstackclient's `server create --image`, Tempest's image_ref) need
// one before anyone uploaded any, and the fake hypervisors boot
// anything. Public and protected; its data is 1 MiB of zeros (less if
// image_size_cap is smaller).
var builtinImage = image.Image{ID: "7f3b0d5e-6a2c-4c1e-9a55-000000000001", Name: "keel-fake",
	Visibility: "public", Protected: true, DiskFormat: "raw", ContainerFormat: "bare"}

// openImages opens the image store at [keel] image_dir (DATA_DIR/images
// unless set), queues again the uploads a crash left unfinished (logged)
// and makes sure the built-in image is there (replicas sharing the
// directory may race to add it: the one that loses finds it).
func openImages(cfg config.KeelGroup, log *slog.Logger) (*image.Store, error) {
	dir := cfg.ImageDir
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "images")
	}
	st, err := image.NewStore(dir, int64(cfg.ImageSizeCap), nil)
	if err != nil {
		return nil, err
	}
	swept, err := st.Sweep()
	if err != nil {
		return nil, err
	}
	if len(swept.Requeued) > 0 || len(swept.Removed) > 0 {
		log.Warn("image store: uploads a crash interrupted cleared", "dir", dir,
			"requeued", swept.Requeued, "removed", swept.Removed)
	}
	im, err := st.Get(builtinImage.ID)
	if errors.Is(err, image.ErrNotFound) {
		im, err = st.Create(builtinImage)
		if errors.Is(err, image.ErrExists) {
			im, err = st.Get(builtinImage.ID)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the built-in image: %w", err)
	}
	if im.Status == image.StatusQueued {
		_, err := st.Upload(im.ID, bytes.NewReader(make([]byte, min(1<<20, cfg.ImageSizeCap))))
		if err != nil && !errors.Is(err, image.ErrBusy) && !errors.Is(err, image.ErrStatus) {
			return nil, fmt.Errorf("the built-in image's data: %w", err)
		}
	}
	return st, nil
}

// imageAPI is Glance's v2 API over st, the caller from the token.
func imageAPI(st *image.Store) http.Handler {
	return image.New(st, func(r *http.Request) (image.Caller, bool) {
		p, ok := identity.PrincipalFrom(r.Context())
		return image.Caller{ProjectID: p.ProjectID, Admin: p.IsAdmin()}, ok
	})
}

// imageUsable reports whether id names an active image the caller (the
// request's principal in ctx) sees: a server can boot from it. Another
// project's private image is not found, as Glance hides it from Nova.
func imageUsable(ctx context.Context, st *image.Store, id string) bool {
	p, ok := identity.PrincipalFrom(ctx)
	if !ok {
		return false
	}
	im, err := st.Get(id)
	return err == nil && im.Status == image.StatusActive && image.Visible(image.Caller{ProjectID: p.ProjectID, Admin: p.IsAdmin()}, im)
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
