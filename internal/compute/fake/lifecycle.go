package fake

import (
	"context"
	"fmt"
	"slices"
	"time"

	"keel/internal/compute"
	"keel/internal/lifecycle"
	"keel/internal/records"
)

// Lifecycle implements compute.LifecycleDriver: the operation takes
// LifecycleTime (StepTime when not set), then the guest's state becomes
// the operation's target, saved in the state file; a crash meanwhile
// leaves the guest as it was, and a repeat of the operation does it
// then. FailNext(op, …) makes it fail after its time, the guest
// unchanged; Hold(op) holds it. A rescue records the rescue disk the
// instance asks for on the guest (Guest.Rescue), an unrescue drops it.
func (d *Driver) Lifecycle(ctx context.Context, inst records.Instance, op string) error {
	target, from, ok := compute.LifecycleTarget(op)
	if !ok {
		return fmt.Errorf("%s of %s: unknown operation", op, inst.UUID)
	}
	d.mu.Lock()
	g, ok := d.guests[inst.UUID]
	if !ok {
		d.mu.Unlock()
		return fmt.Errorf("%s of %s: no guest on this host", op, inst.UUID)
	}
	if g.State == target && !compute.Repeats(op) {
		d.mu.Unlock()
		return nil // done before (a repeat)
	}
	if !slices.Contains(from, g.State) {
		state := g.State
		d.mu.Unlock()
		return fmt.Errorf("%s of %s: the guest is %s", op, inst.UUID, state)
	}
	d.mu.Unlock()
	wait := d.cfg.LifecycleTime
	if wait <= 0 {
		wait = d.cfg.StepTime
	}
	if err := d.sleep(ctx, wait); err != nil {
		return fmt.Errorf("%s of %s: %w", op, inst.UUID, err)
	}
	if err := d.held(ctx, op); err != nil {
		return fmt.Errorf("%s of %s: %w", op, inst.UUID, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(op, inst.UUID); err != nil {
		return err
	}
	g, ok = d.guests[inst.UUID]
	if !ok {
		return fmt.Errorf("%s of %s: the guest was destroyed meanwhile", op, inst.UUID)
	}
	prev, prevRescue := g.State, g.Rescue
	if prev != target && !slices.Contains(from, prev) {
		return fmt.Errorf("%s of %s: the guest became %s meanwhile", op, inst.UUID, prev)
	}
	g.State = target
	switch op {
	case lifecycle.OpRescue:
		// Recorded as a real driver boots it: the rescue disk, and the
		// guest's own disk kept attached.
		g.Rescue = &records.Rescue{}
		if inst.Rescue != nil {
			*g.Rescue = *inst.Rescue
		}
	case lifecycle.OpUnrescue:
		g.Rescue = nil
	}
	if err := d.saveLocked(); err != nil {
		g.State, g.Rescue = prev, prevRescue
		return fmt.Errorf("%s of %s: %w", op, inst.UUID, err)
	}
	d.consoleEventLocked(inst.UUID, op, target)
	return nil
}

// sleep waits wait on the driver's clock.
func (d *Driver) sleep(ctx context.Context, wait time.Duration) error {
	if wait <= 0 {
		return nil
	}
	done := make(chan struct{})
	t := d.cfg.Clock.AfterFunc(wait, func() { close(done) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}
