package compute

import (
	"context"
	"fmt"

	"keel/internal/lifecycle"
	"keel/internal/records"
)

// Guest states of a cold migration or resize.
const (
	// GuestResizing: stopped here, its disk being moved to the destination.
	GuestResizing GuestState = "resizing"
	// GuestResized: stopped here after its disk moved; kept until the
	// resize is confirmed (then dropped) or reverted (then started again).
	GuestResized GuestState = "resized"
)

// ColdMover is the part of Driver that cold-migrates and resizes
// (Nova's resize_instance / finish_resize family). inst carries the flavor
// the host is to hold, and in FinishMigration and FinishRevertMigration
// the vm_state the guest is to end in: a stopped instance's guest is not
// started (Nova's power_on=False; see MovedGuestState).
type ColdMover interface {
	// PrepResize checks this host (the destination) can take inst and
	// readies it for the disk; its migrate data (nil for none) tells the
	// source where the disk goes.
	PrepResize(ctx context.Context, inst records.Instance) (map[string]string, error)
	// MigrateDiskAndPowerOff stops the guest here (the source; a stopped
	// one stays stopped) and moves
	// its disk to dest, then reports through done, never before it
	// returns; the guest stays, stopped, until confirm or revert.
	MigrateDiskAndPowerOff(ctx context.Context, migID int64, inst records.Instance, dest string, data map[string]string, done func(error))
	// FinishMigration starts the moved guest here (the destination) with
	// inst's flavor; on the source's own host it restarts the one guest.
	FinishMigration(ctx context.Context, inst records.Instance) error
	// ConfirmMigration drops the stopped guest here (the source).
	ConfirmMigration(ctx context.Context, uuid string) error
	// FinishRevertMigration starts the stopped guest here (the source)
	// again with inst's (old) flavor.
	FinishRevertMigration(ctx context.Context, inst records.Instance) error
}

// MovedGuestState is the state a cold-moved guest ends in on its
// destination, or on its source after a revert: stopped for an instance
// moved while stopped, running otherwise.
func MovedGuestState(inst records.Instance) GuestState {
	if inst.VMState == records.VMStopped {
		return GuestStopped
	}
	return GuestRunning
}

// PrepResize is prep_resize on the destination: its checks, and a busy
// mark that keeps the coming guest from the audit until the move ends.
func (m *Manager) PrepResize(ctx context.Context, inst records.Instance, _ string) (map[string]string, error) {
	m.res.Lock()
	defer m.res.Unlock()
	data, err := m.driver.PrepResize(ctx, inst)
	if err != nil {
		return nil, fmt.Errorf("prep_resize of %s on %s: %w", inst.UUID, m.host, err)
	}
	return data, nil
}

// ResizeInstance is resize_instance on the source: the guest stops and
// its disk moves; the end is reported as the migration's copy. It is
// fenced as LiveMigration is, on the record's version the call carries: a
// cast made from a version older than one seen here (the migration moved
// on, or CheckCopy reported the copy ended) is refused, and a repeat of a
// copy running here is answered nil.
func (m *Manager) ResizeInstance(ctx context.Context, migID, version int64, inst records.Instance, dest string, data map[string]string) error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.copiesMu.Lock()
	_, dup := m.copies[migID]
	m.copiesMu.Unlock()
	err := m.older(migID, version)
	if dup && err == nil {
		return nil // its end is reported when it comes
	}
	if err == nil {
		err = m.startWanted(ctx, migID, version, inst.UUID, dest)
	}
	if err != nil {
		m.log.Warn("refusing a disk move the migration no longer asks for", "migration", migID, "version", version, "instance", inst.UUID, "err", err)
		return fmt.Errorf("resize_instance %d of %s on %s: %w", migID, inst.UUID, m.host, err)
	}
	m.res.Lock()
	defer m.res.Unlock()
	m.copiesMu.Lock()
	m.copies[migID] = inst.UUID
	m.copiesMu.Unlock()
	m.tracker.Busy(inst.UUID, true)
	_, done := m.copyReports(ctx, migID, inst.UUID, "")
	m.driver.MigrateDiskAndPowerOff(ctx, migID, inst, dest, data, done)
	return nil
}

// FinishResize is finish_resize on the destination: the guest starts with
// the new flavor and the host counts it at once (both hosts' records are
// exact the moment the move is done).
func (m *Manager) FinishResize(ctx context.Context, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	if err := m.driver.FinishMigration(ctx, inst); err != nil {
		return fmt.Errorf("finish_resize of %s on %s: %w", inst.UUID, m.host, err)
	}
	m.tracker.Track(inst.UUID, inst.Flavor)
	return m.tracker.WriteRecord(ctx)
}

// ConfirmResize is confirm_resize on the source: the stopped guest goes.
func (m *Manager) ConfirmResize(ctx context.Context, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	if err := m.driver.ConfirmMigration(ctx, inst.UUID); err != nil {
		return fmt.Errorf("confirm_resize of %s on %s: %w", inst.UUID, m.host, err)
	}
	m.tracker.Busy(inst.UUID, false)
	return m.tracker.RemoveInstance(ctx, inst.UUID)
}

// RevertResize is revert_resize on the destination: its guest goes.
func (m *Manager) RevertResize(ctx context.Context, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	if err := m.driver.Destroy(ctx, inst.UUID); err != nil {
		return fmt.Errorf("revert_resize of %s on %s: %w", inst.UUID, m.host, err)
	}
	return m.tracker.RemoveInstance(ctx, inst.UUID)
}

// FinishRevertResize is finish_revert_resize on the source: the guest
// starts again with its old flavor.
func (m *Manager) FinishRevertResize(ctx context.Context, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	if err := m.driver.FinishRevertMigration(ctx, inst); err != nil {
		return fmt.Errorf("finish_revert_resize of %s on %s: %w", inst.UUID, m.host, err)
	}
	m.tracker.Busy(inst.UUID, false)
	m.tracker.Track(inst.UUID, inst.Flavor)
	return m.tracker.WriteRecord(ctx)
}

// RebuildInstance is rebuild_instance for an evacuation, on the
// destination: claim in the tracker and spawn the guest from its image
// (then power it off, for an instance evacuated stopped);
// the end is reported as the migration's copy (a failed spawn releases
// the tracker's claim and removes what it left).
func (m *Manager) RebuildInstance(ctx context.Context, migID int64, inst records.Instance) error {
	m.res.Lock()
	defer m.res.Unlock()
	if m.tracker.isBusy(inst.UUID) {
		return nil // a repeat while the rebuild runs: it reports its end
	}
	if g, ok, err := m.guest(ctx, inst.UUID); err != nil {
		return fmt.Errorf("rebuilding %s on %s: %w", inst.UUID, m.host, err)
	} else if ok && g.State == MovedGuestState(inst) {
		// A repeat after the rebuild ended (its report lost with a
		// server that restarted): answered from the guest here.
		_, done := m.copyReports(ctx, migID, inst.UUID, "")
		go done(nil)
		return nil
	}
	m.tracker.Busy(inst.UUID, true)
	if err := m.tracker.InstanceClaim(ctx, inst); err != nil {
		m.tracker.Busy(inst.UUID, false)
		return fmt.Errorf("rebuilding %s on %s: %w", inst.UUID, m.host, err)
	}
	_, done := m.copyReports(ctx, migID, inst.UUID, "")
	m.driver.Spawn(ctx, inst, func(err error) {
		bg := context.WithoutCancel(ctx)
		if err == nil && inst.VMState == records.VMStopped {
			// Evacuated stopped: rebuilt, then powered off (Nova's).
			if err = m.driver.Lifecycle(bg, inst, lifecycle.OpStop); err != nil {
				err = fmt.Errorf("powering off rebuilt %s on %s: %w", inst.UUID, m.host, err)
			}
		}
		m.rebuilt(bg, inst, err, done)
	})
	return nil
}

// rebuilt ends an evacuation's rebuild here: a failure destroys what the
// spawn made, success counts the guest; done reports it.
func (m *Manager) rebuilt(bg context.Context, inst records.Instance, err error, done func(error)) {
	m.res.Lock()
	if err != nil {
		m.buildFailedLocked(bg, inst.UUID)
	} else if werr := m.tracker.BuildSucceeded(bg); werr != nil {
		m.log.Warn("writing host record after a rebuild", "instance", inst.UUID, "err", werr)
	}
	m.res.Unlock()
	done(err)
}
