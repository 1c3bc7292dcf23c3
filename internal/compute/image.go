package compute

import (
	"fmt"
	"keel/internal/compute/guestdisk"
	"keel/internal/records"
)

// BuiltinImageID is the image every keel cloud has (keel-fake, 1 MiB of
// zeros): the real drivers boot keel's own tiny guest for it (and for an
// instance with no image), whatever its data.
const BuiltinImageID = "7f3b0d5e-6a2c-4c1e-9a55-000000000001"

// ImageInfo describes an image's data as the servers keep it
// (guestdisk's, which keeps the images' copies on a host).
type ImageInfo = guestdisk.ImageInfo

// ImageSource gives a real driver the data of the image an instance
// boots from: the agent reads it from the servers over the bus, which
// serve it only to the host the instance concerns.
type ImageSource = guestdisk.ImageSource

// BootsImage reports whether inst boots an uploaded image (its
// DiskImage: a shelved server its shelve's snapshot) rather than
// keel's tiny guest.
func BootsImage(inst records.Instance) bool {
	return inst.DiskImage() != "" && inst.DiskImage() != BuiltinImageID
}

// OriginalImage is the uploaded image inst was booted from at first (its
// ImageRef), which an unshelved guest's disk is rebased onto; "" for
// keel's tiny guest.
func OriginalImage(inst records.Instance) string {
	if inst.ImageRef == "" || inst.ImageRef == BuiltinImageID {
		return ""
	}
	return inst.ImageRef
}

// RescueTarget is the device and bus a stable-device rescue's disk is
// attached on (rs.Stable()), as Nova's libvirt driver chooses them on a
// pc machine: the device defaults to disk, the bus to the device's
// default (virtio for a disk, ide for a cdrom, scsi for a lun). What the
// real drivers cannot boot a disk image from (a floppy, a virtio or usb
// cdrom) is an error.
func RescueTarget(rs records.Rescue) (device, bus string, err error) {
	device, bus = rs.Device, rs.Bus
	if device == "" {
		device = "disk"
	}
	if bus == "" {
		bus = map[string]string{"disk": "virtio", "cdrom": "ide", "lun": "scsi"}[device]
	}
	if device == "lun" {
		device = "disk" // a file, not a host's SCSI device: a plain disk
	}
	switch {
	case device != "disk" && device != "cdrom":
	case bus == "scsi" || bus == "ide" || bus == "sata":
		return device, bus, nil
	case (bus == "virtio" || bus == "usb") && device == "disk":
		return device, bus, nil
	}
	return "", "", fmt.Errorf("this driver attaches no rescue %s on bus %s", rs.Device, rs.Bus)
}
