package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/qemu/guest"
	"keel/internal/lifecycle"
	"keel/internal/records"
)

// fileSuspend holds a suspended guest's state (its RAM and devices, as
// QEMU's migration stream writes them).
const fileSuspend = "suspend.state"

// PowerDownWait is how long a stop waits for the guest to power off
// after the ACPI power button (system_powerdown) before its QEMU is
// killed, as Nova's clean shutdown does with shutdown_timeout.
var PowerDownWait = time.Second

// Lifecycle implements compute.LifecycleDriver:
//
//   - pause / unpause: QMP stop / cont;
//   - stop, shelve: system_powerdown, then the QEMU process ends (killed
//     after PowerDownWait); the guest's directory and disk stay;
//   - start: a new QEMU on the same disk;
//   - suspend: the guest is paused and its state saved to a file in its
//     directory (QMP migrate to "exec:cat > suspend.state"), then its
//     QEMU ends; resume starts a QEMU that loads the file (-incoming
//     defer, migrate-incoming) and continues the guest;
//   - reboot: soft is QMP system_reset, hard a new QEMU process;
//   - rescue: a new QEMU booting a rescue disk made of the rescue image
//     (an overlay on its base; keel's guest program for the built-in
//     image), the guest's own disk attached beside it — second on the
//     IDE bus for Nova's legacy rescue, or kept first while the rescue
//     disk is added on the bus and device the image's hw_rescue_bus and
//     hw_rescue_device ask for and booted first (stable-device rescue;
//     rescue.go); unrescue: a new QEMU on the guest's own disk, the
//     rescue disk deleted;
//   - rebuild: a new QEMU process on a new disk.
//
// The guest's state is written to guest.json after each, so a restarted
// agent adopts a running QEMU or keeps a stopped or suspended guest.
func (d *Driver) Lifecycle(ctx context.Context, inst records.Instance, op string) error {
	target, from, ok := compute.LifecycleTarget(op)
	if !ok {
		return fmt.Errorf("%s of %s: unknown operation", op, inst.UUID)
	}
	d.mu.Lock()
	v, ok := d.vms[inst.UUID]
	var state compute.GuestState
	var pid int
	if ok {
		state, pid = v.st.Guest.State, v.pid
	}
	d.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("%s of %s: no guest on this host", op, inst.UUID)
	case state == target && !compute.Repeats(op) && !(keepsNoProcess(target) && pid != 0):
		// Done before (a stop whose kill a crash cut short goes on).
		return nil
	case !slices.Contains(from, state):
		return fmt.Errorf("%s of %s: the guest is %s", op, inst.UUID, state)
	}
	if err := compute.DropCaptures(v.dir); err != nil {
		d.log.Warn("deleting the captures of ended snapshots", "instance", inst.UUID, "err", err)
	}
	var err error
	switch op {
	case lifecycle.OpPause:
		err = d.execute(ctx, v, "stop", nil, nil)
	case lifecycle.OpUnpause:
		err = d.execute(ctx, v, "cont", nil, nil)
	case lifecycle.OpStop, lifecycle.OpShelve:
		// The state first: a restart between the two finds a stopped
		// guest whose QEMU may still run, and the repeat ends it.
		d.mu.Lock()
		v.st.Guest.State = target
		d.saveLocked(v)
		d.mu.Unlock()
		err = d.powerDown(ctx, v)
	case lifecycle.OpSuspend:
		err = d.suspend(ctx, v)
	case lifecycle.OpResume:
		err = d.resume(ctx, v)
	case lifecycle.OpReboot:
		err = d.execute(ctx, v, "system_reset", nil, nil)
	case lifecycle.OpRebuild:
		// A new disk: the image inst names now (Nova's rebuild may
		// change it), or keel's guest.
		if err = d.powerDown(ctx, v); err == nil {
			d.mu.Lock()
			v.st.Image = imageOf(inst)
			d.saveLocked(v)
			d.mu.Unlock()
			_ = os.Remove(filepath.Join(v.dir, fileDisk))
			err = d.launch(ctx, v, d.instanceOf(v), false)
		}
	case lifecycle.OpRescue, lifecycle.OpUnrescue:
		err = d.rescue(ctx, v, inst, op == lifecycle.OpRescue)
	default: // start, hard reboot
		if err = d.powerDown(ctx, v); err == nil {
			err = d.launch(ctx, v, d.instanceOf(v), false)
		}
	}
	if err != nil {
		return fmt.Errorf("%s of %s: %w", op, inst.UUID, err)
	}
	d.mu.Lock()
	v.st.Guest.State = target
	d.saveLocked(v)
	d.mu.Unlock()
	return nil
}

// instanceOf is what launch needs to start v's guest again.
func (d *Driver) instanceOf(v *vm) records.Instance {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := v.st.Guest
	return records.Instance{UUID: g.UUID, Name: g.Name, Flavor: g.Flavor, ImageRef: v.st.Image, Metadata: map[string]string{guest.MetadataKey: v.st.Program}}
}

// powerDown ends v's QEMU: the ACPI power button, then a kill if the
// guest has not powered off within PowerDownWait. Nothing to do for a
// guest with no process.
func (d *Driver) powerDown(ctx context.Context, v *vm) error {
	d.mu.Lock()
	pid, exited := v.pid, v.exited
	d.mu.Unlock()
	if pid == 0 || !v.alive() {
		d.forgetProcess(v)
		return nil
	}
	if err := d.execute(ctx, v, "system_powerdown", nil, nil); err == nil {
		deadline := time.Now().Add(PowerDownWait)
		for v.alive() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	v.monMu.Lock()
	if v.mon != nil {
		v.mon.Close()
		v.mon = nil
	}
	v.monMu.Unlock()
	if err := killIn(pid, v.dir, exited); err != nil {
		return err
	}
	d.forgetProcess(v)
	return nil
}

// forgetProcess records that v has no QEMU running.
func (d *Driver) forgetProcess(v *vm) {
	_ = os.Remove(filepath.Join(v.dir, filePID))
	d.mu.Lock()
	v.pid, v.exited = 0, nil
	d.mu.Unlock()
}

// suspend saves v's state to fileSuspend and ends its QEMU.
func (d *Driver) suspend(ctx context.Context, v *vm) error {
	path := filepath.Join(v.dir, fileSuspend)
	_ = os.Remove(path)
	if err := d.execute(ctx, v, "stop", nil, nil); err != nil {
		return err
	}
	if err := d.execute(ctx, v, "migrate", map[string]string{"uri": "exec:cat > " + fileSuspend}, nil); err != nil {
		return fmt.Errorf("saving the guest's state: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		info, err := d.queryMigrate(ctx, v)
		if err != nil {
			return fmt.Errorf("saving the guest's state: %w", err)
		}
		if info.Status == "completed" {
			break
		}
		if info.Status == "failed" || info.Status == "cancelled" {
			_ = d.execute(ctx, v, "cont", nil, nil)
			return fmt.Errorf("saving the guest's state: migration %s: %s", info.Status, info.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("saving the guest's state: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("saving the guest's state: %w", err)
	}
	d.mu.Lock()
	pid, exited := v.pid, v.exited
	d.mu.Unlock()
	v.monMu.Lock()
	if v.mon != nil {
		v.mon.Close()
		v.mon = nil
	}
	v.monMu.Unlock()
	if err := killIn(pid, v.dir, exited); err != nil {
		return err
	}
	d.forgetProcess(v)
	return nil
}

// resume starts a QEMU that loads fileSuspend and runs the guest on.
func (d *Driver) resume(ctx context.Context, v *vm) error {
	if _, err := os.Stat(filepath.Join(v.dir, fileSuspend)); err != nil {
		return fmt.Errorf("the suspended guest's state: %w", err)
	}
	if err := d.powerDown(ctx, v); err != nil { // a QEMU a crash left half started
		return err
	}
	if err := d.launch(ctx, v, d.instanceOf(v), true); err != nil {
		return err
	}
	if err := d.execute(ctx, v, "migrate-incoming", map[string]string{"uri": "exec:cat " + fileSuspend}, nil); err != nil {
		return fmt.Errorf("loading the guest's state: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		var st struct{ Status string }
		if err := d.execute(ctx, v, "query-status", nil, &st); err != nil {
			return fmt.Errorf("loading the guest's state: %w", err)
		}
		switch st.Status {
		case "running":
			_ = os.Remove(filepath.Join(v.dir, fileSuspend))
			return nil
		case "paused", "postmigrate":
			if err := d.execute(ctx, v, "cont", nil, nil); err != nil {
				return fmt.Errorf("continuing the resumed guest: %w", err)
			}
			continue
		case "inmigrate", "finish-migrate", "prelaunch":
		default:
			return fmt.Errorf("the resumed guest is %s: %s", st.Status, logTail(v.dir))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loading the guest's state: still %s", st.Status)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// keepsNoProcess reports whether a guest in state s has no QEMU running
// (a restarted agent keeps such a guest instead of forgetting it).
func keepsNoProcess(s compute.GuestState) bool {
	return s == compute.GuestStopped || s == compute.GuestSuspended || s == compute.GuestResizing || s == compute.GuestResized
}
