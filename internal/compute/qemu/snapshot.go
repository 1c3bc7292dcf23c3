package qemu

import (
	"context"
	"fmt"
	"path/filepath"

	"keel/internal/compute"
	"keel/internal/records"
	"keel/internal/store"
)

var _ compute.Snapshotter = (*Driver)(nil)

// captureFile is where a guest's directory keeps the disk captured for
// snapshot imageID until it is read.
func captureFile(dir, imageID string) string {
	return filepath.Join(dir, "snapshot-"+imageID+".qcow2")
}

// Snapshot implements compute.Snapshotter: the guest's disk (its qcow2
// overlay and the image's base under it, or keel's guest's raw disk) is
// converted by qemu-img into one whole qcow2 in the guest's directory.
// A running guest is paused for the copy (QMP stop, which flushes its
// disk; cont after) — a crash-consistent snapshot, as Nova's cold
// snapshot, rather than its live one; a paused, suspended or stopped
// guest writes nothing and is copied as it is.
func (d *Driver) Snapshot(ctx context.Context, inst records.Instance, imageID string) error {
	d.mu.Lock()
	v, ok := d.vms[inst.UUID]
	var state compute.GuestState
	var pid int
	var image string
	if ok {
		state, pid, image = v.st.Guest.State, v.pid, v.st.Image
	}
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("snapshot of %s: no guest on this host", inst.UUID)
	}
	format := "raw"
	if image != "" {
		format = "qcow2"
	}
	if err := compute.DropCaptures(v.dir); err != nil {
		d.log.Warn("deleting the captures of ended snapshots", "instance", inst.UUID, "err", err)
	}
	if pid != 0 && v.alive() && (state == compute.GuestRunning || state == compute.GuestRescued) {
		if err := d.execute(ctx, v, "stop", nil, nil); err != nil {
			return fmt.Errorf("snapshot of %s: pausing the guest: %w", inst.UUID, err)
		}
		defer func() {
			if err := d.execute(context.WithoutCancel(ctx), v, "cont", nil, nil); err != nil {
				d.log.Warn("continuing a guest after its snapshot", "instance", inst.UUID, "err", err)
			}
		}()
	}
	if err := d.images.Capture(ctx, filepath.Join(v.dir, fileDisk), format, captureFile(v.dir, imageID)); err != nil {
		return fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
	}
	return nil
}

// ReadSnapshot implements compute.Snapshotter.
func (d *Driver) ReadSnapshot(_ context.Context, uuid, imageID string, offset int64, p []byte) (compute.SnapshotInfo, int, error) {
	d.mu.Lock()
	v, ok := d.vms[uuid]
	d.mu.Unlock()
	if !ok {
		return compute.SnapshotInfo{}, 0, fmt.Errorf("no guest %s on this host: %w", uuid, store.ErrNotFound)
	}
	return compute.ReadCapture(captureFile(v.dir, imageID), "qcow2", offset, p)
}
