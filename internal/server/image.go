package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"

	"keel/internal/api/computeapi"
	"keel/internal/compute"
	"keel/internal/config"
	"keel/internal/identity"
	"keel/internal/image"
	"keel/internal/rpc"
	"keel/internal/store"
)

// builtinImage is the image every keel cloud has: clients
// (openstackclient's `server create --image`, Tempest's image_ref) need
// one before anyone uploaded any, and the fake hypervisors boot
// anything. Public and protected; its data is 1 MiB of zeros (less if
// image_size_cap is smaller).
var builtinImage = image.Image{ID: compute.BuiltinImageID, Name: "keel-fake",
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

// bootImage returns what the compute API checks of the image id names
// before a boot, and whether it is an active image the caller (the
// request's principal in ctx) sees: a server can boot from it. Another
// project's private image is not found, as Glance hides it from Nova.
func bootImage(ctx context.Context, st *image.Store, id string) (computeapi.BootImage, bool) {
	p, ok := identity.PrincipalFrom(ctx)
	if !ok {
		return computeapi.BootImage{}, false
	}
	im, err := st.Get(id)
	if err != nil || im.Status != image.StatusActive || !image.Visible(image.Caller{ProjectID: p.ProjectID, Admin: p.IsAdmin()}, im) {
		return computeapi.BootImage{}, false
	}
	b := computeapi.BootImage{MinRAMMB: im.MinRAM, MinDiskGB: im.MinDisk, Properties: im.Properties}
	if im.Size != nil {
		b.Size = *im.Size
	}
	return b, true
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

// imageReader serves the agents' read_image calls from the image store.
type imageReader struct{ st *image.Store }

var _ rpc.ImageReader = imageReader{}

// ReadImage implements rpc.ImageReader: an image that is not active (or
// not there) is not found.
func (r imageReader) ReadImage(_ context.Context, id string, offset int64, p []byte) (compute.ImageInfo, int, error) {
	im, err := r.st.Get(id)
	if err != nil || im.Status != image.StatusActive || im.Size == nil {
		return compute.ImageInfo{}, 0, fmt.Errorf("image %s: no active image (%v): %w", id, err, store.ErrNotFound)
	}
	info := compute.ImageInfo{ID: id, DiskFormat: im.DiskFormat, Size: *im.Size, Checksum: im.Checksum}
	f, err := r.st.Open(id)
	if err != nil {
		return info, 0, fmt.Errorf("image %s: %w", id, err)
	}
	defer f.Close()
	n, err := f.ReadAt(p, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return info, n, fmt.Errorf("reading image %s: %w", id, err)
	}
	return info, n, nil
}
