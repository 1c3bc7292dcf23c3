package qemu

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/testdisk"
)

// TestSnapshotBootsAgain snapshots a running guest booted from an
// uploaded qcow2 image (real qemu-img, real QEMU): the capture is one
// whole qcow2 (no backing file: the base's data is in it), the guest
// runs on after its pause, the capture is gone once read to its end,
// and a new guest booted from the snapshot as an image runs (its
// heartbeat rises). keel's own guest (a raw disk) snapshots too, while
// stopped. Before, there was no snapshot_instance.
func TestSnapshotBootsAgain(t *testing.T) {
	ctx := context.Background()
	shortPowerDown(t)
	src := &imageFiles{}
	d := newDriver(t, Config{Images: src})
	work, _, base := testdisk.GuestImage(t)
	const baseID, snapID, tinySnap = "0b6f2c3e-1d4a-4f1e-8b7a-00000000c001", "0b6f2c3e-1d4a-4f1e-8b7a-00000000c002", "0b6f2c3e-1d4a-4f1e-8b7a-00000000c003"
	src.add(t, baseID, "qcow2", base)
	boot := func(uuid, image string) records.Instance {
		t.Helper()
		inst := records.Instance{UUID: uuid, Name: "snap", ImageRef: image, Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
		spawned := make(chan error, 1)
		d.Spawn(ctx, inst, func(err error) { spawned <- err })
		if err := waitDone(t, spawned, 60*time.Second); err != nil {
			t.Fatalf("boot of %s from %q: %v", uuid, image, err)
		}
		return inst
	}
	read := func(uuid, imageID string) string { t.Helper(); return readCapture(t, d, work, uuid, imageID) }

	g1 := "6f0c1c6e-0000-4000-8000-0000000000c1"
	inst := boot(g1, baseID)
	hb := waitRising(t, d, g1, 0)
	if err := d.Snapshot(ctx, inst, snapID); err != nil {
		t.Fatalf("snapshot of a running guest: %v", err)
	}
	waitRising(t, d, g1, hb) // continued after its pause
	snap := read(g1, snapID)
	if info := testdisk.Info(t, snap); info.Format != "qcow2" || info.BackingFilename != "" {
		t.Errorf("the snapshot: %+v, want a whole qcow2", info)
	}
	src.add(t, snapID, "qcow2", snap)
	g2 := "6f0c1c6e-0000-4000-8000-0000000000c2"
	boot(g2, snapID)
	waitRising(t, d, g2, 0)

	// keel's own guest, stopped: its raw disk becomes a qcow2 that boots.
	g3, g4 := "6f0c1c6e-0000-4000-8000-0000000000c3", "6f0c1c6e-0000-4000-8000-0000000000c4"
	tiny := boot(g3, "")
	waitRising(t, d, g3, 0)
	if err := d.Lifecycle(ctx, tiny, lifecycle.OpStop); err != nil {
		t.Fatal(err)
	}
	if err := d.Snapshot(ctx, tiny, tinySnap); err != nil {
		t.Fatalf("snapshot of a stopped guest: %v", err)
	}
	src.add(t, tinySnap, "qcow2", read(g3, tinySnap))
	boot(g4, tinySnap)
	waitRising(t, d, g4, 0)
}

// readCapture reads d's capture of uuid's disk for imageID to its end
// into work/<imageID>.qcow2 and returns that path; the capture is gone
// once read.
func readCapture(t *testing.T, d *Driver, work, uuid, imageID string) string {
	t.Helper()
	ctx := context.Background()
	var buf bytes.Buffer
	p := make([]byte, 64<<10)
	for off := int64(0); ; {
		info, n, err := d.ReadSnapshot(ctx, uuid, imageID, off, p)
		if err != nil {
			t.Fatalf("reading the snapshot at %d: %v", off, err)
		}
		if info.DiskFormat != "qcow2" {
			t.Errorf("the capture's format: %q", info.DiskFormat)
		}
		if n == 0 {
			if off != info.Size {
				t.Errorf("read %d bytes of %d", off, info.Size)
			}
			break
		}
		buf.Write(p[:n])
		off += int64(n)
	}
	path := filepath.Join(work, imageID+".qcow2")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.ReadSnapshot(ctx, uuid, imageID, 0, p); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the capture after it was read: %v, want it gone", err)
	}
	return path
}

// TestUnshelvedGuestColdMoves unshelves a guest booted from an uploaded
// image onto its shelve's snapshot (real qemu-img, real QEMU), then
// deletes that snapshot as the unshelve does and cold-moves the guest to
// another host, which has never seen the snapshot: the unshelved disk
// was rebased onto the original image's base (Nova's rebase at
// unshelve), so the destination fetches that one and the guest runs
// there (its heartbeat rises). keel's own guest, which has no image to
// rebase onto, is raw again at unshelve and moves with no base. Before,
// the disk stayed an overlay on _base/<snapshot>, and the destination's
// QEMU could not open it.
func TestUnshelvedGuestColdMoves(t *testing.T) {
	ctx := context.Background()
	was := PowerDownWait
	PowerDownWait = 200 * time.Millisecond
	t.Cleanup(func() { PowerDownWait = was })
	images := &imageFiles{}
	src := newDriver(t, Config{Images: images})
	dst := newDriver(t, Config{Images: images})
	work, _, base := testdisk.GuestImage(t)
	const baseID, shelvedID, goneID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000d001", "0b6f2c3e-1d4a-4f1e-8b7a-00000000d002", "0b6f2c3e-1d4a-4f1e-8b7a-00000000d003"
	images.add(t, baseID, "qcow2", base)
	flavor := records.Flavor{ID: "1", Name: "tiny", VCPUs: 1, RAMMB: 64}
	spawn := func(d *Driver, inst records.Instance) {
		t.Helper()
		spawned := make(chan error, 1)
		d.Spawn(ctx, inst, func(err error) { spawned <- err })
		if err := waitDone(t, spawned, 60*time.Second); err != nil {
			t.Fatalf("boot of %s from %q: %v", inst.UUID, inst.DiskImage(), err)
		}
		waitRising(t, d, inst.UUID, 0)
	}
	// shelveUnshelve snapshots inst's guest, destroys it (the offload)
	// and boots it again from the snapshot, which is then deleted.
	shelveUnshelve := func(inst records.Instance) records.Instance {
		t.Helper()
		if err := src.Lifecycle(ctx, inst, lifecycle.OpStop); err != nil {
			t.Fatal(err)
		}
		if err := src.Snapshot(ctx, inst, shelvedID); err != nil {
			t.Fatalf("shelve's snapshot: %v", err)
		}
		images.add(t, shelvedID, "qcow2", readCapture(t, src, work, inst.UUID, shelvedID))
		if err := src.Destroy(ctx, inst.UUID); err != nil {
			t.Fatal(err)
		}
		inst.ShelvedImage = shelvedID
		spawn(src, inst)
		images.drop(shelvedID)
		if err := os.Remove(filepath.Join(src.cfg.Dir, "_base", shelvedID)); err != nil {
			t.Fatal(err)
		}
		inst.ShelvedImage = ""
		return inst
	}
	move := func(inst records.Instance) {
		t.Helper()
		data, err := dst.PrepResize(ctx, inst)
		if err != nil {
			t.Fatal(err)
		}
		copied := make(chan error, 1)
		src.MigrateDiskAndPowerOff(ctx, 1, inst, "dst", data, func(err error) { copied <- err })
		if err := waitDone(t, copied, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := dst.FinishMigration(ctx, inst); err != nil {
			t.Fatalf("finish_resize of the unshelved guest: %v", err)
		}
		waitRising(t, dst, inst.UUID, 0)
	}

	g1 := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-0000000000d1", Name: "unshelved", ImageRef: baseID, Flavor: flavor, VMState: records.VMActive}
	spawn(src, g1)
	g1 = shelveUnshelve(g1)
	disk := filepath.Join(src.cfg.Dir, g1.UUID, fileDisk)
	if info := testdisk.Info(t, disk); info.BackingFilename != filepath.Join("..", "_base", baseID) {
		t.Errorf("the unshelved disk: %+v, want an overlay on the original image's base", info)
	}
	move(g1)
	if n := images.fetched(baseID); n != 2 {
		t.Errorf("the original image was fetched %d times, want once per host", n)
	}

	// keel's own guest (no uploaded image to rebase onto): the unshelved
	// disk is raw again, as its guest boots.
	g2 := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-0000000000d2", Name: "tiny", Flavor: flavor, VMState: records.VMActive}
	spawn(src, g2)
	g2 = shelveUnshelve(g2)
	if info := testdisk.Info(t, filepath.Join(src.cfg.Dir, g2.UUID, fileDisk)); info.Format != "raw" || info.BackingFilename != "" {
		t.Errorf("the unshelved disk of keel's guest: %+v, want raw", info)
	}
	move(g2)
}

// TestUnreadCaptureIsDropped: a snapshot whose capture is never read (it
// failed, its image was deleted, an admin's reset ended it) leaves
// nothing behind once the guest's next snapshot or operation starts: the
// new snapshot keeps only its own capture, a pause removes it too.
// Before, each unread capture stayed in the guest's directory until the
// guest went.
func TestUnreadCaptureIsDropped(t *testing.T) {
	ctx := context.Background()
	shortPowerDown(t)
	d := newDriver(t, Config{})
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-0000000000f3", Name: "snap", Metadata: map[string]string{"keel_guest": "idle"},
		Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
	spawned := make(chan error, 1)
	d.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(d.cfg.Dir, inst.UUID)
	captures := func() []string {
		t.Helper()
		got, err := filepath.Glob(filepath.Join(dir, compute.CapturePattern))
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			got[i] = filepath.Base(got[i])
		}
		return got
	}
	const aborted, next = "0b6f2c3e-1d4a-4f1e-8b7a-00000000f101", "0b6f2c3e-1d4a-4f1e-8b7a-00000000f102"
	if err := d.Snapshot(ctx, inst, aborted); err != nil {
		t.Fatal(err)
	}
	if got := captures(); len(got) != 1 {
		t.Fatalf("after a snapshot: captures %v, want its one", got)
	}
	if err := d.Snapshot(ctx, inst, next); err != nil {
		t.Fatal(err)
	}
	if got := captures(); len(got) != 1 || got[0] != "snapshot-"+next+".qcow2" {
		t.Errorf("after the next snapshot: captures %v, want only its own", got)
	}
	if err := d.Lifecycle(ctx, inst, lifecycle.OpPause); err != nil {
		t.Fatal(err)
	}
	if got := captures(); len(got) != 0 {
		t.Errorf("after a pause: captures %v, want none", got)
	}
}
