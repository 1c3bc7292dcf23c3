package computeapi

import (
	"context"
	"fmt"

	"keel/internal/records"
)

// BootImage is what the compute API checks of an image before it boots
// or rebuilds a server from it, or resizes a server booted from it.
type BootImage struct {
	// MinRAMMB and MinDiskGB are the image's min_ram and min_disk.
	MinRAMMB, MinDiskGB int64
	// Size is the image data's size in bytes.
	Size int64
	// Properties are the image's properties (a rescue reads
	// hw_rescue_bus and hw_rescue_device).
	Properties map[string]string
}

// bootImage looks up the image id names for the request's caller: ok is
// false when there is no such image the caller can boot from. Without an
// image lookup configured every image is accepted and checks nothing.
func bootImage(ctx context.Context, lookup func(context.Context, string) (BootImage, bool), id string) (BootImage, bool) {
	if lookup == nil {
		return BootImage{}, true
	}
	return lookup(ctx, id)
}

// checkImageFits refuses a flavor too small for the image, as Nova does
// (400): RAM below the image's min_ram; a root disk smaller than the
// image's data or its min_disk. A flavor with no root disk (0 GB) is not
// checked against the image's size, as Nova's legacy rule has it.
func checkImageFits(im BootImage, f records.Flavor) error {
	if im.MinRAMMB > f.RAMMB {
		return badRequest("Flavor's memory is too small for requested image.")
	}
	if f.DiskGB == 0 {
		return nil
	}
	disk := f.DiskGB << 30
	if im.Size > disk {
		return badRequest(fmt.Sprintf("Flavor's disk is too small for requested image. Flavor disk is %d bytes, image is %d bytes.", disk, im.Size))
	}
	if min := im.MinDiskGB << 30; min > disk {
		return badRequest(fmt.Sprintf("Flavor's disk is smaller than the minimum size specified in image metadata. Flavor disk is %d bytes, minimum size is %d bytes.", disk, min))
	}
	return nil
}

// checkResizeImage refuses a resize to a flavor too small for the image
// the server was booted from (checkImageFits), as Nova's resize checks
// the image's min_ram, min_disk and size after the quota. A server of
// no image, or of one since deleted, is not checked (Nova reads the
// image's properties saved at boot; keel keeps none).
func (a *serverActionsAPI) checkResizeImage(in records.Instance, f records.Flavor) error {
	if a.images == nil || in.ImageRef == "" || f.ID == in.Flavor.ID {
		return nil
	}
	im, err := a.images.Get(in.ImageRef)
	if err != nil {
		return nil
	}
	b := BootImage{MinRAMMB: im.MinRAM, MinDiskGB: im.MinDisk}
	if im.Size != nil {
		b.Size = *im.Size
	}
	return checkImageFits(b, f)
}
