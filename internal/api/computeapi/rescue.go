package computeapi

import (
	"net/http"
	"slices"

	"keel/internal/records"
)

// Nova's libvirt driver's rescue devices and buses (blockinfo's
// SUPPORTED_DEVICE_TYPES, and SUPPORTED_DEVICE_BUSES for qemu and kvm).
var (
	rescueDevices = []string{"disk", "cdrom", "floppy", "lun"}
	rescueBuses   = []string{"virtio", "scsi", "ide", "usb", "fdc", "sata"}
)

// rescueDisk is what a rescue boots: the image rescue_image_ref names
// (400 "Can not find requested image" when the caller cannot boot it),
// else the server's own; and, when that image has hw_rescue_bus or
// hw_rescue_device, the bus and device of a stable-device rescue (Nova
// 2.87's: the server's disk stays attached where it is, the rescue disk
// is added on that bus and booted first). keel's servers all boot from
// an image (no volumes), so a stable-device rescue is taken at every
// microversion, as Nova takes it for a server that is not volume-backed;
// 2.87 adds only volume-backed servers, which keel does not have. A
// device or bus the QEMU and libvirt drivers cannot attach is 400 with
// Nova's text (Nova's compute raises the same when it builds the
// guest's disks).
func (a *serverActionsAPI) rescueDisk(r *http.Request, in records.Instance, ref *string) (*records.Rescue, error) {
	rs := &records.Rescue{ImageID: in.ImageRef}
	var props map[string]string
	if ref != nil {
		im, ok := bootImage(r.Context(), a.image, *ref)
		if !ok {
			return nil, badRequest("Can not find requested image " + *ref)
		}
		rs.ImageID, props = *ref, im.Properties
	} else if a.images != nil && in.ImageRef != "" {
		if im, err := a.images.Get(in.ImageRef); err == nil {
			props = im.Properties
		}
	}
	rs.Bus, rs.Device = props["hw_rescue_bus"], props["hw_rescue_device"]
	if rs.Device != "" && !slices.Contains(rescueDevices, rs.Device) {
		return nil, badRequest("Requested rescue device '" + rs.Device + "' is not supported")
	}
	if rs.Bus != "" && !slices.Contains(rescueBuses, rs.Bus) {
		return nil, badRequest("Requested rescue bus '" + rs.Bus + "' is not supported by the 'kvm' virt driver")
	}
	return rs, nil
}
