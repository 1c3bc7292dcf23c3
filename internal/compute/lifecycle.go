package compute

import (
	"context"
	"fmt"

	"keel/internal/lifecycle"
	"keel/internal/records"
)

// Guest states of the lifecycle operations.
const (
	GuestStopped   GuestState = "stopped"
	GuestPaused    GuestState = "paused"
	GuestSuspended GuestState = "suspended"
	GuestRescued   GuestState = "rescued"
)

// LifecycleDriver is the part of Driver the lifecycle actions use.
type LifecycleDriver interface {
	// Lifecycle runs one lifecycle operation (lifecycle.Op*) on inst's
	// guest and returns when the guest is in the operation's target
	// state (LifecycleTarget). It is idempotent: a guest already in the
	// target state (a repeat after a restart of the agent or of the
	// server) answers at once, except for the reboots and the rebuild,
	// which run again. A guest in a state the operation cannot start
	// from is refused with an error.
	Lifecycle(ctx context.Context, inst records.Instance, op string) error
}

// LifecycleTarget is the guest state an operation leaves, and the states
// it may start from.
func LifecycleTarget(op string) (target GuestState, from []GuestState, ok bool) {
	on := []GuestState{GuestRunning, GuestPaused, GuestSuspended, GuestRescued, GuestStopped}
	switch op {
	case lifecycle.OpStop, lifecycle.OpShelve:
		return GuestStopped, on, true
	case lifecycle.OpStart:
		return GuestRunning, []GuestState{GuestStopped}, true
	case lifecycle.OpReboot:
		return GuestRunning, []GuestState{GuestRunning}, true
	case lifecycle.OpRebootHard, lifecycle.OpRebuild:
		return GuestRunning, on, true
	case lifecycle.OpPause:
		return GuestPaused, []GuestState{GuestRunning}, true
	case lifecycle.OpUnpause:
		return GuestRunning, []GuestState{GuestPaused}, true
	case lifecycle.OpSuspend:
		return GuestSuspended, []GuestState{GuestRunning}, true
	case lifecycle.OpResume:
		return GuestRunning, []GuestState{GuestSuspended}, true
	case lifecycle.OpRescue:
		return GuestRescued, []GuestState{GuestRunning, GuestStopped}, true
	case lifecycle.OpUnrescue:
		return GuestRunning, []GuestState{GuestRescued}, true
	}
	return "", nil, false
}

// Repeats reports whether op runs again on a guest already in its target
// state (a reboot reboots again; a stop of a stopped guest does nothing).
func Repeats(op string) bool {
	return op == lifecycle.OpReboot || op == lifecycle.OpRebootHard || op == lifecycle.OpRebuild
}

// InstanceLifecycle runs a lifecycle operation on this host (Nova's
// stop_instance, pause_instance, …): the driver's operation, under the
// host's resource lock so the audit never sees it half done. The
// shelve-offload operation removes the guest and stops counting it, as
// terminate does; the snapshot operation captures the guest's disk
// (Snapshotter). It is idempotent (see LifecycleDriver).
func (m *Manager) InstanceLifecycle(ctx context.Context, inst records.Instance, op string) error {
	if op == lifecycle.OpSnapshot {
		return m.snapshot(ctx, inst)
	}
	if op == lifecycle.OpShelveUnplug {
		m.res.Lock()
		defer m.res.Unlock()
		if err := m.driver.Destroy(ctx, inst.UUID); err != nil {
			return fmt.Errorf("%s of %s on %s: %w", op, inst.UUID, m.host, err)
		}
		return m.tracker.RemoveInstance(ctx, inst.UUID)
	}
	if _, _, ok := LifecycleTarget(op); !ok {
		return fmt.Errorf("%s of %s on %s: unknown operation", op, inst.UUID, m.host)
	}
	// The guest stays counted whatever its power state (a stopped or
	// shelved server keeps its claim): the busy mark keeps the audit from
	// judging it while it changes; the resource lock is not held, so
	// other guests' operations run meanwhile.
	m.tracker.Busy(inst.UUID, true)
	defer m.tracker.Busy(inst.UUID, false)
	if err := m.driver.Lifecycle(ctx, inst, op); err != nil {
		return fmt.Errorf("%s of %s on %s: %w", op, inst.UUID, m.host, err)
	}
	return nil
}
