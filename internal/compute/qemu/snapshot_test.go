package qemu

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	read := func(uuid, imageID string) string {
		t.Helper()
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
