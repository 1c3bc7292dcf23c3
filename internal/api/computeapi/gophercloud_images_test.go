package computeapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/testenv"
)

// TestGophercloudBootFromUploadedImage uploads an image to a real keel's
// image service (found in the token's catalog) and boots a server from
// it; an image still queued (no data) is refused, as Nova refuses an
// image it cannot use, as is another project's image; the built-in
// keel-fake is listed beside it.
func TestGophercloudBootFromUploadedImage(t *testing.T) {
	ctx := testenv.Context(t)
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.80")
	ic, err := openstack.NewImageV2(sc.ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := images.Create(ctx, ic, images.CreateOpts{Name: "empty", DiskFormat: "raw", ContainerFormat: "bare"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	up, err := images.Create(ctx, ic, images.CreateOpts{Name: "uploaded", DiskFormat: "raw", ContainerFormat: "bare"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if err := imagedata.Upload(ctx, ic, up.ID, bytes.NewReader(make([]byte, 4096))).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	pages, err := images.List(ic, images.ListOpts{SortKey: "name", SortDir: "asc"}).AllPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all, err := images.ExtractImages(pages)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, im := range all {
		names = append(names, im.Name+":"+string(im.Status))
	}
	if got := strings.Join(names, " "); got != "empty:queued keel-fake:active uploaded:active" {
		t.Errorf("images: %s", got)
	}
	fl, err := cl.FindFlavor(ctx, "m1.tiny")
	if err != nil {
		t.Fatal(err)
	}
	_, err = servers.Create(ctx, sc, servers.CreateOpts{Name: "nodata", FlavorRef: fl.ID, ImageRef: queued.ID, Networks: "none"}, nil).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("a server from a queued image: %v, want 400", err)
	}
	// The image is the admin project's (visibility shared, no members):
	// another project neither sees it nor boots from it.
	demo, err := client.Connect(ctx, client.Options{Cloud: "keel-demo", ConfigFile: cloud.CloudsYAML})
	if err != nil {
		t.Fatal(err)
	}
	_, err = servers.Create(ctx, demo.ComputeClient(), servers.CreateOpts{Name: "theirs", FlavorRef: fl.ID, ImageRef: up.ID, Networks: "none"}, nil).Extract()
	if !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("another project's server from the admin's image: %v, want 400", err)
	}
	s, err := servers.Create(ctx, sc, servers.CreateOpts{Name: "vm1", FlavorRef: fl.ID, ImageRef: up.ID, Networks: "none"}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cl.WaitServer(ctx, s.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" })
	if err != nil || srv.Status != "ACTIVE" {
		t.Fatalf("a server from the uploaded image: %+v %v", srv, err)
	}
	got, err := servers.Get(ctx, sc, s.ID).Extract()
	if err != nil || got.Image["id"] != up.ID {
		t.Errorf("the server's image: %v %v, want %s", got.Image, err, up.ID)
	}
}
