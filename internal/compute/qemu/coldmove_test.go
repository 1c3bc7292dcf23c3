package qemu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/guestdisk"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/testdisk"
)

// TestColdMoves resizes a real QEMU guest between two drivers (two hosts'
// agents in one process): the source powers it off and copies its disk
// (a marker written past the boot image arrives with it), the destination
// starts it on that disk with the new flavor's RAM and vCPUs (QEMU says so)
// and it runs (its heartbeat rises). A revert starts it again on its
// source with the old flavor; a cold migration confirmed drops the
// source's guest and directory; a stopped server's guest arrives stopped,
// with no process. A driver restarted while its guest is resized keeps it.
func TestColdMoves(t *testing.T) {
	ctx := context.Background()
	shortPowerDown(t)
	src := newDriver(t, Config{})
	dst := newDriver(t, Config{})
	small := records.Flavor{ID: "1", Name: "tiny", VCPUs: 1, RAMMB: 64}
	big := records.Flavor{ID: "2", Name: "bigger", VCPUs: 2, RAMMB: 96}
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-00000000000c", Name: "g1", Metadata: map[string]string{"keel_guest": "idle"},
		Flavor: small, VMState: records.VMActive}
	spawned := make(chan error, 1)
	src.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitRising(t, src, inst.UUID, 0)
	marker := []byte("keel cold move marker")
	f, err := os.OpenFile(filepath.Join(src.cfg.Dir, inst.UUID, fileDisk), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(marker); err != nil {
		t.Fatal(err)
	}
	f.Close()

	stateOf := func(d *Driver) compute.GuestState {
		gs, _ := d.Guests(ctx)
		for _, g := range gs {
			if g.UUID == inst.UUID {
				return g.State
			}
		}
		return ""
	}
	// size reads the running guest's RAM and vCPUs from QEMU.
	size := func(d *Driver) (ramMB int64, vcpus int) {
		t.Helper()
		d.mu.Lock()
		v := d.vms[inst.UUID]
		d.mu.Unlock()
		var mem struct {
			Base int64 `json:"base-memory"`
		}
		if err := d.execute(ctx, v, "query-memory-size-summary", nil, &mem); err != nil {
			t.Fatal(err)
		}
		var cpus []map[string]any
		if err := d.execute(ctx, v, "query-cpus-fast", nil, &cpus); err != nil {
			t.Fatal(err)
		}
		return mem.Base >> 20, len(cpus)
	}
	// move runs prep_resize on to and migrate_disk_and_power_off on from.
	move := func(from, to *Driver, moved records.Instance) {
		t.Helper()
		data, err := to.PrepResize(ctx, moved)
		if err != nil {
			t.Fatal(err)
		}
		copied := make(chan error, 1)
		from.MigrateDiskAndPowerOff(ctx, 1, inst, "dst", data, func(err error) { copied <- err })
		if err := waitDone(t, copied, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if s := stateOf(from); s != compute.GuestResized {
			t.Fatalf("source guest %q after the disk moved, want resized", s)
		}
		if n := KillAll(from.cfg.Dir); n != 0 {
			t.Fatalf("the source left %d QEMU running after powering the guest off", n)
		}
	}

	resized := inst
	resized.Flavor = big
	move(src, dst, resized)
	disk, err := os.ReadFile(filepath.Join(dst.cfg.Dir, inst.UUID, fileDisk))
	if err != nil || !bytes.HasSuffix(disk, marker) {
		t.Fatalf("the destination's disk (%d bytes, %v) does not end with the source's marker", len(disk), err)
	}
	again, err := New(Config{Dir: src.cfg.Dir})
	if err != nil {
		t.Fatal(err)
	}
	if s := stateOf(again); s != compute.GuestResized {
		t.Fatalf("a restarted source driver sees the resized guest as %q", s)
	}
	if err := dst.FinishMigration(ctx, resized); err != nil {
		t.Fatal(err)
	}
	if ram, cpus := size(dst); ram != big.RAMMB || cpus != int(big.VCPUs) {
		t.Fatalf("resized guest runs with %d MiB and %d vCPUs, want %d and %d", ram, cpus, big.RAMMB, big.VCPUs)
	}
	waitRising(t, dst, inst.UUID, 0)
	if err := dst.FinishMigration(ctx, resized); err != nil {
		t.Fatalf("a repeated finish_resize: %v", err)
	}

	// Revert: the destination's guest goes, the source's runs again small.
	if err := dst.Destroy(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	if err := again.FinishRevertMigration(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if ram, cpus := size(again); ram != small.RAMMB || cpus != int(small.VCPUs) || stateOf(again) != compute.GuestRunning {
		t.Fatalf("reverted guest %s with %d MiB and %d vCPUs, want running with %d and %d", stateOf(again), ram, cpus, small.RAMMB, small.VCPUs)
	}
	waitRising(t, again, inst.UUID, 0)
	if _, err := os.Stat(filepath.Join(dst.cfg.Dir, inst.UUID)); !os.IsNotExist(err) {
		t.Fatalf("the reverted destination keeps the guest's directory (%v)", err)
	}

	// A cold migration of the stopped server, confirmed: it arrives
	// stopped (no QEMU), the source's guest and directory go.
	stopped := inst
	stopped.VMState = records.VMStopped
	if err := again.Lifecycle(ctx, inst, lifecycle.OpStop); err != nil {
		t.Fatal(err)
	}
	move(again, dst, stopped)
	if err := dst.FinishMigration(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(dst); s != compute.GuestStopped {
		t.Fatalf("a stopped server's guest arrived %q, want stopped", s)
	}
	if n := KillAll(dst.cfg.Dir); n != 0 {
		t.Fatalf("a stopped server's guest runs %d QEMU at the destination", n)
	}
	if err := again.ConfirmMigration(ctx, inst.UUID); err != nil {
		t.Fatal(err)
	}
	if gs, _ := again.Guests(ctx); len(gs) != 0 {
		t.Fatalf("the confirmed source keeps guests %+v", gs)
	}
	if _, err := os.Stat(filepath.Join(src.cfg.Dir, inst.UUID)); !os.IsNotExist(err) {
		t.Fatalf("the confirmed source keeps the guest's directory (%v)", err)
	}
	// It starts where it arrived, from the moved disk's guest program.
	if err := dst.Lifecycle(ctx, stopped, lifecycle.OpStart); err != nil {
		t.Fatal(err)
	}
	waitRising(t, dst, inst.UUID, 0)

	// A resize onto the guest's own host is refused.
	if _, err := dst.PrepResize(ctx, resized); err == nil {
		t.Fatal("prep_resize onto the guest's own host was accepted")
	}
}

// TestColdMoveFetchesDeletedImageFromSource: a guest booted from an
// uploaded image deleted since is cold-moved to a host that never
// fetched the image: the destination, finding no image in the image
// service, copies the base from the move's source host (Nova's
// fallback_from_host), and the guest boots there on its moved overlay.
// Before, finish_migration failed ("fetching image …: no image") and the
// move reverted.
func TestColdMoveFetchesDeletedImageFromSource(t *testing.T) {
	ctx := context.Background()
	shortPowerDown(t)
	images := &imageFiles{}
	src := newDriver(t, Config{Images: images})
	dst := newDriver(t, Config{Images: images})
	_, _, qcow := testdisk.GuestImage(t)
	const imageID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000f001"
	images.add(t, imageID, "qcow2", qcow)
	inst := records.Instance{UUID: "6f0c1c6e-0000-4000-8000-0000000000f1", Name: "orphan", ImageRef: imageID,
		Flavor: records.Flavor{ID: "1", Name: "tiny", VCPUs: 1, RAMMB: 64}, VMState: records.VMActive}
	spawned := make(chan error, 1)
	src.Spawn(ctx, inst, func(err error) { spawned <- err })
	if err := waitDone(t, spawned, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitRising(t, src, inst.UUID, 0)
	images.drop(imageID)

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
		t.Fatalf("finish_migration of a guest whose image is gone: %v", err)
	}
	waitRising(t, dst, inst.UUID, 0)
	base := filepath.Join(dst.cfg.Dir, guestdisk.BaseDir, imageID)
	if info := testdisk.Info(t, base); info.Format != "raw" {
		t.Errorf("the destination's base %s is %+v, want the source's raw copy", base, info)
	}
	if n := images.fetched(imageID); n != 2 {
		t.Errorf("the image service was asked %d times, want twice (the source's boot, the destination's try)", n)
	}
	if _, err := os.Stat(filepath.Join(dst.cfg.Dir, inst.UUID, fileDisk+guestdisk.SourceBaseSuffix)); !os.IsNotExist(err) {
		t.Errorf("the source's note stayed beside the moved disk (%v)", err)
	}
}
