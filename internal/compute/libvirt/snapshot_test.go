package libvirt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"keel/internal/testdisk"
)

// TestSnapshotBootsAgain snapshots a running libvirt guest booted from
// an uploaded qcow2 image: it runs on after its pause, the capture is
// read whole, and a guest booted from it as an image runs. Before, the
// driver had no snapshot_instance.
func TestSnapshotBootsAgain(t *testing.T) {
	ctx := context.Background()
	images := fileImages{}
	d := newDriver(t, "h01", Config{PowerDownWait: 200 * time.Millisecond, Images: images})
	work, _, qcow := testdisk.GuestImage(t)
	const imageID, snapID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000e001", "0b6f2c3e-1d4a-4f1e-8b7a-00000000e002"
	images.add(t, imageID, "qcow2", qcow)
	inst := instance("5a1f0c6e-0000-4000-8000-0000000000e1", "")
	inst.ImageRef = imageID
	spawn(t, d, inst)
	hb := waitRising(t, d, inst.UUID, 0)
	if err := d.Snapshot(ctx, inst, snapID); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	waitRising(t, d, inst.UUID, hb)
	var buf bytes.Buffer
	p := make([]byte, 64<<10)
	for off := int64(0); ; {
		_, n, err := d.ReadSnapshot(ctx, inst.UUID, snapID, off, p)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		buf.Write(p[:n])
		off += int64(n)
	}
	snap := filepath.Join(work, "snap.qcow2")
	if err := os.WriteFile(snap, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	images.add(t, snapID, "qcow2", snap)
	again := instance("5a1f0c6e-0000-4000-8000-0000000000e2", "")
	again.ImageRef = snapID
	spawn(t, d, again)
	waitRising(t, d, again.UUID, 0)
}
