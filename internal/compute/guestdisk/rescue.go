package guestdisk

import (
	"context"
	"errors"
	"fmt"
	"os"

	"keel/internal/compute/qemu/guest"
)

// rescueDiskSize is the least size of a rescue disk written from a guest
// program: SeaBIOS boots no virtio disk of a single sector.
const rescueDiskSize = 1 << 20

// RescueDisk writes a rescue's disk at path, the one both real drivers
// boot: an overlay on the base of an uploaded image (image, fetched for
// instanceUUID as its boot disk's is), or, for image "", keel's guest
// program (program, the guest's own) as a raw disk of one MiB.
func (c *Images) RescueDisk(ctx context.Context, instanceUUID, image, program, path string) error {
	if image != "" {
		base, err := c.Base(ctx, instanceUUID, image)
		if err != nil {
			return fmt.Errorf("the rescue image: %w", err)
		}
		return c.Overlay(ctx, base, path)
	}
	spec, err := guest.Parse(program)
	if err != nil {
		return err
	}
	if err := errors.Join(os.WriteFile(path, spec.Image(), 0o644), os.Truncate(path, rescueDiskSize)); err != nil {
		return fmt.Errorf("writing the rescue disk: %w", err)
	}
	return nil
}
