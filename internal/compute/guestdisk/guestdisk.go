// Package guestdisk is the guest disk file the real virt drivers (qemu,
// libvirt) keep per instance, DIR/<instance UUID>/disk.img, and the copy
// that moves it to another host in a cold migration or resize: the
// destination names the path (prep_resize's migrate data, MigrateDataKey),
// the source checks it (CheckTarget) and writes it whole or not at all
// (Copy). A guest booted from an uploaded image has a qcow2 overlay as
// its disk, on the host's copy of the image in DIR/_base (Images).
package guestdisk

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// File is the disk image's name in a guest's directory.
const File = "disk.img"

// MigrateDataKey is the migrate data key naming where the disk goes.
const MigrateDataKey = "disk_path"

// CheckTarget refuses a disk path the destination's prep_resize
// answer gives unless it is where a driver keeps this instance's disk
// (an absolute, clean DIR/<instance UUID>/disk whose directory is a real
// one, and which is a regular file if it exists): the source writes
// there, so one host must not be able to make another overwrite any
// other file.
func CheckTarget(to, uuid string) error {
	if !filepath.IsAbs(to) || filepath.Clean(to) != to || filepath.Base(to) != File || filepath.Base(filepath.Dir(to)) != uuid {
		return fmt.Errorf("%q is not a driver directory's %s/%s", to, uuid, File)
	}
	if fi, err := os.Lstat(filepath.Dir(to)); err != nil || !fi.IsDir() {
		return fmt.Errorf("%q: its directory is not a directory (%v)", to, err)
	}
	if fi, err := os.Lstat(to); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%q exists and is not a regular file", to)
	}
	return nil
}

// Copy copies from to to, through a file beside it (made anew, never
// through a link) that is synced and then renamed, so to is whole or
// absent; a failed copy leaves no part file.
func Copy(from, to string) (err error) {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("reading the disk: %w", err)
	}
	defer in.Close()
	tmp := to + ".part"
	_ = os.Remove(tmp) // an earlier attempt's (a link is removed, not followed)
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("writing the disk at the destination: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying the disk: %w", err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("copying the disk: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copying the disk: %w", err)
	}
	return os.Rename(tmp, to)
}
