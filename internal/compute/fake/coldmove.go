package fake

import (
	"context"
	"fmt"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/workload"
	"keel/internal/records"
)

// Steps of a cold migration or resize that can fail (FailNext).
const (
	StepPrepResize   = "prep_resize"
	StepResize       = "resize_instance"
	StepFinishResize = "finish_resize"
)

// DiskTime is how long moving a disk of diskGB takes at the driver's
// bandwidth (the memory copy's).
func (d *Driver) DiskTime(diskGB int64) time.Duration {
	return d.CopyTime(diskGB * 1024)
}

// PrepResize implements compute.ColdMover: the destination's checks (an
// injected fault, the hypervisor's memory for the new flavor), after
// StepTime.
func (d *Driver) PrepResize(ctx context.Context, inst records.Instance) (map[string]string, error) {
	if err := d.takeTime(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(StepPrepResize, inst.UUID); err != nil {
		return nil, err
	}
	if g, ok := d.guests[inst.UUID]; ok && g.State != compute.GuestResized {
		return nil, fmt.Errorf("prep_resize of %s: a guest of this instance is already here (%s)", inst.UUID, g.State)
	}
	return nil, d.memoryFor(inst)
}

// MigrateDiskAndPowerOff implements compute.ColdMover: the guest stops,
// and its disk takes DiskTime to move; done reports the end on the clock.
func (d *Driver) MigrateDiskAndPowerOff(_ context.Context, migID int64, inst records.Instance, _ string, _ map[string]string, done func(error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fail := d.takeFault(StepResize, inst.UUID)
	g, ok := d.guests[inst.UUID]
	if fail == nil && (!ok || (g.State != compute.GuestRunning && g.State != compute.GuestStopped)) {
		fail = fmt.Errorf("resize_instance of %s: guest is not running or stopped here", inst.UUID)
	}
	if fail != nil {
		d.cfg.Clock.AfterFunc(0, func() { done(fail) })
		return
	}
	prev := *g
	g.State, g.MigrationID = compute.GuestResizing, migID
	if err := d.saveLocked(); err != nil {
		*g = prev
		err = fmt.Errorf("resize_instance of %s: %w", inst.UUID, err)
		d.cfg.Clock.AfterFunc(0, func() { done(err) })
		return
	}
	d.cfg.Clock.AfterFunc(d.DiskTime(int64(inst.Flavor.DiskGB)), func() {
		d.mu.Lock()
		var err error
		if g, ok := d.guests[inst.UUID]; !ok || g.State != compute.GuestResizing {
			err = fmt.Errorf("resize_instance of %s: the guest went away while its disk moved", inst.UUID)
		} else {
			g.State = compute.GuestResized
			if serr := d.saveLocked(); serr != nil {
				g.State = compute.GuestResizing
				err = fmt.Errorf("resize_instance of %s: %w", inst.UUID, serr)
			}
		}
		d.mu.Unlock()
		done(err)
	})
}

// FinishMigration implements compute.ColdMover: after StepTime the guest
// runs here with inst's flavor (on its own host, the one guest restarts
// resized), or, for a stopped instance, is here stopped. A repeat after a
// restart finds it so and takes no time.
func (d *Driver) FinishMigration(ctx context.Context, inst records.Instance) error {
	if d.finished(inst) {
		return nil
	}
	if err := d.takeTime(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(StepFinishResize, inst.UUID); err != nil {
		return err
	}
	state := compute.MovedGuestState(inst)
	if g, ok := d.guests[inst.UUID]; ok && g.State == state && g.Flavor.ID == inst.Flavor.ID {
		return nil // a repeat that overtook this one
	}
	prev, had := d.guests[inst.UUID]
	d.guests[inst.UUID] = &compute.Guest{UUID: inst.UUID, Name: inst.Name, Flavor: inst.Flavor, State: state, Workload: inst.Metadata[workload.Key]}
	if err := d.saveLocked(); err != nil {
		if had {
			d.guests[inst.UUID] = prev
		} else {
			delete(d.guests, inst.UUID)
		}
		return fmt.Errorf("finish_resize of %s: %w", inst.UUID, err)
	}
	return nil
}

// finished reports whether inst's guest is already here as a finished
// move leaves it, with its flavor (a repeated finish_resize or
// finish_revert_resize).
func (d *Driver) finished(inst records.Instance) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[inst.UUID]
	return ok && g.State == compute.MovedGuestState(inst) && g.MigrationID == 0 && g.Flavor.ID == inst.Flavor.ID
}

// ConfirmMigration implements compute.ColdMover: the stopped source guest
// goes after StepTime (a repeat finds nothing to do).
func (d *Driver) ConfirmMigration(ctx context.Context, uuid string) error {
	d.mu.Lock()
	g, ok := d.guests[uuid]
	moved := ok && (g.State == compute.GuestResized || g.State == compute.GuestResizing)
	d.mu.Unlock()
	if !moved {
		return nil
	}
	if err := d.takeTime(ctx); err != nil {
		return err
	}
	return d.Destroy(ctx, uuid)
}

// FinishRevertMigration implements compute.ColdMover: after StepTime the
// stopped source guest runs again with inst's (old) flavor (or stays
// stopped, for a stopped instance).
func (d *Driver) FinishRevertMigration(ctx context.Context, inst records.Instance) error {
	if d.finished(inst) {
		return nil
	}
	if err := d.takeTime(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[inst.UUID]
	if !ok {
		return fmt.Errorf("finish_revert_resize of %s: no guest of it here to start again", inst.UUID)
	}
	prev := *g
	g.State, g.MigrationID, g.Flavor = compute.MovedGuestState(inst), 0, inst.Flavor
	if err := d.saveLocked(); err != nil {
		*g = prev
		return fmt.Errorf("finish_revert_resize of %s: %w", inst.UUID, err)
	}
	return nil
}
