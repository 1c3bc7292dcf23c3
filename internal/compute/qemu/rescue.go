package qemu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"keel/internal/compute"
	"keel/internal/records"
)

// fileRescue is a rescued guest's rescue disk, in its directory (Nova's
// libvirt driver names its own disk.rescue too).
const fileRescue = "disk.rescue"

// rescue ends v's QEMU and starts it again rescued (on) or not: a rescue
// makes the rescue disk from inst.Rescue's image — a qcow2 overlay on its
// base (fetched if the host has none), or keel's guest program for the
// built-in image — and records it on the guest (guest.json), so that every start of
// the guest's QEMU until the unrescue boots it (diskArgs); an unrescue
// forgets and deletes it. The guest's own disk is never touched.
func (d *Driver) rescue(ctx context.Context, v *vm, inst records.Instance, on bool) error {
	if err := d.powerDown(ctx, v); err != nil {
		return err
	}
	path := filepath.Join(v.dir, fileRescue)
	var rs *records.Rescue
	if on {
		rs = &records.Rescue{}
		if inst.Rescue != nil {
			*rs = *inst.Rescue
		}
		if rs.Stable() {
			if _, err := rescueDevice(*rs); err != nil {
				return err
			}
		}
		d.mu.Lock()
		program := v.st.Program
		d.mu.Unlock()
		if err := d.images.RescueDisk(ctx, inst.UUID, rescueImage(*rs), program, path); err != nil {
			return err
		}
	}
	d.mu.Lock()
	v.st.Guest.Rescue = rs
	d.saveLocked(v)
	d.mu.Unlock()
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("deleting the rescue disk: %w", err)
		}
	}
	return d.launchDisk(ctx, v, d.instanceOf(v), false, true)
}

// rescueImage is the uploaded image a rescue boots, "" for keel's guest
// program (no image, or the built-in one).
func rescueImage(rs records.Rescue) string {
	if rs.ImageID == compute.BuiltinImageID {
		return ""
	}
	return rs.ImageID
}

// rescueFormat is the rescue disk's format: an overlay for an uploaded
// image, raw for keel's guest program.
func rescueFormat(rs records.Rescue) string {
	if rescueImage(rs) != "" {
		return "qcow2"
	}
	return "raw"
}

// diskArgs are the QEMU options of the guest's disks: its own disk
// (format) first on the IDE bus; rescued, the rescue disk too — Nova's
// legacy rescue puts it first and the guest's disk second, a
// stable-device rescue keeps the guest's disk where it is and adds the
// rescue disk on its own controller, booted first (bootindex 0).
func diskArgs(format string, rs *records.Rescue) []string {
	own := "file=" + fileDisk + ",format=" + format + ",if=ide"
	if rs == nil {
		return []string{"-drive", own}
	}
	rescue := "file=" + fileRescue + ",format=" + rescueFormat(*rs)
	if !rs.Stable() {
		return []string{"-drive", rescue + ",if=ide,index=0", "-drive", own + ",index=1"}
	}
	dev, err := rescueDevice(*rs)
	if err != nil {
		return []string{"-drive", own} // refused at the rescue
	}
	media := ""
	if dev.cdrom {
		media = ",media=cdrom,readonly=on"
	}
	a := []string{"-drive", own + ",index=0", "-drive", rescue + ",if=none,id=rescue" + media}
	if dev.controller != "" {
		a = append(a, "-device", dev.controller+",id=rescuebus")
	}
	return append(a, "-device", dev.device+",drive=rescue,id=rescuedisk,bootindex=0"+dev.bus)
}

// rescueDev is how a rescue disk is attached: its QEMU device, the
// controller it sits on (none: the machine's own), and its bus option.
type rescueDev struct {
	controller, device, bus string
	cdrom                   bool
}

// rescueDevice is the QEMU attachment of a stable-device rescue's disk
// (compute.RescueTarget).
func rescueDevice(rs records.Rescue) (rescueDev, error) {
	device, bus, err := compute.RescueTarget(rs)
	if err != nil {
		return rescueDev{}, err
	}
	cd := device == "cdrom"
	hd := map[bool]string{false: "-hd", true: "-cd"}[cd]
	switch bus {
	case "virtio":
		return rescueDev{device: "virtio-blk-pci"}, nil
	case "scsi":
		return rescueDev{controller: "virtio-scsi-pci", device: "scsi" + hd, bus: ",bus=rescuebus.0", cdrom: cd}, nil
	case "usb":
		return rescueDev{controller: "qemu-xhci", device: "usb-storage", bus: ",bus=rescuebus.0"}, nil
	case "ide":
		return rescueDev{device: "ide" + hd, bus: ",bus=ide.1", cdrom: cd}, nil
	}
	return rescueDev{controller: "ahci", device: "ide" + hd, bus: ",bus=rescuebus.0", cdrom: cd}, nil // sata
}
