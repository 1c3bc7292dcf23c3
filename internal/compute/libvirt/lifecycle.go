package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"keel/internal/compute"
	"keel/internal/compute/qemu/guest"
	"keel/internal/lifecycle"
	"keel/internal/records"
)

// Lifecycle implements compute.LifecycleDriver with libvirt's calls:
//
//   - pause / unpause: suspend / resume;
//   - stop, shelve: ACPI shutdown, then destroy after PowerDownWait (keel's
//     guest ignores ACPI, as Nova's clean shutdown then hard stop); the
//     domain stays defined;
//   - start: create;
//   - suspend: managed save (libvirt writes the RAM to its save image and
//     stops QEMU); resume: create, which restores it;
//   - reboot: soft is a reset (the guest has no ACPI), hard a destroy and
//     create;
//   - rescue: destroy, the rescue disk made of the rescue image (an
//     overlay on its base; keel's guest program for the built-in image),
//     the domain redefined with it beside the guest's own disk (legacy:
//     the rescue disk first; stable-device: on the bus and device the
//     image asks for, booted first; domainXML), create; unrescue: destroy,
//     the domain redefined without it, create, the rescue disk deleted;
//   - rebuild: destroy and create, the guest's disk written afresh.
func (d *Driver) Lifecycle(ctx context.Context, inst records.Instance, op string) error {
	target, from, ok := compute.LifecycleTarget(op)
	if !ok {
		return fmt.Errorf("%s of %s: unknown operation", op, inst.UUID)
	}
	x, ok, err := d.lookup(inst.UUID)
	if err != nil {
		return fmt.Errorf("%s of %s: %w", op, inst.UUID, err)
	}
	if !ok {
		return fmt.Errorf("%s of %s: no guest on this host", op, inst.UUID)
	}
	state := x.guest().State
	switch {
	case state == target && !compute.Repeats(op):
		return nil
	case !slices.Contains(from, state):
		return fmt.Errorf("%s of %s: the guest is %s", op, inst.UUID, state)
	}
	if err := compute.DropCaptures(d.guestDir(inst.UUID)); err != nil {
		d.log.Warn("deleting the captures of ended snapshots", "instance", inst.UUID, "err", err)
	}
	l, err := d.lv()
	if err != nil {
		return err
	}
	m := x.m
	switch op {
	case lifecycle.OpPause:
		err = l.DomainSuspend(x.d)
	case lifecycle.OpUnpause:
		err = l.DomainResume(x.d)
	case lifecycle.OpStop, lifecycle.OpShelve:
		err = d.powerDown(ctx, x)
		m.State = ""
	case lifecycle.OpStart, lifecycle.OpResume:
		_, err = l.DomainCreateWithFlags(x.d, 0)
	case lifecycle.OpSuspend:
		err = l.DomainManagedSave(x.d, 0)
	case lifecycle.OpReboot:
		err = l.DomainReset(x.d, 0)
	case lifecycle.OpRescue, lifecycle.OpUnrescue:
		err = d.rescue(ctx, x, inst, op == lifecycle.OpRescue)
		m.State = x.m.State // written with the domain's definition
	default: // hard reboot, rebuild
		if op == lifecycle.OpRebuild {
			inst := records.Instance{UUID: x.uuid, Name: m.Name, Flavor: m.Flavor.flavor(), Metadata: map[string]string{"keel_guest": m.Program}}
			if err = d.writeDisk(ctx, inst, m.Image); err != nil {
				break
			}
		}
		if err = d.destroyProcess(x); err == nil {
			_, err = l.DomainCreateWithFlags(x.d, 0)
		}
		m.State = ""
	}
	if err != nil {
		return fmt.Errorf("%s of %s: %w", op, inst.UUID, describe(err))
	}
	if m.State != x.m.State {
		if cur, ok, err := d.lookup(inst.UUID); err == nil && ok {
			if err := d.setMeta(cur, m); err != nil {
				return fmt.Errorf("%s of %s: %w", op, inst.UUID, err)
			}
		}
	}
	return nil
}

// powerDown stops a guest: the ACPI shutdown, then destroy if it has not
// shut off within PowerDownWait. A suspended guest's save image is
// dropped (it is stopped, not suspended, afterwards).
func (d *Driver) powerDown(ctx context.Context, x dom) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	if x.managed {
		return l.DomainManagedSaveRemove(x.d, 0)
	}
	if x.state == stateShutoff {
		return nil
	}
	if err := l.DomainShutdown(x.d); err == nil {
		deadline := time.Now().Add(d.cfg.PowerDownWait)
		for time.Now().Before(deadline) {
			if st, _, err := l.DomainGetState(x.d, 0); err == nil && st == stateShutoff {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return d.destroyProcess(x)
}

// destroyProcess ends a guest's QEMU (libvirt's destroy) if it runs, and
// drops a managed save image: the domain stays defined.
func (d *Driver) destroyProcess(x dom) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	if x.managed {
		if err := l.DomainManagedSaveRemove(x.d, 0); err != nil {
			return err
		}
	}
	active, err := l.DomainIsActive(x.d)
	if err != nil || active == 0 {
		return err
	}
	if err := l.DomainDestroyFlags(x.d, 0); err != nil && !isCode(err, golibvirt.ErrOperationInvalid) {
		return err
	}
	return nil
}

// rescue destroys x's guest and starts it again rescued (on) or not:
// the domain is redefined with or without the rescue disk (domainXML
// reads it from the metadata), which is written before and deleted
// after. The guest's own disk is never touched.
func (d *Driver) rescue(ctx context.Context, x dom, inst records.Instance, on bool) error {
	l, err := d.lv()
	if err != nil {
		return err
	}
	m := x.m
	m.State, m.RescueImage, m.RescueBus, m.RescueDevice = "", "", "", ""
	path := filepath.Join(d.guestDir(x.uuid), fileRescue)
	if on {
		rs := records.Rescue{}
		if inst.Rescue != nil {
			rs = *inst.Rescue
		}
		if rs.Stable() {
			if _, _, err := compute.RescueTarget(rs); err != nil {
				return err
			}
		}
		image := rs.ImageID
		if image == compute.BuiltinImageID {
			image = ""
		}
		if err := d.images.RescueDisk(ctx, x.uuid, image, m.Program, path); err != nil {
			return err
		}
		m.State, m.RescueImage, m.RescueBus, m.RescueDevice = stRescued, rs.ImageID, rs.Bus, rs.Device
	}
	if err := d.destroyProcess(x); err != nil {
		return err
	}
	def := records.Instance{UUID: x.uuid, Name: m.Name, Flavor: m.Flavor.flavor(), Metadata: map[string]string{guest.MetadataKey: m.Program}}
	ld, err := d.define(def, m)
	if err != nil {
		return err
	}
	if _, err := l.DomainCreateWithFlags(ld, 0); err != nil {
		return err
	}
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("deleting the rescue disk: %w", err)
		}
	}
	return nil
}
