package fake

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"keel/internal/compute"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/store"
)

var _ compute.Snapshotter = (*Driver)(nil)

// Snapshot implements compute.Snapshotter: after LifecycleTime (StepTime
// when not set) it records a small synthetic disk for the image — a few
// KiB of text naming the guest, its flavor and the image — which
// ReadSnapshot serves (raw). FailNext(lifecycle.OpSnapshot, …) makes it
// fail. The capture is kept in memory: an agent restart loses it, and
// the snapshot's upload then fails.
func (d *Driver) Snapshot(ctx context.Context, inst records.Instance, imageID string) error {
	d.mu.Lock()
	_, ok := d.guests[inst.UUID]
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("snapshot of %s: no guest on this host", inst.UUID)
	}
	wait := d.cfg.LifecycleTime
	if wait <= 0 {
		wait = d.cfg.StepTime
	}
	if err := d.sleep(ctx, wait); err != nil {
		return fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
	}
	if err := d.held(ctx, lifecycle.OpSnapshot); err != nil {
		return fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.takeFault(lifecycle.OpSnapshot, inst.UUID); err != nil {
		return err
	}
	g, ok := d.guests[inst.UUID]
	if !ok {
		return fmt.Errorf("snapshot of %s: the guest was destroyed meanwhile", inst.UUID)
	}
	line := fmt.Sprintf("keel fake disk of %s (%s, flavor %s), snapshot %s\n", g.UUID, g.Name, g.Flavor.Name, imageID)
	if d.snapshots == nil {
		d.snapshots = map[string][]byte{}
	}
	d.snapshots[imageID] = []byte(strings.Repeat(line, 4096/len(line)+1))
	d.consoleEventLocked(inst.UUID, lifecycle.OpSnapshot, g.State)
	return nil
}

// HoldSnapshots makes the snapshots that start from now on wait, before
// they capture anything, until release is called (a test's way to see a
// snapshot in flight).
func (d *Driver) HoldSnapshots() (release func()) { return d.Hold(lifecycle.OpSnapshot) }

// Hold makes the operations op (a lifecycle.Op*) that start from now on
// wait, before they change the guest, until release is called (a test's
// way to act while one is in flight).
func (d *Driver) Hold(op string) (release func()) {
	ch := make(chan struct{})
	d.mu.Lock()
	if d.holds == nil {
		d.holds = map[string]chan struct{}{}
	}
	d.holds[op] = ch
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			if d.holds[op] == ch {
				delete(d.holds, op)
			}
			d.mu.Unlock()
			close(ch)
		})
	}
}

// held waits while op is held (Hold).
func (d *Driver) held(ctx context.Context, op string) error {
	d.mu.Lock()
	hold := d.holds[op]
	d.mu.Unlock()
	if hold == nil {
		return nil
	}
	select {
	case <-hold:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReadSnapshot implements compute.Snapshotter.
func (d *Driver) ReadSnapshot(_ context.Context, uuid, imageID string, offset int64, p []byte) (compute.SnapshotInfo, int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	data, ok := d.snapshots[imageID]
	if !ok {
		return compute.SnapshotInfo{}, 0, fmt.Errorf("no snapshot %s of %s on this host: %w", imageID, uuid, store.ErrNotFound)
	}
	info := compute.SnapshotInfo{DiskFormat: "raw", Size: int64(len(data))}
	if offset >= int64(len(data)) {
		delete(d.snapshots, imageID)
		return info, 0, nil
	}
	return info, copy(p, data[offset:]), nil
}
