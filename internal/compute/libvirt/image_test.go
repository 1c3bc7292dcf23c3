package libvirt

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/guestdisk"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/testdisk"
)

// fileImages serves images from files, as the servers' image store does
// over the bus (rpc.Store).
type fileImages map[string]compute.ImageInfo

func (s fileImages) FetchImage(_ context.Context, _, id string, w io.Writer) (compute.ImageInfo, error) {
	info, ok := s[id]
	if !ok {
		return info, fmt.Errorf("no image %s", id)
	}
	f, err := os.Open(info.ID) // the test keeps the file's path in ID
	if err != nil {
		return info, err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	info.ID = id
	return info, err
}

func (s fileImages) add(t *testing.T, id, format, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	s[id] = compute.ImageInfo{ID: path, DiskFormat: format, Size: int64(len(data)), Checksum: hex.EncodeToString(sum[:])}
}

// TestBootUploadedImage boots keel's guest from an uploaded qcow2 image
// through libvirt: the disk is a qcow2 overlay on the host's base copy
// (_base/<id>, raw) and the domain reads it as qcow2; the guest runs,
// and a hard reboot keeps its overlay. A qcow2 naming a backing file is
// refused.
func TestBootUploadedImage(t *testing.T) {
	ctx := context.Background()
	images := fileImages{}
	d := newDriver(t, "h01", Config{PowerDownWait: 200 * time.Millisecond, Images: images})
	work, raw, qcow := testdisk.GuestImage(t)
	const imageID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000d001"
	images.add(t, imageID, "qcow2", qcow)
	inst := instance("5a1f0c6e-0000-4000-8000-0000000000d1", "")
	inst.ImageRef = imageID
	spawn(t, d, inst)
	waitRising(t, d, inst.UUID, 0)
	disk := d.diskPath(inst.UUID)
	if info := testdisk.Info(t, disk); info.Format != "qcow2" || info.BackingFilename != filepath.Join("..", guestdisk.BaseDir, imageID) {
		t.Errorf("the guest's disk is %+v, want a qcow2 overlay on ../_base/%s", info, imageID)
	}
	before, err := os.Stat(disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Lifecycle(ctx, inst, lifecycle.OpRebootHard); err != nil {
		t.Fatal(err)
	}
	waitRising(t, d, inst.UUID, 0)
	if after, err := os.Stat(disk); err != nil || !os.SameFile(before, after) {
		t.Errorf("the hard reboot made a new disk (%v)", err)
	}

	backed := filepath.Join(work, "backed.qcow2")
	testdisk.QemuImg(t, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", raw, backed)
	const badID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000d002"
	images.add(t, badID, "qcow2", backed)
	bad := instance("5a1f0c6e-0000-4000-8000-0000000000d2", "")
	bad.ImageRef = badID
	ch := make(chan error, 1)
	d.Spawn(ctx, bad, func(err error) { ch <- err })
	if err := waitDone(t, ch, 60*time.Second); err == nil || !strings.Contains(err.Error(), "names a backing file") {
		t.Fatalf("spawn from a qcow2 with a backing file: %v", err)
	}
}

// TestColdMoveFetchesDeletedImageFromSource: a guest booted from an
// uploaded image deleted since is cold-moved from h01 to h02, which never
// fetched the image: h02, finding no image in the image service, copies
// the base from h01 (Nova's fallback_from_host) and the guest runs there
// on its moved overlay. Before, finish_migration failed ("fetching image
// …: no image").
func TestColdMoveFetchesDeletedImageFromSource(t *testing.T) {
	ctx := context.Background()
	images := fileImages{}
	src := newDriver(t, "h01", Config{PowerDownWait: 200 * time.Millisecond, Images: images})
	dst := newDriver(t, "h02", Config{PowerDownWait: 200 * time.Millisecond, Images: images})
	_, _, qcow := testdisk.GuestImage(t)
	const imageID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000f002"
	images.add(t, imageID, "qcow2", qcow)
	inst := instance("5a1f0c6e-0000-4000-8000-0000000000f2", "")
	inst.ImageRef, inst.VMState = imageID, records.VMActive
	spawn(t, src, inst)
	waitRising(t, src, inst.UUID, 0)
	delete(images, imageID)

	data, err := dst.PrepResize(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	copied := make(chan error, 1)
	src.MigrateDiskAndPowerOff(ctx, 1, inst, "h02", data, func(err error) { copied <- err })
	if err := waitDone(t, copied, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := dst.FinishMigration(ctx, inst); err != nil {
		t.Fatalf("finish_migration of a guest whose image is gone: %v", err)
	}
	waitRising(t, dst, inst.UUID, 0)
	if info := testdisk.Info(t, filepath.Join(dst.cfg.Dir, guestdisk.BaseDir, imageID)); info.Format != "raw" {
		t.Errorf("the destination's base is %+v, want the source's raw copy", info)
	}
}
