package libvirt

import (
	"context"
	"fmt"
	"path/filepath"

	"keel/internal/compute"
	"keel/internal/records"
)

var _ compute.Snapshotter = (*Driver)(nil)

// captureFile is where a guest's directory keeps the disk captured for
// snapshot imageID until it is read.
func (d *Driver) captureFile(uuid, imageID string) string {
	return filepath.Join(d.guestDir(uuid), "snapshot-"+imageID+".qcow2")
}

// Snapshot implements compute.Snapshotter as the QEMU driver does: a
// running domain is suspended (libvirt's pause) while qemu-img converts
// its disk — the overlay with the image's base, or keel's guest's raw
// disk — into one whole qcow2 in its directory, and resumed after.
func (d *Driver) Snapshot(ctx context.Context, inst records.Instance, imageID string) error {
	x, ok, err := d.lookup(inst.UUID)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
	}
	if !ok {
		return fmt.Errorf("snapshot of %s: no guest on this host", inst.UUID)
	}
	format := "raw"
	if x.m.Image != "" {
		format = "qcow2"
	}
	if err := compute.DropCaptures(d.guestDir(inst.UUID)); err != nil {
		d.log.Warn("deleting the captures of ended snapshots", "instance", inst.UUID, "err", err)
	}
	if x.state == stateRunning {
		l, err := d.lv()
		if err != nil {
			return err
		}
		if err := l.DomainSuspend(x.d); err != nil {
			return fmt.Errorf("snapshot of %s: pausing the guest: %w", inst.UUID, describe(err))
		}
		defer func() {
			if err := l.DomainResume(x.d); err != nil {
				d.log.Warn("resuming a guest after its snapshot", "instance", inst.UUID, "err", describe(err))
			}
		}()
	}
	if err := d.images.Capture(ctx, d.diskPath(inst.UUID), format, d.captureFile(inst.UUID, imageID)); err != nil {
		return fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
	}
	return nil
}

// ReadSnapshot implements compute.Snapshotter.
func (d *Driver) ReadSnapshot(_ context.Context, uuid, imageID string, offset int64, p []byte) (compute.SnapshotInfo, int, error) {
	return compute.ReadCapture(d.captureFile(uuid, imageID), "qcow2", offset, p)
}
