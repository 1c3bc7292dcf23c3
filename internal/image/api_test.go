package image_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"

	"keel/internal/image"
)

// cloud is the image API on httptest over a store in a temporary
// directory, with the size cap given; X-Auth-Token names the caller
// (admin, demo or alt, each in a project of that name).
type cloud struct {
	dir string
	srv *httptest.Server
	st  *image.Store
}

func newCloud(t *testing.T, sizeCap int64) *cloud {
	t.Helper()
	dir := t.TempDir()
	st, err := image.NewStore(dir, sizeCap, nil)
	if err != nil {
		t.Fatal(err)
	}
	api := image.New(st, func(r *http.Request) (image.Caller, bool) {
		switch tok := r.Header.Get("X-Auth-Token"); tok {
		case "admin", "demo", "alt":
			return image.Caller{ProjectID: "p-" + tok, Admin: tok == "admin"}, true
		}
		return image.Caller{}, false
	})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &cloud{dir: dir, srv: srv, st: st}
}

// client is gophercloud's image client for a caller.
func (c *cloud) client(token string) *gophercloud.ServiceClient {
	pc := &gophercloud.ProviderClient{HTTPClient: *c.srv.Client()}
	pc.SetToken(token)
	return &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: c.srv.URL + "/image/", ResourceBase: c.srv.URL + "/image/v2/"}
}

// files lists the store directory's files, sorted.
func (c *cloud) files(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestGophercloudImageLifecycle: create (with properties), upload, show
// with Glance's size and hashes, download the same bytes, list with
// filters, delete (data and record gone); and Glance's answers for a
// second upload, a foreign project, a public image by a member, a
// read-only attribute and a missing format.
func TestGophercloudImageLifecycle(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 1<<20)
	demo := c.client("demo")
	im, err := images.Create(ctx, demo, images.CreateOpts{Name: "cirros", DiskFormat: "raw", ContainerFormat: "bare",
		Tags: []string{"b", "a"}, Properties: map[string]string{"os_distro": "cirros"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if im.Status != images.ImageStatusQueued || im.Owner != "p-demo" || im.Visibility != images.ImageVisibilityShared ||
		im.Properties["os_distro"] != "cirros" || !slices.Equal(im.Tags, []string{"a", "b"}) || im.SizeBytes != 0 {
		t.Fatalf("created: %+v", im)
	}
	data := bytes.Repeat([]byte("keel image data\n"), 4096) // 64 KiB
	if err := imagedata.Upload(ctx, demo, im.ID, bytes.NewReader(data)).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	got, err := images.Get(ctx, demo, im.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	md5sum, sha := md5.Sum(data), sha512.Sum512(data)
	if got.Status != images.ImageStatusActive || got.SizeBytes != int64(len(data)) || got.Checksum != hex.EncodeToString(md5sum[:]) {
		t.Fatalf("after upload: %+v", got)
	}
	var raw struct {
		Algo  string `json:"os_hash_algo"`
		Value string `json:"os_hash_value"`
	}
	if err := images.Get(ctx, demo, im.ID).ExtractInto(&raw); err != nil || raw.Algo != "sha512" || raw.Value != hex.EncodeToString(sha[:]) {
		t.Fatalf("hash: %+v %v", raw, err)
	}
	rd, err := imagedata.Download(ctx, demo, im.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("download: %d bytes, %v; want the %d uploaded", len(back), err, len(data))
	}
	err = imagedata.Upload(ctx, demo, im.ID, bytes.NewReader(data)).ExtractErr()
	if !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("a second upload: %v, want 409", err)
	}

	// Another project: the shared (unshared) image is not there for it.
	alt := c.client("alt")
	if _, err := images.Get(ctx, alt, im.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("another project's show: %v, want 404", err)
	}
	if err := images.Delete(ctx, alt, im.ID).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("another project's delete: %v, want 404", err)
	}
	public := images.ImageVisibilityPublic
	if _, err := images.Create(ctx, alt, images.CreateOpts{Name: "pub", Visibility: &public}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Errorf("a member's public image: %v, want 403", err)
	}
	pub, err := images.Create(ctx, c.client("admin"), images.CreateOpts{Name: "pub", Visibility: &public}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if err := imagedata.Upload(ctx, c.client("admin"), pub.ID, bytes.NewReader(data)).ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("an upload before disk_format and container_format: %v, want 400", err)
	}
	names := func(sc *gophercloud.ServiceClient, opts images.ListOpts) []string {
		t.Helper()
		pages, err := images.List(sc, opts).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ims, err := images.ExtractImages(pages)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, im := range ims {
			out = append(out, im.Name)
		}
		return out
	}
	if got := names(alt, images.ListOpts{}); !slices.Equal(got, []string{"pub"}) {
		t.Errorf("alt lists %v, want the public one", got)
	}
	if got := names(demo, images.ListOpts{SortKey: "name", SortDir: "asc"}); !slices.Equal(got, []string{"cirros", "pub"}) {
		t.Errorf("demo lists %v", got)
	}
	if got := names(demo, images.ListOpts{Status: images.ImageStatusActive, Tags: []string{"a"}}); !slices.Equal(got, []string{"cirros"}) {
		t.Errorf("demo lists active, tag a: %v", got)
	}
	if got := names(c.client("admin"), images.ListOpts{Limit: 1, SortKey: "name", SortDir: "asc"}); !slices.Equal(got, []string{"cirros", "pub"}) {
		t.Errorf("admin pages by one: %v", got)
	}
	req, _ := http.NewRequest("POST", c.srv.URL+"/image/v2/images", strings.NewReader(`{"name": "x", "status": "active"}`))
	req.Header.Set("X-Auth-Token", "demo")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a create naming status: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}

	if err := images.Delete(ctx, demo, im.ID).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := images.Get(ctx, demo, im.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("show after delete: %v, want 404", err)
	}
	for _, f := range c.files(t) {
		if strings.HasPrefix(f, im.ID) {
			t.Errorf("%s left behind by the delete", f)
		}
	}
}

// TestUploadFailuresLeaveNothing: an upload past the size cap (declared
// or streamed), and one cut short, leave the image queued with no data
// file and no partial file; the next upload then succeeds.
func TestUploadFailuresLeaveNothing(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 1000)
	demo := c.client("demo")
	im, err := images.Create(ctx, demo, images.CreateOpts{Name: "small", DiskFormat: "qcow2", ContainerFormat: "bare"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	queuedAlone := func(what string) {
		t.Helper()
		got, err := c.st.Get(im.ID)
		if err != nil || got.Status != image.StatusQueued || got.Size != nil || got.Checksum != "" {
			t.Errorf("after %s: %+v %v; want queued, no size or checksum", what, got, err)
		}
		if f := c.files(t); !slices.Equal(f, []string{im.ID + ".json"}) {
			t.Errorf("after %s the store holds %v, want the record only", what, f)
		}
	}
	// Declared too large: refused before reading.
	err = imagedata.Upload(ctx, demo, im.ID, bytes.NewReader(make([]byte, 1001))).ExtractErr()
	if !gophercloud.ResponseCodeIs(err, http.StatusRequestEntityTooLarge) {
		t.Errorf("1001 bytes past a cap of 1000: %v, want 413", err)
	}
	queuedAlone("a declared upload past the cap")
	// Streamed (chunked, no length): cut at the cap.
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(make([]byte, 600))
		_, _ = pw.Write(make([]byte, 600))
		pw.Close()
	}()
	err = imagedata.Upload(ctx, demo, im.ID, pr).ExtractErr()
	if !gophercloud.ResponseCodeIs(err, http.StatusRequestEntityTooLarge) {
		t.Errorf("a chunked upload past the cap: %v, want 413", err)
	}
	queuedAlone("a chunked upload past the cap")
	// Cut short: the client declares 900 bytes, sends 300 and ends its
	// side; it reads the server's answer to know it was handled.
	conn, err := net.Dial("tcp", strings.TrimPrefix(c.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, "PUT /image/v2/images/"+im.ID+"/file HTTP/1.1\r\nHost: x\r\nX-Auth-Token: demo\r\n"+
		"Content-Type: application/octet-stream\r\nContent-Length: 900\r\n\r\n"+strings.Repeat("x", 300))
	_ = conn.(*net.TCPConn).CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	answer, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.HasPrefix(string(answer), "HTTP/1.1 400") {
		t.Errorf("a cut upload answered %q, want 400", answer)
	}
	queuedAlone("an upload cut short")
	if err := imagedata.Upload(ctx, demo, im.ID, bytes.NewReader(make([]byte, 1000))).ExtractErr(); err != nil {
		t.Fatalf("an upload at the cap: %v", err)
	}
	if got, err := c.st.Get(im.ID); err != nil || got.Status != image.StatusActive || *got.Size != 1000 {
		t.Errorf("after the good upload: %+v %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(c.dir, im.ID)); err != nil {
		t.Errorf("the data: %v", err)
	}
	if _, err := c.st.Upload(im.ID, strings.NewReader("again")); !errors.Is(err, image.ErrStatus) {
		t.Errorf("Upload of an active image: %v, want ErrStatus", err)
	}
}
