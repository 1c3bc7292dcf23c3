package libvirt

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

	"libvirt.org/go/libvirtxml"

	"keel/internal/compute"
	"keel/internal/compute/qemu/guest"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/testdisk"
)

// touchedWord reads the first word of the memory a fill guest makes
// non-zero (guest.TouchedBase) through libvirt's monitor passthrough: 0
// in an idle guest.
func touchedWord(d *Driver, uuid string) (uint32, error) {
	x, ok, err := d.lookup(uuid)
	if err != nil || !ok {
		return 0, fmt.Errorf("no guest %s (%v)", uuid, err)
	}
	l, err := d.lv()
	if err != nil {
		return 0, err
	}
	out, err := l.QEMUDomainMonitorCommand(x.d, fmt.Sprintf("xp /1wx %#x", guest.TouchedBase), 1)
	if err != nil {
		return 0, err
	}
	_, rest, ok := strings.Cut(out, ":")
	if !ok {
		return 0, fmt.Errorf("reading guest memory: %q", out)
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(rest), "0x"), 16, 32)
	return uint32(v), err
}

// domainDisks is the running domain's disks: each file's target (bus and
// device name) and boot order.
func domainDisks(t *testing.T, d *Driver, uuid string) map[string]string {
	t.Helper()
	x, ok, err := d.lookup(uuid)
	if err != nil || !ok {
		t.Fatalf("no guest %s (%v)", uuid, err)
	}
	l, err := d.lv()
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.DomainGetXMLDesc(x.d, 0)
	if err != nil {
		t.Fatal(err)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(s); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, dk := range dom.Devices.Disks {
		if dk.Source == nil || dk.Source.File == nil {
			continue
		}
		v := dk.Target.Bus + " " + dk.Target.Dev + " " + dk.Device
		if dk.Boot != nil {
			v += fmt.Sprintf(" boot %d", dk.Boot.Order)
		}
		out[filepath.Base(dk.Source.File.File)] = v
	}
	return out
}

// TestRescueBootsItsDiskBesideTheGuests: the libvirt driver's rescue of a
// guest booted from an uploaded image (real libvirtd, real QEMU) defines
// the domain with the rescue image's disk and the guest's own — Nova's
// legacy rescue: the rescue disk hda, the guest's hdb; stable-device
// rescues on virtio, scsi and usb: the guest's disk kept as hda, the
// rescue disk on that bus, boot order 1 — and the rescue image's program
// runs (it fills memory the guest's idle program leaves zero); the
// unrescue defines it again with the guest's disk alone, which boots, and
// deletes the rescue disk. Before, the rescue restarted the domain on the
// guest's own disk alone.
func TestRescueBootsItsDiskBesideTheGuests(t *testing.T) {
	ctx := context.Background()
	images := fileImages{}
	d := newDriver(t, "h01", Config{PowerDownWait: 200 * time.Millisecond, Images: images})
	_, _, own := testdisk.GuestImage(t)
	const ownID, rescueID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000e001", "0b6f2c3e-1d4a-4f1e-8b7a-00000000e002"
	images.add(t, ownID, "qcow2", own)
	fill := filepath.Join(t.TempDir(), "fill.raw")
	if err := errors.Join(os.WriteFile(fill, guest.Spec{Mode: guest.Fill, MiB: 1}.Image(), 0o644), os.Truncate(fill, 1<<20)); err != nil {
		t.Fatal(err)
	}
	images.add(t, rescueID, "raw", fill)
	inst := instance("5a1f0c6e-0000-4000-8000-0000000000e1", "")
	inst.ImageRef = ownID
	spawn(t, d, inst)
	waitRising(t, d, inst.UUID, 0)
	for _, c := range []struct {
		rs         records.Rescue
		own, saved string
	}{
		{records.Rescue{ImageID: rescueID}, "ide hdb disk", "ide hda disk"},
		{records.Rescue{ImageID: rescueID, Bus: "virtio", Device: "disk"}, "ide hda disk boot 2", "virtio vda disk boot 1"},
		{records.Rescue{ImageID: rescueID, Bus: "scsi", Device: "disk"}, "ide hda disk boot 2", "scsi sda disk boot 1"},
		{records.Rescue{ImageID: rescueID, Bus: "usb"}, "ide hda disk boot 2", "usb sdb disk boot 1"},
	} {
		name := fmt.Sprintf("rescue on %q %q", c.rs.Bus, c.rs.Device)
		rs := c.rs
		inst.Rescue = &rs
		if err := d.Lifecycle(ctx, inst, lifecycle.OpRescue); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		gs, _ := d.Guests(ctx)
		if len(gs) != 1 || gs[0].State != compute.GuestRescued || gs[0].Rescue == nil || *gs[0].Rescue != rs {
			t.Fatalf("%s: guests %+v", name, gs)
		}
		disks := domainDisks(t, d, inst.UUID)
		if disks["disk.img"] != c.own || disks[fileRescue] != c.saved {
			t.Errorf("%s: the domain's disks are %v; want the guest's own %q, the rescue disk %q", name, disks, c.own, c.saved)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			w, err := touchedWord(d, inst.UUID)
			if err == nil && w != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: memory at %#x is %#x (%v): the rescue image's program does not run", name, guest.TouchedBase, w, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		inst.Rescue = nil
		if err := d.Lifecycle(ctx, inst, lifecycle.OpUnrescue); err != nil {
			t.Fatalf("unrescue after the %s: %v", name, err)
		}
		if st := stateOf(t, d, inst.UUID); st != compute.GuestRunning {
			t.Fatalf("unrescued after the %s: %s", name, st)
		}
		if disks := domainDisks(t, d, inst.UUID); len(disks) != 1 || disks["disk.img"] != "ide hda disk" {
			t.Errorf("unrescued after the %s: the domain's disks are %v, want the guest's own alone", name, disks)
		}
		if _, err := os.Stat(filepath.Join(d.guestDir(inst.UUID), fileRescue)); !os.IsNotExist(err) {
			t.Errorf("unrescued after the %s: the rescue disk is still there (%v)", name, err)
		}
		waitRising(t, d, inst.UUID, 0)
		if w, err := touchedWord(d, inst.UUID); err != nil || w != 0 {
			t.Errorf("unrescued after the %s: memory at %#x is %#x (%v), want the guest's own idle program", name, guest.TouchedBase, w, err)
		}
	}
}
