package computeapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/flavors"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/compute"
	"keel/internal/lifecycle"
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

// TestImageProxyBelow236: Nova's image proxy over keel's image service —
// list (summary and detail, Nova's statuses and progress, filters, paging),
// show, the metadata calls, a protected image's delete refused, an image
// in use deleted (the server keeps running and naming it), another
// project's image not found; all 404 from 2.36 (the metadata calls from
// 2.39).
func TestImageProxyBelow236(t *testing.T) {
	ctx := testenv.Context(t)
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	cl := cloud.Connect(t)
	sc, sc36 := computeAt(cl, "2.35"), computeAt(cl, "2.36")
	ic, err := openstack.NewImageV2(sc.ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := images.Create(ctx, ic, images.CreateOpts{Name: "empty", DiskFormat: "raw", ContainerFormat: "bare", MinRAM: 64}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	up, err := images.Create(ctx, ic, images.CreateOpts{Name: "uploaded", DiskFormat: "raw", ContainerFormat: "bare",
		Properties: map[string]string{"os_distro": "debian"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if err := imagedata.Upload(ctx, ic, up.ID, bytes.NewReader(make([]byte, 4096))).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	type novaImage struct {
		ID, Name, Status string
		Progress         int
		MinRAM           int               `json:"minRam"`
		Metadata         map[string]string `json:"metadata"`
		Size             *int64            `json:"OS-EXT-IMG-SIZE:size"`
		Links            []struct{ Rel, Href, Type string }
	}
	get := func(sc *gophercloud.ServiceClient, path string, out any) int {
		t.Helper()
		resp, err := sc.Get(ctx, sc.ServiceURL(strings.Split(path, "/")...), out, &gophercloud.RequestOpts{OkCodes: []int{200}})
		if err != nil {
			var e gophercloud.ErrUnexpectedResponseCode
			if errors.As(err, &e) {
				return e.Actual
			}
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	var list struct {
		Images []novaImage
		Links  []struct{ Rel, Href string } `json:"images_links"`
	}
	if st := get(sc, "images/detail", &list); st != 200 {
		t.Fatalf("images/detail: %d", st)
	}
	byName := map[string]novaImage{}
	for _, im := range list.Images {
		byName[im.Name] = im
	}
	if e := byName["empty"]; e.Status != "SAVING" || e.Progress != 25 || e.MinRAM != 64 || e.Size != nil {
		t.Errorf("the queued image through the proxy: %+v", e)
	}
	if u := byName["uploaded"]; u.Status != "ACTIVE" || u.Progress != 100 || u.Size == nil || *u.Size != 4096 ||
		u.Metadata["os_distro"] != "debian" || len(u.Links) != 3 || u.Links[2].Rel != "alternate" {
		t.Errorf("the uploaded image through the proxy: %+v", u)
	}
	if _, ok := byName["keel-fake"]; !ok || len(list.Images) != 3 {
		t.Errorf("images/detail: %d images %v", len(list.Images), byName)
	}
	if st := get(sc, "images?status=ACTIVE&limit=1", &list); st != 200 || len(list.Images) != 1 || len(list.Links) != 1 {
		t.Errorf("images?status=ACTIVE&limit=1: %d %+v", st, list)
	}
	var one struct{ Image novaImage }
	if st := get(sc, "images/"+queued.ID, &one); st != 200 || one.Image.Name != "empty" {
		t.Errorf("images/%s: %d %+v", queued.ID, st, one)
	}
	if st := get(sc36, "images", nil); st != 404 {
		t.Errorf("images at 2.36: %d, want 404", st)
	}
	if st := get(computeAt(cl, "2.38"), "images/"+up.ID+"/metadata", nil); st != 200 {
		t.Errorf("image metadata at 2.38: %d, want 200", st)
	}
	if st := get(computeAt(cl, "2.39"), "images/"+up.ID+"/metadata", nil); st != 404 {
		t.Errorf("image metadata at 2.39: %d, want 404", st)
	}
	demo, err := client.Connect(ctx, client.Options{Cloud: "keel-demo", ConfigFile: cloud.CloudsYAML})
	if err != nil {
		t.Fatal(err)
	}
	if st := get(computeAt(demo, "2.35"), "images/"+up.ID, nil); st != 404 {
		t.Errorf("another project's image: %d, want 404", st)
	}

	// Metadata: merge, one item set, read and deleted, replace.
	call := func(method, path string, body any, want int) map[string]map[string]string {
		t.Helper()
		var out map[string]map[string]string
		opts := &gophercloud.RequestOpts{JSONBody: body, OkCodes: []int{want}}
		if want < 300 {
			opts.JSONResponse = &out
		}
		resp, err := sc.Request(ctx, method, sc.ServiceURL(strings.Split(path, "/")...), opts)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return out
	}
	meta := "images/" + up.ID + "/metadata"
	if got := call("POST", meta, map[string]any{"metadata": map[string]string{"a": "1"}}, 200); got["metadata"]["a"] != "1" || got["metadata"]["os_distro"] != "debian" {
		t.Errorf("metadata merge: %v", got)
	}
	if got := call("PUT", meta+"/b", map[string]any{"meta": map[string]string{"b": "2"}}, 200); got["meta"]["b"] != "2" {
		t.Errorf("metadata item set: %v", got)
	}
	call("PUT", meta+"/b", map[string]any{"meta": map[string]string{"c": "2"}}, 400)
	if got := call("GET", meta+"/b", nil, 200); got["meta"]["b"] != "2" {
		t.Errorf("metadata item: %v", got)
	}
	call("DELETE", meta+"/b", nil, 204)
	call("GET", meta+"/b", nil, 404)
	if got := call("PUT", meta, map[string]any{"metadata": map[string]string{"only": "x"}}, 200); len(got["metadata"]) != 1 || got["metadata"]["only"] != "x" {
		t.Errorf("metadata replace: %v", got)
	}
	if got, err := images.Get(ctx, ic, up.ID).Extract(); err != nil || got.Properties["only"] != "x" || got.Properties["a"] != nil {
		t.Errorf("the image service after the proxy's metadata calls: %+v %v", got, err)
	}

	// keel-fake is protected; an image in use is deleted and its server
	// keeps running, still naming it.
	call("DELETE", "images/7f3b0d5e-6a2c-4c1e-9a55-000000000001", nil, 403)
	fl, err := cl.FindFlavor(ctx, "m1.tiny")
	if err != nil {
		t.Fatal(err)
	}
	s, err := servers.Create(ctx, sc, servers.CreateOpts{Name: "vm1", FlavorRef: fl.ID, ImageRef: up.ID, Networks: "none"}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if srv, err := cl.WaitServer(ctx, s.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" }); err != nil || srv.Status != "ACTIVE" {
		t.Fatalf("a server from the uploaded image: %+v %v", srv, err)
	}
	call("DELETE", "images/"+up.ID, nil, 204)
	call("GET", "images/"+up.ID, nil, 404)
	if got, err := servers.Get(ctx, sc, s.ID).Extract(); err != nil || got.Status != "ACTIVE" || got.Image["id"] != up.ID {
		t.Errorf("the server after its image was deleted: %+v %v", got, err)
	}
}

// TestGophercloudCreateImageAndBackup snapshots a server booted from an
// uploaded image as Nova does: createImage answers 202 with the image
// queued (SAVING in the compute API's proxy) and the server in task
// image_snapshot, so a second snapshot is 409; once the host's capture
// is stored the image is active with the fake driver's synthetic raw
// data, its checksum, Nova's properties and the base image's, and the
// server's task is cleared. createBackup rotates; a snapshot whose
// capture fails, and one whose image is deleted while it is saved, end
// with the server as it was and no image left. Before, the snapshot was
// active when the call returned and held the base image's data.
func TestGophercloudCreateImageAndBackup(t *testing.T) {
	ctx := testenv.Context(t)
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	cl := cloud.Connect(t)
	sc44, sc45 := computeAt(cl, "2.44"), computeAt(cl, "2.45")
	ic, err := openstack.NewImageV2(sc44.ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	base, err := images.Create(ctx, ic, images.CreateOpts{Name: "base", DiskFormat: "qcow2", ContainerFormat: "bare",
		Properties: map[string]string{"os_distro": "debian"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("disk"), 1024)
	if err := imagedata.Upload(ctx, ic, base.ID, bytes.NewReader(data)).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	fl, err := cl.FindFlavor(ctx, "m1.tiny")
	if err != nil {
		t.Fatal(err)
	}
	s, err := servers.Create(ctx, sc44, servers.CreateOpts{Name: "vm1", FlavorRef: fl.ID, ImageRef: base.ID, Networks: "none"}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	settled := func() client.Server {
		t.Helper()
		var srv client.Server
		testenv.Poll(t, "the server settled", func() error {
			var err error
			if srv, err = cl.GetServer(ctx, s.ID); err != nil {
				return err
			}
			if srv.Status == "BUILD" || srv.TaskState != "" {
				return fmt.Errorf("status %s, task %q", srv.Status, srv.TaskState)
			}
			return nil
		})
		return srv
	}
	if srv := settled(); srv.Status != "ACTIVE" {
		t.Fatalf("boot: %+v", srv)
	}
	action := func(sc *gophercloud.ServiceClient, body any, want int) (*http.Response, map[string]any) {
		t.Helper()
		var out map[string]any
		opts := &gophercloud.RequestOpts{JSONBody: body, OkCodes: []int{want}, KeepResponseBody: true}
		resp, err := sc.Post(ctx, sc.ServiceURL("servers", s.ID, "action"), body, nil, opts)
		if err != nil {
			t.Fatalf("%v: %v", body, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &out)
		return resp, out
	}
	waitImage := func(id string) images.Image {
		t.Helper()
		var im *images.Image
		testenv.Poll(t, "image "+id+" active", func() error {
			var err error
			if im, err = images.Get(ctx, ic, id).Extract(); err != nil {
				return err
			}
			if im.Status != images.ImageStatusActive {
				return fmt.Errorf("status %s", im.Status)
			}
			return nil
		})
		return *im
	}
	gone := func(id string) {
		t.Helper()
		testenv.Poll(t, "image "+id+" deleted", func() error {
			_, err := images.Get(ctx, ic, id).Extract()
			if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	}
	drv := cloud.Driver(t, cloud.Hosts[0])

	release := drv.HoldSnapshots()
	resp, _ := action(sc44, map[string]any{"createImage": map[string]any{"name": "snap1", "metadata": map[string]string{"purpose": "test"}}}, 202)
	loc := resp.Header.Get("Location")
	snapID := loc[strings.LastIndex(loc, "/")+1:]
	if srv, err := cl.GetServer(ctx, s.ID); err != nil || srv.TaskState != "image_snapshot" {
		t.Errorf("the server while its snapshot is held: %+v %v, want task image_snapshot", srv, err)
	}
	if im, err := images.Get(ctx, ic, snapID).Extract(); err != nil || im.Status != images.ImageStatusQueued {
		t.Errorf("the snapshot at %q while held: %+v %v, want queued", loc, im, err)
	}
	if _, out := action(sc45, map[string]any{"createImage": map[string]any{"name": "second"}}, 409); !strings.Contains(fmt.Sprint(out), "while it is in task_state image_snapshot") {
		t.Errorf("a second snapshot while the first is saved: %v", out)
	}
	release()
	snap := waitImage(snapID)
	if srv := settled(); srv.Status != "ACTIVE" {
		t.Errorf("after the snapshot: %+v", srv)
	}
	if snap.Name != "snap1" || snap.Visibility != images.ImageVisibilityPrivate || snap.DiskFormat != "raw" ||
		snap.SizeBytes == 0 || snap.Checksum == "" || snap.Properties["image_type"] != "snapshot" ||
		snap.Properties["instance_uuid"] != s.ID || snap.Properties["base_image_ref"] != base.ID ||
		snap.Properties["os_distro"] != "debian" || snap.Properties["purpose"] != "test" {
		t.Errorf("the snapshot: %+v", snap)
	}
	var got bytes.Buffer
	if r, err := imagedata.Download(ctx, ic, snapID).Extract(); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.Copy(&got, r)
		r.Close()
	}
	if !strings.Contains(got.String(), "keel fake disk of "+s.ID) || int64(got.Len()) != snap.SizeBytes {
		t.Errorf("the snapshot's data (%d bytes): %.80q", got.Len(), got.String())
	}
	_, out := action(sc45, map[string]any{"createImage": map[string]any{"name": "snap2", "metadata": map[string]string{"image_type": "test"}}}, 202)
	if id, _ := out["image_id"].(string); id == "" {
		t.Errorf("createImage at 2.45: %v, want an image_id", out)
	} else if snap2 := waitImage(id); snap2.Properties["image_type"] != "test" {
		t.Errorf("a snapshot whose metadata names image_type: %+v, want the request's over Nova's", snap2)
	}
	settled()
	action(sc45, map[string]any{"createImage": map[string]any{}}, 400)

	backups := func() []string {
		t.Helper()
		pages, err := images.List(ic, images.ListOpts{SortKey: "created_at", SortDir: "desc"}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, err := images.ExtractImages(pages)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, im := range all {
			if im.Properties["image_type"] == "backup" {
				out = append(out, im.ID)
			}
		}
		slices.Sort(out)
		return out
	}
	var made []string
	for range 3 {
		_, out := action(sc45, map[string]any{"createBackup": map[string]any{"name": "b", "backup_type": "daily", "rotation": 2}}, 202)
		id, _ := out["image_id"].(string)
		made = append(made, id)
		waitImage(id)
		settled()
	}
	want := slices.Clone(made[1:])
	slices.Sort(want)
	if got := backups(); !slices.Equal(got, want) {
		t.Errorf("backups after 3 with rotation 2: %v, want the last two %v", got, want)
	}
	if resp, _ := action(sc44, map[string]any{"createBackup": map[string]any{"name": "b", "backup_type": "daily", "rotation": "0"}}, 202); resp.Header.Get("Location") != "" {
		t.Errorf("a backup rotated away at once has a Location: %s", resp.Header.Get("Location"))
	}
	settled()
	if got := backups(); len(got) != 0 {
		t.Errorf("backups after rotation 0: %v", got)
	}

	// A capture that fails: the server stays as it was, the image goes.
	drv.FailNext(lifecycle.OpSnapshot, s.ID, "disk unreadable")
	_, out = action(sc45, map[string]any{"createImage": map[string]any{"name": "failed"}}, 202)
	failed, _ := out["image_id"].(string)
	if srv := settled(); srv.Status != "ACTIVE" {
		t.Errorf("after a failed snapshot: %+v", srv)
	}
	gone(failed)
	// An image deleted while it is saved (Tempest's
	// test_delete_saving_image): the snapshot ends, nothing is left.
	release = drv.HoldSnapshots()
	_, out = action(sc45, map[string]any{"createImage": map[string]any{"name": "deleted"}}, 202)
	deleted, _ := out["image_id"].(string)
	if err := images.Delete(ctx, ic, deleted).ExtractErr(); err != nil {
		t.Fatalf("deleting a saving snapshot: %v", err)
	}
	release()
	if srv := settled(); srv.Status != "ACTIVE" {
		t.Errorf("after a snapshot whose image was deleted: %+v", srv)
	}
	gone(deleted)
	// An admin's reset while the snapshot is saved ends it and deletes
	// its image, as Nova's snapshot fails at its next task-state check
	// and deletes the image: the server keeps the reset's state.
	release = drv.HoldSnapshots()
	_, out = action(sc45, map[string]any{"createImage": map[string]any{"name": "reset"}}, 202)
	reset, _ := out["image_id"].(string)
	action(sc45, map[string]any{"os-resetState": map[string]any{"state": "error"}}, 202)
	release()
	gone(reset)
	if srv := settled(); srv.Status != "ERROR" {
		t.Errorf("after a reset to error during a snapshot: %+v", srv)
	}
	action(sc45, map[string]any{"os-resetState": map[string]any{"state": "active"}}, 202)
	release = drv.HoldSnapshots()
	_, out = action(sc45, map[string]any{"createImage": map[string]any{"name": "reset-active"}}, 202)
	reset, _ = out["image_id"].(string)
	action(sc45, map[string]any{"os-resetState": map[string]any{"state": "active"}}, 202)
	release()
	gone(reset)
	if srv := settled(); srv.Status != "ACTIVE" {
		t.Errorf("after a reset to active during a snapshot: %+v", srv)
	}

	action(sc45, map[string]any{"os-resetState": map[string]any{"state": "error"}}, 202)
	if _, out := action(sc45, map[string]any{"createImage": map[string]any{"name": "late"}}, 409); !strings.Contains(fmt.Sprint(out), "Cannot 'createImage' instance "+s.ID+" while it is in vm_state error") {
		t.Errorf("createImage of a server in error: %v", out)
	}
}

// TestGophercloudImageTooBigForFlavor: an image whose min_ram is above
// the flavor's RAM, whose min_disk is above its disk, or whose data is
// larger than its disk is refused at boot and at rebuild with Nova's 400
// and message (Tempest's test_boot_with_low_ram); a flavor with no root
// disk is not checked against the image's disk needs, as Nova's is not.
func TestGophercloudImageTooBigForFlavor(t *testing.T) {
	ctx := testenv.Context(t)
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.80")
	ic, err := openstack.NewImageV2(sc.ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	fl, err := cl.FindFlavor(ctx, "m1.tiny")
	if err != nil {
		t.Fatal(err)
	}
	disk := int64(fl.DiskGB) << 30
	upload := func(name string, minRAM, minDisk int) string {
		t.Helper()
		im, err := images.Create(ctx, ic, images.CreateOpts{Name: name, DiskFormat: "raw", ContainerFormat: "bare", MinRAM: minRAM, MinDisk: minDisk}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if err := imagedata.Upload(ctx, ic, im.ID, bytes.NewReader(make([]byte, 4096))).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		return im.ID
	}
	lowRAM := upload("low-ram", fl.RAMMB+1, 0)
	lowDisk := upload("low-disk", 0, fl.DiskGB+1)
	fits := upload("fits", fl.RAMMB, fl.DiskGB)
	refused := []struct{ image, want string }{
		{lowRAM, "Flavor's memory is too small for requested image."},
		{lowDisk, fmt.Sprintf("Flavor's disk is smaller than the minimum size specified in image metadata. Flavor disk is %d bytes, minimum size is %d bytes.", disk, disk+1<<30)},
	}
	badRequest := func(what string, err error, want string) {
		t.Helper()
		var e gophercloud.ErrUnexpectedResponseCode
		if !errors.As(err, &e) || e.Actual != http.StatusBadRequest || !strings.Contains(string(e.Body), want) {
			t.Errorf("%s: %v, want 400 %q", what, err, want)
		}
	}
	for _, c := range refused {
		_, err := servers.Create(ctx, sc, servers.CreateOpts{Name: "no", FlavorRef: fl.ID, ImageRef: c.image, Networks: "none"}, nil).Extract()
		badRequest("boot", err, c.want)
	}
	s, err := servers.Create(ctx, sc, servers.CreateOpts{Name: "vm", FlavorRef: fl.ID, ImageRef: fits, Networks: "none"}, nil).Extract()
	if err != nil {
		t.Fatalf("a server from an image its flavor just fits: %v", err)
	}
	waitActive(t, cl, s.ID)
	for _, c := range refused {
		_, err := servers.Rebuild(ctx, sc, s.ID, servers.RebuildOpts{ImageRef: c.image}).Extract()
		badRequest("rebuild", err, c.want)
	}

	// A resize to a flavor too small for the server's image is refused
	// as Nova's (after the quota, before any move); one that fits goes.
	small, err := flavors.Create(ctx, sc, flavors.CreateOpts{Name: "small-ram", RAM: fl.RAMMB / 2, VCPUs: 1, Disk: gophercloud.IntToPointer(fl.DiskGB)}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	err = servers.Resize(ctx, sc, s.ID, servers.ResizeOpts{FlavorRef: small.ID}).ExtractErr()
	badRequest("resize below min_ram", err, "Flavor's memory is too small for requested image.")
	big := upload("min-disk-2", 0, fl.DiskGB+1)
	large, err := cl.FindFlavor(ctx, "m1.small")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := servers.Create(ctx, sc, servers.CreateOpts{Name: "vm2", FlavorRef: large.ID, ImageRef: big, Networks: "none"}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	waitActive(t, cl, s2.ID)
	err = servers.Resize(ctx, sc, s2.ID, servers.ResizeOpts{FlavorRef: fl.ID}).ExtractErr()
	badRequest("resize below min_disk", err, fmt.Sprintf("Flavor's disk is smaller than the minimum size specified in image metadata. Flavor disk is %d bytes, minimum size is %d bytes.", disk, disk+1<<30))
	if err := servers.Resize(ctx, sc, s.ID, servers.ResizeOpts{FlavorRef: large.ID}).ExtractErr(); err != nil {
		t.Errorf("a resize the image fits: %v", err)
	}

	// A 4 KiB image larger than a flavor's 0 GB disk boots.
	zero, err := flavors.Create(ctx, sc, flavors.CreateOpts{Name: "zero-disk", RAM: fl.RAMMB, VCPUs: 1, Disk: gophercloud.IntToPointer(0)}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := servers.Create(ctx, sc, servers.CreateOpts{Name: "zero", FlavorRef: zero.ID, ImageRef: lowDisk, Networks: "none"}, nil).Extract(); err != nil {
		t.Errorf("a 0 GB disk flavor with a min_disk image: %v, want accepted", err)
	}
}

// TestGophercloudShelveOffloadsToImage: as Nova's, a shelve writes a
// snapshot named '<server>-shelved' (image_type snapshot), an offload
// frees the host, the unshelve boots the server from that image on a
// host the scheduler picks and then deletes it; deleting a shelved
// server deletes its image too. Before, a shelve wrote no image
// (Tempest's test_shelve_unshelve_server found none).
func TestGophercloudShelveOffloadsToImage(t *testing.T) {
	ctx := testenv.Context(t)
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.80")
	ic, err := openstack.NewImageV2(sc.ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	fl, err := cl.FindFlavor(ctx, "m1.tiny")
	if err != nil {
		t.Fatal(err)
	}
	boot := func(name string) string {
		t.Helper()
		s, err := servers.Create(ctx, sc, servers.CreateOpts{Name: name, FlavorRef: fl.ID, ImageRef: compute.BuiltinImageID, Networks: "none"}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	wait := func(id string, status ...string) client.Server {
		t.Helper()
		var srv client.Server
		testenv.Poll(t, "server "+id+" "+strings.Join(status, " or "), func() error {
			var err error
			if srv, err = cl.GetServer(ctx, id); err != nil {
				return err
			}
			if srv.TaskState != "" || !slices.Contains(status, srv.Status) {
				return fmt.Errorf("status %s, task %q", srv.Status, srv.TaskState)
			}
			return nil
		})
		return srv
	}
	act := func(id string, body any) {
		t.Helper()
		if _, err := sc.Post(ctx, sc.ServiceURL("servers", id, "action"), body, nil, &gophercloud.RequestOpts{OkCodes: []int{202}}); err != nil {
			t.Fatalf("%v: %v", body, err)
		}
	}
	shelvedImage := func(name string) []images.Image {
		t.Helper()
		pages, err := images.List(ic, images.ListOpts{Name: name + "-shelved"}).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, err := images.ExtractImages(pages)
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	shelve := func(id string) {
		t.Helper()
		act(id, map[string]any{"shelve": nil})
		if srv := wait(id, "SHELVED", "SHELVED_OFFLOADED"); srv.Status == "SHELVED" {
			act(id, map[string]any{"shelveOffload": nil})
			wait(id, "SHELVED_OFFLOADED")
		}
	}

	id := boot("vm1")
	wait(id, "ACTIVE")
	shelve(id)
	ims := shelvedImage("vm1")
	if len(ims) != 1 || ims[0].Status != images.ImageStatusActive || ims[0].Properties["image_type"] != "snapshot" ||
		ims[0].Properties["instance_uuid"] != id || ims[0].SizeBytes == 0 {
		t.Fatalf("the shelved image: %+v", ims)
	}
	if srv, _ := cl.GetServer(ctx, id); srv.Host != "" {
		t.Errorf("an offloaded server keeps host %q", srv.Host)
	}
	act(id, map[string]any{"unshelve": nil})
	if srv := wait(id, "ACTIVE"); srv.Host == "" {
		t.Errorf("unshelved: %+v", srv)
	}
	testenv.Poll(t, "the shelved image deleted after the unshelve", func() error {
		if n := len(shelvedImage("vm1")); n != 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})

	id2 := boot("vm2")
	wait(id2, "ACTIVE")
	shelve(id2)
	if n := len(shelvedImage("vm2")); n != 1 {
		t.Fatalf("vm2's shelved images: %d", n)
	}
	if err := servers.Delete(ctx, sc, id2).ExtractErr(); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(t, "the shelved image deleted with its server", func() error {
		if n := len(shelvedImage("vm2")); n != 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
}
