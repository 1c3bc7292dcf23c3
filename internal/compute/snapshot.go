package compute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/store"
)

// SnapshotInfo describes a guest's disk captured for a snapshot.
type SnapshotInfo struct {
	// DiskFormat is the image's Glance disk_format (raw, qcow2).
	DiskFormat string `json:"disk_format"`
	// Size is the captured data's size in bytes.
	Size int64 `json:"size"`
}

// Snapshotter is the part of Driver that captures a guest's disk for a
// snapshot (createImage, createBackup, shelve): the conductor then reads
// the capture from the agent into the image.
type Snapshotter interface {
	// Snapshot captures inst's guest disk as the data of image imageID
	// (inst.Snapshot's), kept on the host until it has been read to its
	// end. It replaces an earlier capture of the same image (a repeat).
	Snapshot(ctx context.Context, inst records.Instance, imageID string) error
	// ReadSnapshot reads up to len(p) bytes of the capture at offset
	// into p; it returns 0 bytes at the end, and then removes the
	// capture. A capture it does not have wraps store.ErrNotFound.
	ReadSnapshot(ctx context.Context, uuid, imageID string, offset int64, p []byte) (SnapshotInfo, int, error)
}

// snapshot runs snapshot_instance: the driver's capture, the guest
// marked busy meanwhile so the audit leaves it alone.
func (m *Manager) snapshot(ctx context.Context, inst records.Instance) error {
	if inst.Snapshot == nil || uuid.Validate(inst.Snapshot.ImageID) != nil {
		return fmt.Errorf("%s of %s on %s: the instance names no image to write", lifecycle.OpSnapshot, inst.UUID, m.host)
	}
	m.tracker.Busy(inst.UUID, true)
	defer m.tracker.Busy(inst.UUID, false)
	if err := m.driver.Snapshot(ctx, inst, inst.Snapshot.ImageID); err != nil {
		return fmt.Errorf("%s of %s on %s: %w", lifecycle.OpSnapshot, inst.UUID, m.host, err)
	}
	return nil
}

// ReadSnapshot reads a chunk of the disk this host captured for image
// imageID of instance uuid (see Snapshotter).
func (m *Manager) ReadSnapshot(ctx context.Context, instanceUUID, imageID string, offset int64, p []byte) (SnapshotInfo, int, error) {
	if uuid.Validate(imageID) != nil {
		return SnapshotInfo{}, 0, fmt.Errorf("reading a snapshot of %s: image id %q is not a UUID", instanceUUID, imageID)
	}
	uuid := instanceUUID
	info, n, err := m.driver.ReadSnapshot(ctx, uuid, imageID, offset, p)
	if err != nil {
		return info, n, fmt.Errorf("reading the snapshot %s of %s on %s: %w", imageID, uuid, m.host, err)
	}
	return info, n, nil
}

// ReadCapture serves ReadSnapshot from a capture kept in a file (the
// real drivers'): its info, and the file removed once read to its end.
func ReadCapture(path, format string, offset int64, p []byte) (SnapshotInfo, int, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return SnapshotInfo{}, 0, fmt.Errorf("no captured disk %s: %w", path, store.ErrNotFound)
	}
	if err != nil {
		return SnapshotInfo{}, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return SnapshotInfo{}, 0, err
	}
	info := SnapshotInfo{DiskFormat: format, Size: st.Size()}
	n, err := f.ReadAt(p, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return info, n, err
	}
	if n == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return info, 0, err
		}
	}
	return info, n, nil
}

// CapturePattern matches, in a guest's directory, the disks the real
// drivers capture for snapshots (snapshot-<image>.qcow2).
const CapturePattern = "snapshot-*.qcow2"

// DropCaptures deletes the captured disks left in a guest's directory: a
// capture is read by the one snapshot in flight, so when the guest's
// next operation or snapshot starts, any capture still there belongs to
// a snapshot that ended without reading it (failed, its image deleted,
// or ended by an admin's reset) and would otherwise stay until the guest
// goes.
func DropCaptures(dir string) error {
	left, err := filepath.Glob(filepath.Join(dir, CapturePattern))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range left {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
