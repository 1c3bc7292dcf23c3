package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/qemu/guest"
	"keel/internal/compute/qemu/qmp"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/testdisk"
	"keel/internal/testenv"
)

// peek runs fn on a fresh session of the guest's observers' QMP socket.
func peek(t *testing.T, d *Driver, uuid string, fn func(ctx context.Context, c *qmp.Conn) error) error {
	t.Helper()
	sock, err := PeekSocket(d.cfg.Dir, uuid)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := qmp.Dial(ctx, sock)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// touched reads the first word of the memory a fill guest makes
// non-zero (guest.TouchedBase): 0 in an idle guest.
func touched(t *testing.T, d *Driver, uuid string) (uint32, error) {
	var w uint32
	err := peek(t, d, uuid, func(ctx context.Context, c *qmp.Conn) error {
		var out string
		if err := c.Execute(ctx, "human-monitor-command", map[string]any{"command-line": fmt.Sprintf("xp /1wx %#x", guest.TouchedBase)}, &out); err != nil {
			return err
		}
		_, rest, ok := strings.Cut(out, ":")
		if !ok {
			return fmt.Errorf("reading guest memory: %q", out)
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(rest), "0x"), 16, 32)
		w = uint32(v)
		return err
	})
	return w, err
}

// attached is the guest's block devices as its QEMU reports them
// (query-block): for each image file, the device that shows it to the
// guest (its qdev path, or the drive's name).
func attached(t *testing.T, d *Driver, uuid string) map[string]string {
	t.Helper()
	var blocks []struct {
		Device   string `json:"device"`
		QDev     string `json:"qdev"`
		Inserted *struct {
			File string `json:"file"`
		} `json:"inserted"`
	}
	if err := peek(t, d, uuid, func(ctx context.Context, c *qmp.Conn) error {
		return c.Execute(ctx, "query-block", nil, &blocks)
	}); err != nil {
		t.Fatalf("query-block: %v", err)
	}
	out := map[string]string{}
	for _, b := range blocks {
		if b.Inserted == nil {
			continue
		}
		out[filepath.Base(b.Inserted.File)] = b.Device + " " + b.QDev
	}
	return out
}

// TestRescueBootsItsDiskBesideTheGuests rescues a guest booted from an
// uploaded image (real qemu-img, real QEMU) with a rescue image whose
// program differs (it fills memory the guest's own idle program leaves
// zero): Nova's legacy rescue (the rescue disk first on IDE, the guest's
// disk second) and stable-device rescues on virtio, scsi, usb and sata
// (the guest's disk kept first on IDE, the rescue disk added on that bus
// and booted first). Each time the rescue image's program runs, and the
// rescued guest's QEMU shows it its own disk beside the rescue disk; the
// unrescue boots its own disk again and deletes the rescue disk. An IDE
// cdrom is attached too (keel's raw program is no bootable CD: the guest
// boots its own disk). Before, a rescue booted the guest's own disk
// alone.
func TestRescueBootsItsDiskBesideTheGuests(t *testing.T) {
	ctx := context.Background()
	shortPowerDown(t)
	src := &imageFiles{}
	d := newDriver(t, Config{Images: src})
	_, _, own := testdisk.GuestImage(t)
	const ownID, rescueID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000c001", "0b6f2c3e-1d4a-4f1e-8b7a-00000000c002"
	src.add(t, ownID, "qcow2", own)
	fill := filepath.Join(t.TempDir(), "fill.raw")
	// One MiB: SeaBIOS boots no virtio disk of a single sector.
	if err := errors.Join(os.WriteFile(fill, guest.Spec{Mode: guest.Fill, MiB: 1}.Image(), 0o644), os.Truncate(fill, 1<<20)); err != nil {
		t.Fatal(err)
	}
	src.add(t, rescueID, "raw", fill)
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-0000000000c1", Name: "rescued", ImageRef: ownID,
		Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
	spawned := make(chan error, 1)
	d.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitRising(t, d, inst.UUID, 0)
	if w, err := touched(t, d, inst.UUID); err != nil || w != 0 {
		t.Fatalf("the idle guest's memory at %#x: %#x, %v; want 0", guest.TouchedBase, w, err)
	}
	guestOf := func() compute.Guest {
		gs, _ := d.Guests(ctx)
		for _, g := range gs {
			if g.UUID == inst.UUID {
				return g
			}
		}
		return compute.Guest{}
	}
	for _, rs := range []records.Rescue{
		{ImageID: rescueID},
		{ImageID: rescueID, Bus: "virtio", Device: "disk"},
		{ImageID: rescueID, Bus: "scsi", Device: "disk"},
		{ImageID: rescueID, Bus: "usb", Device: "disk"},
		{ImageID: rescueID, Bus: "sata"},
		{ImageID: rescueID, Bus: "ide", Device: "cdrom"},
	} {
		name := fmt.Sprintf("rescue on %q %q", rs.Bus, rs.Device)
		inst.Rescue = &rs
		if err := d.Lifecycle(ctx, inst, lifecycle.OpRescue); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if g := guestOf(); g.State != compute.GuestRescued || g.Rescue == nil || *g.Rescue != rs {
			t.Fatalf("%s: guest %s booting %+v", name, g.State, g.Rescue)
		}
		disks := attached(t, d, inst.UUID)
		switch {
		case disks[fileDisk] == "" || disks[fileRescue] == "":
			t.Errorf("%s: the guest sees %v; want its own disk and the rescue disk", name, disks)
		case !rs.Stable() && (!strings.HasPrefix(disks[fileRescue], "ide0-hd0 ") || !strings.HasPrefix(disks[fileDisk], "ide0-hd1 ")):
			t.Errorf("%s: the guest sees %v; want the rescue disk first on IDE, its own second", name, disks)
		case rs.Stable() && (!strings.HasPrefix(disks[fileDisk], "ide0-hd0 ") || !strings.Contains(disks[fileRescue], "rescuedisk")):
			t.Errorf("%s: the guest sees %v; want its own disk kept first on IDE, the rescue disk on its own device", name, disks)
		}
		if rs.Device == "cdrom" {
			waitRising(t, d, inst.UUID, 0)
		} else {
			testenv.Poll(t, name+": the rescue image's program runs", func() error {
				if w, err := touched(t, d, inst.UUID); err != nil || w == 0 {
					return fmt.Errorf("memory at %#x is %#x (%v): the guest's own idle program, not the rescue image's", guest.TouchedBase, w, err)
				}
				return nil
			})
		}
		inst.Rescue = nil
		if err := d.Lifecycle(ctx, inst, lifecycle.OpUnrescue); err != nil {
			t.Fatalf("unrescue after the %s: %v", name, err)
		}
		if g := guestOf(); g.State != compute.GuestRunning || g.Rescue != nil {
			t.Fatalf("unrescued after the %s: guest %s booting %+v", name, g.State, g.Rescue)
		}
		if _, err := os.Stat(filepath.Join(d.cfg.Dir, inst.UUID, fileRescue)); !os.IsNotExist(err) {
			t.Errorf("unrescued after the %s: the rescue disk is still there (%v)", name, err)
		}
		waitRising(t, d, inst.UUID, 0)
		if disks := attached(t, d, inst.UUID); len(disks) != 1 || disks[fileDisk] == "" {
			t.Errorf("unrescued after the %s: the guest sees %v, want its own disk alone", name, disks)
		}
		if w, err := touched(t, d, inst.UUID); err != nil || w != 0 {
			t.Errorf("unrescued after the %s: memory at %#x is %#x (%v), want the guest's own idle program", name, guest.TouchedBase, w, err)
		}
	}
	inst.Rescue = &records.Rescue{ImageID: rescueID, Bus: "fdc", Device: "floppy"}
	if err := d.Lifecycle(ctx, inst, lifecycle.OpRescue); err == nil || !strings.Contains(err.Error(), "attaches no rescue floppy on bus fdc") {
		t.Errorf("a floppy rescue: %v, want it refused", err)
	}
}
