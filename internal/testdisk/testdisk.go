// Package testdisk gives tests real disks: a filesystem that fills up, a
// small tmpfs mounted for the test and unmounted at its end (Mount), and
// keel's guest as a raw disk and a qcow2 image (GuestImage) with
// qemu-img to make and read images (QemuImg, Info; guest.go). Mounting
// needs root; without it the test fails saying so (nothing else makes a
// real full disk, and a skipped fault test would hide the fault).
package testdisk

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"keel/internal/testenv"
)

// Disk is a mounted tmpfs.
type Disk struct {
	t   testing.TB
	Dir string
}

// Mount mounts a tmpfs of sizeKB KiB on a new temporary directory, and
// unmounts it when the test ends.
func Mount(t testing.TB, sizeKB int) *Disk {
	t.Helper()
	testenv.External(t, "root and mount(8), for a small tmpfs")
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: it mounts a small tmpfs to fill a real filesystem (run the tests as root)")
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.Itoa(sizeKB)+"k", "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mounting a %d KiB tmpfs on %s (needs root and mount(8)): %v: %s", sizeKB, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
	return &Disk{t: t, Dir: dir}
}

func (d *Disk) filler() string { return filepath.Join(d.Dir, ".filler") }

// Fill writes a file until the filesystem has no byte left.
func (d *Disk) Fill() {
	d.t.Helper()
	f, err := os.OpenFile(d.filler(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{1}, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				d.t.Fatalf("filling %s: %v", d.Dir, err)
			}
			break
		}
	}
	for {
		if _, err := f.Write([]byte{1}); err != nil {
			break
		}
	}
}

// Free removes what Fill wrote.
func (d *Disk) Free() {
	d.t.Helper()
	if err := os.Remove(d.filler()); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.t.Fatal(err)
	}
}
