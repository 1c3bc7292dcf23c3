package libvirt

import (
	"context"
	"fmt"
	"os"

	"keel/internal/compute"
	"keel/internal/compute/guestdisk"
	"keel/internal/compute/qemu/guest"
	"keel/internal/records"
)

// The cold migration and resize, as the qemu driver does them, with
// libvirt's domains: libvirt's own offline migration moves only the
// definition, so the disk moves as keel's file copy (package guestdisk).
//
//   - prep_resize (destination): checks, the guest's directory made, its
//     disk path handed to the source;
//   - migrate_disk_and_power_off (source): the guest powers off (its
//     domain stays defined, keel's state resizing then resized), its disk
//     is copied to the destination's path;
//   - finish_migration (destination): a domain is defined on the moved
//     disk with the new flavor and started (not for a stopped server);
//   - confirm (source): the stopped domain and its directory go;
//   - finish_revert_migration (source): the domain is redefined with the
//     old flavor and started; revert_resize (destination) is a destroy.
//
// The hosts' driver directories must be one filesystem namespace (as
// `keel dev --driver libvirt` runs them). A resize onto the same host is
// refused at prep_resize.

// PrepResize implements compute.ColdMover.
func (d *Driver) PrepResize(_ context.Context, inst records.Instance) (map[string]string, error) {
	spec, err := guest.Parse(inst.Metadata[guest.MetadataKey])
	if err != nil {
		return nil, err
	}
	if inst.Flavor.RAMMB < spec.MinRAMMB() {
		return nil, fmt.Errorf("%s=%s needs at least %d MiB of RAM, flavor %s has %d", guest.MetadataKey, spec, spec.MinRAMMB(), inst.Flavor.Name, inst.Flavor.RAMMB)
	}
	if x, ok, err := d.lookup(inst.UUID); err != nil {
		return nil, fmt.Errorf("prep_resize of %s: %w", inst.UUID, err)
	} else if ok {
		return nil, fmt.Errorf("a guest of instance %s is already on this host (%s): the libvirt driver cold-moves to another host only", inst.UUID, x.guest().State)
	}
	if err := os.MkdirAll(d.guestDir(inst.UUID), 0o755); err != nil {
		return nil, fmt.Errorf("prep_resize of %s: %w", inst.UUID, err)
	}
	return map[string]string{"driver": "libvirt", guestdisk.MigrateDataKey: d.diskPath(inst.UUID)}, nil
}

// MigrateDiskAndPowerOff implements compute.ColdMover.
func (d *Driver) MigrateDiskAndPowerOff(ctx context.Context, migID int64, inst records.Instance, _ string, data map[string]string, done func(error)) {
	returned := make(chan struct{})
	defer close(returned)
	report := func(err error) {
		if err != nil {
			err = fmt.Errorf("resize_instance of %s: %w", inst.UUID, err)
		}
		go func() { <-returned; done(err) }()
	}
	to := data[guestdisk.MigrateDataKey]
	x, ok, err := d.lookup(inst.UUID)
	if err != nil {
		report(err)
		return
	}
	state := compute.GuestState("")
	if ok {
		state = x.guest().State
	}
	switch {
	case state != compute.GuestRunning && state != compute.GuestStopped && state != compute.GuestResizing:
		report(fmt.Errorf("the guest is not running or stopped here (%q)", state))
		return
	case to == "":
		report(fmt.Errorf("the destination gave no disk path"))
		return
	}
	if err := guestdisk.CheckTarget(to, inst.UUID); err != nil {
		report(fmt.Errorf("refusing the destination's disk path: %w", err))
		return
	}
	m := x.m
	m.State, m.Migration = stResizing, migID
	if err := d.setMeta(x, m); err != nil {
		report(err)
		return
	}
	bg := context.WithoutCancel(ctx)
	go func() {
		err := d.powerDown(bg, x)
		poweredDown := err == nil
		if err == nil {
			err = guestdisk.Copy(d.diskPath(inst.UUID), to)
		}
		if err == nil {
			// Where the destination copies the base from if the image
			// is gone from the image service (Nova's fallback).
			err = d.images.NoteSourceBase(bg, d.diskPath(inst.UUID), to)
		}
		if cur, ok, lerr := d.lookup(inst.UUID); lerr != nil || !ok {
			err = fmt.Errorf("the guest was destroyed while its disk moved")
		} else {
			m := cur.m
			if poweredDown {
				m.State = stResized // stopped, its disk intact: the revert starts it
			} else {
				m.State, m.Migration = "", 0
			}
			if merr := d.setMeta(cur, m); merr != nil && err == nil {
				err = merr
			}
		}
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
	if x, ok, err := d.lookup(inst.UUID); err != nil {
		return fmt.Errorf("finish_resize of %s: %w", inst.UUID, err)
	} else if ok {
		g := x.guest()
		if g.State == want && g.Flavor.ID == inst.Flavor.ID {
			return nil // a repeat
		}
		return fmt.Errorf("finish_resize of %s: a guest of it is here already (%s)", inst.UUID, g.State)
	}
	if _, err := os.Stat(d.diskPath(inst.UUID)); err != nil {
		return fmt.Errorf("finish_resize of %s: no disk was moved here: %w", inst.UUID, err)
	}
	// A moved overlay names its base relatively: this host needs its own
	// copy of the one the disk names (none for a whole disk).
	if _, err := d.images.BaseOf(ctx, inst.UUID, d.diskPath(inst.UUID)); err != nil {
		return fmt.Errorf("finish_resize of %s: %w", inst.UUID, err)
	}
	ld, err := d.define(inst, meta{State: stBuilding})
	if err != nil {
		return fmt.Errorf("finish_resize of %s: %w", inst.UUID, err)
	}
	if want == compute.GuestStopped {
		if x, ok, err := d.lookup(inst.UUID); err == nil && ok {
			m := x.m
			m.State = ""
			return d.setMeta(x, m)
		}
		return nil
	}
	if err := d.start(ld, inst.UUID); err != nil {
		if x, ok, lerr := d.lookup(inst.UUID); lerr == nil && ok {
			_ = d.undefine(x)
		}
		return fmt.Errorf("finish_resize of %s: %w", inst.UUID, err)
	}
	return nil
}

// ConfirmMigration implements compute.ColdMover: the stopped source
// domain and its directory go (a repeat finds nothing).
func (d *Driver) ConfirmMigration(ctx context.Context, uuid string) error {
	x, ok, err := d.lookup(uuid)
	if err != nil {
		return err
	}
	if !ok || (x.m.State != stResized && x.m.State != stResizing) {
		return nil
	}
	return d.Destroy(ctx, uuid)
}

// FinishRevertMigration implements compute.ColdMover: the source domain is
// redefined with inst's (old) flavor and started again on its own disk,
// or stays stopped for a stopped instance.
func (d *Driver) FinishRevertMigration(ctx context.Context, inst records.Instance) error {
	want := compute.MovedGuestState(inst)
	x, ok, err := d.lookup(inst.UUID)
	if err != nil {
		return fmt.Errorf("finish_revert_resize of %s: %w", inst.UUID, err)
	}
	if !ok {
		return fmt.Errorf("finish_revert_resize of %s: no guest of it here to start again", inst.UUID)
	}
	g := x.guest()
	if g.State == want && g.Flavor.ID == inst.Flavor.ID {
		return nil // a repeat
	}
	if err := d.destroyProcess(x); err != nil { // a QEMU a crash left running
		return fmt.Errorf("finish_revert_resize of %s: %w", inst.UUID, err)
	}
	boot := inst
	boot.Metadata = map[string]string{guest.MetadataKey: x.m.Program}
	boot.Name, boot.ImageRef = x.m.Name, x.m.Image
	ld, err := d.define(boot, meta{State: stBuilding, Program: x.m.Program, Image: x.m.Image})
	if err != nil {
		return fmt.Errorf("finish_revert_resize of %s: %w", inst.UUID, err)
	}
	if want == compute.GuestStopped {
		if x, ok, err := d.lookup(inst.UUID); err == nil && ok {
			m := x.m
			m.State = ""
			return d.setMeta(x, m)
		}
		return nil
	}
	if err := d.start(ld, inst.UUID); err != nil {
		return fmt.Errorf("finish_revert_resize of %s: %w", inst.UUID, err)
	}
	return nil
}
