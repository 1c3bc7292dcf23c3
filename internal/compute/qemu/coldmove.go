package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"keel/internal/compute"
	"keel/internal/compute/guestdisk"
	"keel/internal/compute/qemu/guest"
	"keel/internal/records"
)

// The cold migration and resize, as Nova's libvirt driver does them:
//
//   - prep_resize (destination): checks, then the guest's directory is
//     made and its path handed to the source (migrate data "disk_path");
//   - migrate_disk_and_power_off (source): the guest powers off (its QEMU
//     ends as a stop's does), its disk image is copied to the destination's
//     path (written aside, synced, renamed), and the stopped guest stays
//     here (resized) until confirm or revert;
//   - finish_migration (destination): a QEMU starts on the moved disk with
//     the new flavor's RAM and vCPUs (not started for a stopped server);
//   - confirm (source): the stopped guest and its directory go;
//   - finish_revert_migration (source): the stopped guest starts again on
//     its own disk with the old flavor; revert_resize (destination) is a
//     destroy.
//
// The disk moves as a file: the hosts' driver directories must be on one
// filesystem namespace (as the live migration's unix sockets need them),
// which is what `keel dev --driver qemu` runs. A resize onto the same host
// is refused at prep_resize.

// migrateDataDisk is the migrate data key naming where the disk goes.
const migrateDataDisk = guestdisk.MigrateDataKey

// PrepResize implements compute.ColdMover.
func (d *Driver) PrepResize(_ context.Context, inst records.Instance) (map[string]string, error) {
	spec, err := guest.Parse(inst.Metadata[guest.MetadataKey])
	if err != nil {
		return nil, err
	}
	if inst.Flavor.RAMMB < spec.MinRAMMB() {
		return nil, fmt.Errorf("%s=%s needs at least %d MiB of RAM, flavor %s has %d", guest.MetadataKey, spec, spec.MinRAMMB(), inst.Flavor.Name, inst.Flavor.RAMMB)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.vms[inst.UUID]; ok {
		return nil, fmt.Errorf("a guest of instance %s is already on this host (%s): the QEMU driver cold-moves to another host only", inst.UUID, v.st.Guest.State)
	}
	dir := d.guestDir(inst.UUID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("prep_resize of %s: %w", inst.UUID, err)
	}
	return map[string]string{"driver": "qemu", migrateDataDisk: filepath.Join(dir, fileDisk)}, nil
}

// MigrateDiskAndPowerOff implements compute.ColdMover.
func (d *Driver) MigrateDiskAndPowerOff(ctx context.Context, migID int64, inst records.Instance, _ string, data map[string]string, done func(error)) {
	returned := make(chan struct{})
	defer close(returned)
	report := func(err error) { go func() { <-returned; done(err) }() }
	to := data[migrateDataDisk]
	d.mu.Lock()
	v, ok := d.vms[inst.UUID]
	var state compute.GuestState
	if ok {
		state = v.st.Guest.State
	}
	switch {
	case !ok || (state != compute.GuestRunning && state != compute.GuestStopped && state != compute.GuestResizing):
		d.mu.Unlock()
		report(fmt.Errorf("resize_instance of %s: the guest is not running or stopped here (%q)", inst.UUID, state))
		return
	case to == "":
		d.mu.Unlock()
		report(fmt.Errorf("resize_instance of %s: the destination gave no disk path", inst.UUID))
		return
	}
	if err := guestdisk.CheckTarget(to, inst.UUID); err != nil {
		d.mu.Unlock()
		report(fmt.Errorf("resize_instance of %s: refusing the destination's disk path: %w", inst.UUID, err))
		return
	}
	// The state first: an agent restarted meanwhile keeps the guest (no
	// process expected) for the revert that starts it again.
	v.st.Guest.State, v.st.Guest.MigrationID = compute.GuestResizing, migID
	d.saveLocked(v)
	d.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	go func() {
		err := d.powerDown(bg, v)
		poweredDown := err == nil
		if err == nil {
			err = guestdisk.Copy(filepath.Join(v.dir, fileDisk), to)
		}
		if err == nil {
			// Where the destination copies the base from if the image
			// is gone from the image service (Nova's fallback).
			err = d.images.NoteSourceBase(bg, filepath.Join(v.dir, fileDisk), to)
		}
		d.mu.Lock()
		switch {
		case d.vms[inst.UUID] != v:
			err = fmt.Errorf("the guest was destroyed while its disk moved")
		case poweredDown:
			// Stopped here, its disk intact whether or not the copy
			// worked: the revert (or a failed move's rollback) starts it.
			v.st.Guest.State = compute.GuestResized
			d.saveLocked(v)
		default:
			// Still running: as before the move.
			v.st.Guest.State, v.st.Guest.MigrationID = state, 0
			d.saveLocked(v)
		}
		d.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("resize_instance of %s: %w", inst.UUID, err)
		} else {
			d.log.Info("cold move: guest powered off, disk copied", "instance", inst.UUID, "migration", migID, "to", to)
		}
		<-returned
		done(err)
	}()
}

// FinishMigration implements compute.ColdMover.
func (d *Driver) FinishMigration(ctx context.Context, inst records.Instance) error {
	want := compute.MovedGuestState(inst)
	d.mu.Lock()
	if v, ok := d.vms[inst.UUID]; ok {
		st := v.st.Guest
		d.mu.Unlock()
		if st.State == want && st.Flavor.ID == inst.Flavor.ID {
			return nil // a repeat
		}
		return fmt.Errorf("finish_resize of %s: a guest of it is here already (%s)", inst.UUID, st.State)
	}
	dir := d.guestDir(inst.UUID)
	if _, err := os.Stat(filepath.Join(dir, fileDisk)); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("finish_resize of %s: no disk was moved here: %w", inst.UUID, err)
	}
	state := compute.GuestBuilding
	if want == compute.GuestStopped {
		state = compute.GuestStopped
	}
	v := &vm{dir: dir, st: vmState{Program: inst.Metadata[guest.MetadataKey], Image: imageOf(inst),
		Guest: compute.Guest{UUID: inst.UUID, Name: inst.Name, Flavor: inst.Flavor, State: state}}}
	d.vms[inst.UUID] = v
	d.saveLocked(v)
	delete(d.gone, inst.UUID)
	d.mu.Unlock()
	if state == compute.GuestStopped {
		return nil
	}
	if err := d.launchDisk(ctx, v, inst, false, true); err != nil {
		d.mu.Lock()
		if d.vms[inst.UUID] == v {
			delete(d.vms, inst.UUID)
		}
		d.mu.Unlock()
		_ = d.stop(v)
		return fmt.Errorf("finish_resize of %s: %w", inst.UUID, err)
	}
	d.mu.Lock()
	v.st.Guest.State = compute.GuestRunning
	d.saveLocked(v)
	d.mu.Unlock()
	return nil
}

// ConfirmMigration implements compute.ColdMover: the stopped source guest
// and its directory go (a repeat finds nothing).
func (d *Driver) ConfirmMigration(ctx context.Context, uuid string) error {
	d.mu.Lock()
	v, ok := d.vms[uuid]
	moved := ok && (v.st.Guest.State == compute.GuestResized || v.st.Guest.State == compute.GuestResizing)
	d.mu.Unlock()
	if !moved {
		return nil
	}
	return d.Destroy(ctx, uuid)
}

// FinishRevertMigration implements compute.ColdMover: the source guest
// starts again on its own disk with inst's (old) flavor, or stays stopped
// for a stopped instance.
func (d *Driver) FinishRevertMigration(ctx context.Context, inst records.Instance) error {
	want := compute.MovedGuestState(inst)
	d.mu.Lock()
	v, ok := d.vms[inst.UUID]
	if !ok {
		d.mu.Unlock()
		return fmt.Errorf("finish_revert_resize of %s: no guest of it here to start again", inst.UUID)
	}
	if v.st.Guest.State == want && v.st.Guest.Flavor.ID == inst.Flavor.ID && (want == compute.GuestStopped || v.alive()) {
		d.mu.Unlock()
		return nil // a repeat
	}
	v.st.Guest.Flavor, v.st.Guest.MigrationID = inst.Flavor, 0
	d.mu.Unlock()
	if err := d.powerDown(ctx, v); err != nil { // a QEMU a crash left running
		return fmt.Errorf("finish_revert_resize of %s: %w", inst.UUID, err)
	}
	if want == compute.GuestRunning {
		boot := inst
		own := d.instanceOf(v)
		boot.Metadata, boot.ImageRef = own.Metadata, own.ImageRef
		if err := d.launchDisk(ctx, v, boot, false, true); err != nil {
			return fmt.Errorf("finish_revert_resize of %s: %w", inst.UUID, err)
		}
	}
	d.mu.Lock()
	v.st.Guest.State = want
	d.saveLocked(v)
	d.mu.Unlock()
	return nil
}
