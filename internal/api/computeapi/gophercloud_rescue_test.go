package computeapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/imagedata"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"

	"keel/internal/client/clienttest"
	"keel/internal/compute"
	"keel/internal/records"
	"keel/internal/testenv"
)

// TestGophercloudStableDeviceRescue: a rescue whose image has
// hw_rescue_bus and hw_rescue_device (Tempest's ServerStableDeviceRescueTest,
// at 2.87 and at 2.1) reaches the guest's driver with that image, bus and
// device — the guest's own disk kept — and the unrescue drops it; a
// rescue with no image is Nova's legacy one on the server's own image; a
// bus or device Nova's libvirt driver cannot attach is 400 with Nova's
// text and leaves the server ACTIVE. Before, the rescue image was checked
// and dropped: the driver rebooted the guest on its own disk.
func TestGophercloudStableDeviceRescue(t *testing.T) {
	ctx := testenv.Context(t)
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	cl := cloud.Connect(t)
	sc := computeAt(cl, "2.87")
	ic, err := openstack.NewImageV2(sc.ProviderClient, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		t.Fatal(err)
	}
	upload := func(name string, props map[string]string) string {
		t.Helper()
		im, err := images.Create(ctx, ic, images.CreateOpts{Name: name, DiskFormat: "raw", ContainerFormat: "bare", Properties: props}).Extract()
		if err != nil {
			t.Fatal(err)
		}
		if err := imagedata.Upload(ctx, ic, im.ID, bytes.NewReader(bytes.Repeat([]byte("disk"), 1024))).ExtractErr(); err != nil {
			t.Fatal(err)
		}
		return im.ID
	}
	own := upload("own", nil)
	rescueImage := func(bus, device string) string {
		return upload("rescue-"+bus+"-"+device, map[string]string{"hw_rescue_bus": bus, "hw_rescue_device": device})
	}
	fl, err := cl.FindFlavor(ctx, "m1.tiny")
	if err != nil {
		t.Fatal(err)
	}
	s, err := servers.Create(ctx, sc, servers.CreateOpts{Name: "vm", FlavorRef: fl.ID, ImageRef: own, Networks: "none"}, nil).Extract()
	if err != nil {
		t.Fatal(err)
	}
	wait := func(status string) {
		t.Helper()
		testenv.Poll(t, "server "+status, func() error {
			srv, err := cl.GetServer(ctx, s.ID)
			if err != nil {
				return err
			}
			if srv.Status != status || srv.TaskState != "" {
				return fmt.Errorf("status %s, task %q", srv.Status, srv.TaskState)
			}
			return nil
		})
	}
	wait("ACTIVE")
	action := func(sc *gophercloud.ServiceClient, body any, want int) string {
		t.Helper()
		opts := &gophercloud.RequestOpts{JSONBody: body, OkCodes: []int{want}, KeepResponseBody: true}
		resp, err := sc.Post(ctx, sc.ServiceURL("servers", s.ID, "action"), body, nil, opts)
		if err != nil {
			t.Fatalf("%v: %v", body, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw)
	}
	drv := cloud.Driver(t, cloud.Hosts[0])
	guest := func() compute.Guest {
		t.Helper()
		gs, err := drv.Guests(context.Background())
		if err != nil || len(gs) != 1 {
			t.Fatalf("guests: %+v, %v", gs, err)
		}
		return gs[0]
	}
	for _, c := range []struct {
		version, bus, device string
	}{{"2.87", "virtio", "disk"}, {"2.87", "scsi", "disk"}, {"2.1", "usb", "disk"}, {"2.87", "ide", "cdrom"}} {
		im := rescueImage(c.bus, c.device)
		var body struct{ AdminPass string }
		_ = json.Unmarshal([]byte(action(computeAt(cl, c.version), map[string]any{"rescue": map[string]any{"rescue_image_ref": im}}, 200)), &body)
		if body.AdminPass == "" {
			t.Errorf("rescue at %s answered no adminPass", c.version)
		}
		wait("RESCUE")
		want := records.Rescue{ImageID: im, Bus: c.bus, Device: c.device}
		if g := guest(); g.State != compute.GuestRescued || g.Rescue == nil || *g.Rescue != want {
			t.Errorf("rescued at %s: guest %s booting %+v, want %+v", c.version, g.State, g.Rescue, want)
		}
		action(sc, map[string]any{"unrescue": nil}, 202)
		wait("ACTIVE")
		if g := guest(); g.State != compute.GuestRunning || g.Rescue != nil {
			t.Errorf("unrescued: guest %s still booting %+v", g.State, g.Rescue)
		}
	}
	action(sc, map[string]any{"rescue": nil}, 200)
	wait("RESCUE")
	if g := guest(); g.Rescue == nil || *g.Rescue != (records.Rescue{ImageID: own}) || g.Rescue.Stable() {
		t.Errorf("rescue without an image: guest booting %+v, want the server's own image, legacy", g.Rescue)
	}
	action(sc, map[string]any{"unrescue": nil}, 202)
	wait("ACTIVE")

	for _, c := range []struct{ bus, device, want string }{
		{"virtio", "tape", "Requested rescue device 'tape' is not supported"},
		{"xen", "disk", "Requested rescue bus 'xen' is not supported by the 'kvm' virt driver"},
	} {
		im := rescueImage(c.bus, c.device)
		if got := action(sc, map[string]any{"rescue": map[string]any{"rescue_image_ref": im}}, 400); !strings.Contains(got, c.want) {
			t.Errorf("rescue on %s/%s: %s, want %q", c.bus, c.device, got, c.want)
		}
	}
	if srv, err := cl.GetServer(ctx, s.ID); err != nil || srv.Status != "ACTIVE" {
		t.Errorf("after the refused rescues: %+v, %v", srv, err)
	}
}
