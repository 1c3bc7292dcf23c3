package conductor

import (
	"context"
	"fmt"

	"keel/internal/migration"
	"keel/internal/quota"
	"keel/internal/records"
	"keel/internal/store"
)

// ColdMigrate starts a cold migration of an ACTIVE (or stopped) instance to
// requestedHost, or to a host the scheduler chooses when it is empty
// (Nova's migrate action). It answers once the migration is recorded and
// its first steps ran; the move goes on, the server shows RESIZE, then
// VERIFY_RESIZE on its destination until ConfirmResize or RevertResize.
func (c *Conductor) ColdMigrate(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error) {
	return c.startColdMove(ctx, instanceUUID, requestedHost, nil, moveOpts{})
}

// Resize starts a resize of an instance to flavor (Nova's resize action):
// a cold move whose destination holds the new flavor. The source is a
// candidate only with Config.AllowResizeToSameHost. edits (the request's
// own changes to the record, such as its disk config) are applied to the
// record the start saves with its migration: a refused resize changes
// nothing.
func (c *Conductor) Resize(ctx context.Context, instanceUUID string, flavor records.Flavor, edits ...func(*records.Instance)) (records.Migration, error) {
	return c.startColdMove(ctx, instanceUUID, "", &flavor, moveOpts{edits: edits})
}

// StartColdMigration is ColdMigrate answering early, as Nova's migrate
// action answers once the conductor scheduled (its prep_resize is a
// cast): it returns once the store alone decided — the state checks, the
// migration recorded, the destination chosen and claimed (or the
// migration in error: no valid host) — and the destination's
// prep_resize, the disk's move and what follows go on in the background,
// reported on the migration record.
func (c *Conductor) StartColdMigration(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error) {
	return c.startColdMove(ctx, instanceUUID, requestedHost, nil, moveOpts{early: true})
}

// StartResize is Resize answering early, as StartColdMigration.
func (c *Conductor) StartResize(ctx context.Context, instanceUUID string, flavor records.Flavor, edits ...func(*records.Instance)) (records.Migration, error) {
	return c.startColdMove(ctx, instanceUUID, "", &flavor, moveOpts{early: true, edits: edits})
}

func (c *Conductor) startColdMove(ctx context.Context, instanceUUID, requestedHost string, newFlavor *records.Flavor, o moveOpts) (records.Migration, error) {
	ctx = context.WithoutCancel(ctx)
	verb, typ := "migrate", records.MigrationTypeCold
	if newFlavor != nil {
		verb, typ = "resize", records.MigrationTypeResize
	}
	inst, err := c.store.GetInstance(ctx, instanceUUID)
	if err != nil {
		return records.Migration{}, fmt.Errorf("%s of %s: %w", verb, instanceUUID, err)
	}
	// Nova resizes and cold-migrates active and stopped servers.
	if (inst.VMState != records.VMActive && inst.VMState != records.VMStopped) || inst.TaskState != records.TaskNone {
		return records.Migration{}, &InvalidStateError{Msg: fmt.Sprintf(
			"Cannot '%s' instance %s while it is in vm_state %s, task_state %q", verb, instanceUUID, inst.VMState, orNone(inst.TaskState))}
	}
	// Nova answers both with 400 (CannotMigrateToSameHost,
	// CannotResizeToSameFlavor).
	if requestedHost != "" && requestedHost == inst.Host {
		return records.Migration{}, &BadRequestError{Msg: "Cannot migrate to the host where the server exists."}
	}
	old := inst.Flavor
	if newFlavor == nil {
		newFlavor = &old
	} else if newFlavor.ID == old.ID {
		return records.Migration{}, &BadRequestError{Msg: "When resizing, instances must change flavor!"}
	}
	inst = c.moving(inst, records.TaskResizePrep)
	if typ == records.MigrationTypeResize {
		nf := *newFlavor
		inst.ResizeFlavor = &nf
	}
	inst, reserved, err := c.admitResize(ctx, inst)
	if err != nil {
		return records.Migration{}, fmt.Errorf("resize of %s: %w", instanceUUID, err)
	}
	for _, edit := range o.edits {
		edit(&inst)
	}
	now := c.clock.Now()
	m, err := c.beginMove(ctx, inst, records.Migration{
		UUID: c.cfg.NewID(), InstanceUUID: inst.UUID, Type: typ, SourceHost: inst.Host,
		RequestedHost: requestedHost, CreatedAt: now, UpdatedAt: now, Owner: c.cfg.Owner,
		OldFlavor: &old, NewFlavor: newFlavor, PlanMove: o.ref, AvoidHosts: o.avoid,
		OldVMState: inst.VMState,
	})
	if err != nil {
		if reserved {
			c.unreserve(ctx, inst)
		}
		return records.Migration{}, fmt.Errorf("%s of %s: %w", verb, instanceUUID, err)
	}
	return c.runMove(ctx, m, o)
}

// admitResize asks the quotas about a resize that adds usage. They count
// the larger flavor from the instance's record, so that racing resizes and
// boots see each other's: the record is saved with it (ResizeFlavor), in
// the move's task, before the count — the one move start that takes two
// writes; if the server stops before the second (beginMove), its restart
// clears the task and the flavor (Recover feeds lifecycle.MoveLost to a
// move's task no migration carries), as does a replica taking its work
// over, or the sweep StallAfter later if the second write failed on a
// server that kept running (TestResizeReservationLostIsCleared,
// TestResizeReservationLostIsClearedAtRestart). A refused resize's
// record is put back. reserved says the record was saved and admitted;
// inst is returned as saved.
func (c *Conductor) admitResize(ctx context.Context, inst records.Instance) (_ records.Instance, reserved bool, _ error) {
	if c.cfg.Quota == nil || inst.ResizeFlavor == nil {
		return inst, false, nil
	}
	if g := quota.Growth(inst.Flavor, *inst.ResizeFlavor); g.Cores == 0 && g.RAM == 0 {
		return inst, false, nil
	}
	inst, err := c.store.UpdateInstance(ctx, inst)
	if err != nil {
		return inst, false, err
	}
	if err := c.cfg.Quota.AdmitResize(ctx, inst); err != nil {
		c.unreserve(ctx, inst)
		return inst, false, err
	}
	return inst, true, nil
}

// unreserve clears the task and the new flavor of a resize that did not
// start.
func (c *Conductor) unreserve(ctx context.Context, inst records.Instance) {
	if err := c.moves.settleInstance(ctx, inst, migration.Action{}); err != nil {
		c.log.Error("clearing the task of a resize that did not start", "instance", inst.UUID, "err", err)
	}
}

// ConfirmResize confirms a cold migration or resize waiting in
// VERIFY_RESIZE: the source's guest and allocation go.
func (c *Conductor) ConfirmResize(ctx context.Context, instanceUUID string) error {
	return c.decideResize(ctx, instanceUUID, migration.Confirm, "confirmResize")
}

// RevertResize reverts a cold migration or resize waiting in
// VERIFY_RESIZE: the destination's guest and allocation go, and the guest
// runs on its source again with its old flavor.
func (c *Conductor) RevertResize(ctx context.Context, instanceUUID string) error {
	return c.decideResize(ctx, instanceUUID, migration.RevertResize, "revertResize")
}

func (c *Conductor) decideResize(ctx context.Context, instanceUUID string, kind migration.EventKind, action string) error {
	ctx = context.WithoutCancel(ctx)
	inst, m, err := c.awaitingDecision(ctx, instanceUUID, action)
	if err != nil {
		return err
	}
	if inst.VMState != records.VMResized || m.Phase != migration.PhaseVerify {
		return &InvalidStateError{Msg: fmt.Sprintf("Cannot '%s' instance %s while it is in vm_state %s", action, instanceUUID, inst.VMState)}
	}
	task := records.TaskResizeConfirming
	if kind == migration.RevertResize {
		task = records.TaskResizeReverting
	}
	inst.TaskState, inst.UpdatedAt = task, c.clock.Now()
	if _, err := c.store.UpdateInstance(ctx, inst); err != nil {
		return fmt.Errorf("%s of %s: %w", action, instanceUUID, err)
	}
	err = c.Handle(ctx, m.ID, migration.Event{Kind: kind})
	if err == nil {
		return nil
	}
	// Once the record has left verify the decision is taken: a step
	// after it that cannot be done now is the sweep's, not the caller's.
	if now, gerr := c.store.GetMigration(ctx, m.ID); gerr == nil && now.Phase != migration.PhaseVerify {
		c.log.Warn("resize decision taken; a later step left for the sweep", "migration", m.ID, "action", action, "err", err)
		return nil
	}
	return err
}

// awaitingDecision reads the instance and its cold migration or resize
// that waits for a decision. The verify step settles the instance
// (VERIFY_RESIZE) before it saves its migration finished (flow.Flow's
// Early), so a caller who saw VERIFY_RESIZE can come in between: when the
// instance is resized and its cold move is not yet finished, this waits
// for the step in flight (the migration's lock) and reads both again, as
// Nova's order (migration saved, then instance) would have answered.
func (c *Conductor) awaitingDecision(ctx context.Context, instanceUUID, action string) (records.Instance, records.Migration, error) {
	for waited := false; ; waited = true {
		inst, err := c.store.GetInstance(ctx, instanceUUID)
		if err != nil {
			return inst, records.Migration{}, fmt.Errorf("%s of %s: %w", action, instanceUUID, err)
		}
		ms, err := c.store.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: inst.UUID, ActiveOnly: true})
		if err != nil {
			return inst, records.Migration{}, fmt.Errorf("reading the migrations of %s: %w", inst.UUID, err)
		}
		for _, m := range ms {
			if m.Type != records.MigrationTypeCold && m.Type != records.MigrationTypeResize {
				continue
			}
			if m.Status == records.MigrationFinished {
				return inst, m, nil
			}
			if inst.VMState == records.VMResized && !waited {
				c.flows.Lock(migrationKey(m.ID))()
				break
			}
		}
		if waited || inst.VMState != records.VMResized {
			return inst, records.Migration{}, &InvalidStateError{Msg: fmt.Sprintf("Instance %s has no resize or migration waiting for confirmation", inst.UUID)}
		}
	}
}

// The cold move's actions on the agents.

func (e *moveEffects) actPrepResize(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	inst.Flavor = *m.NewFlavor
	var data map[string]string
	if err := e.agents.call(a.Host, func(api ComputeAPI) (err error) { data, err = api.PrepResize(ctx, inst, m.SourceHost); return err }); err != nil {
		return failed(migration.PrepareFailed, err)
	}
	return migration.Event{Kind: migration.Prepared, Data: data}, true, nil
}

func (e *moveEffects) actResizeInstance(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.ResizeInstance(ctx, m.ID, m.Version, inst, m.DestHost, a.Data) }); err != nil {
		return failed(migration.CopyFailed, err)
	}
	return noAnswer, false, nil // the source reports the disk copy's end
}

// powerOn sets the vm_state the agent reads to know whether a moved guest
// is to run (active) or stay stopped (Nova's power_on).
func powerOn(inst records.Instance, m records.Migration) records.Instance {
	inst.VMState = records.VMActive
	if migration.StartedStopped(m) {
		inst.VMState = records.VMStopped
	}
	return inst
}

func (e *moveEffects) actFinishResize(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	inst = powerOn(inst, m)
	inst.Flavor = *m.NewFlavor
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.FinishResize(ctx, inst) }); err != nil {
		return failed(migration.StepFailed, err)
	}
	return answer(migration.DestDone)
}

// actConfirmAtSource drops the source's stopped guest; a source that
// cannot be reached is named in the record and left for its audit (the
// guest belongs to no instance there any more). On the same host there is
// one guest, which stays.
func (e *moveEffects) actConfirmAtSource(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if m.SourceHost == m.DestHost {
		return answer(migration.SourceDone)
	}
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.ConfirmResize(ctx, inst) }); err != nil {
		return migration.Event{Kind: migration.SourceDone, Err: fmt.Sprintf("confirm_resize on the source %s failed (left for its audit): %v", a.Host, err)}, true, nil
	}
	return answer(migration.SourceDone)
}

// actRevertAtDest drops the destination's guest, or names the
// destination in the record when it cannot (its audit removes the guest).
func (e *moveEffects) actRevertAtDest(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if m.SourceHost == m.DestHost || a.Host == "" {
		return answer(migration.DestRolledBack)
	}
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.RevertResize(ctx, inst) }); err != nil {
		return migration.Event{Kind: migration.DestRolledBack, Err: fmt.Sprintf("revert_resize on the destination %s failed (left for its audit): %v", a.Host, err)}, true, nil
	}
	return answer(migration.DestRolledBack)
}

// actFinishRevertAtSource starts the source's stopped guest again. The
// guest there is the only copy left, so a source that does not answer
// (down, restarting, cut off) is asked again when the sweep resumes the
// flow, as Nova's cast waits in the source's queue; only the source's own
// failure ends the revert with the instance in ERROR.
func (e *moveEffects) actFinishRevertAtSource(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	inst = powerOn(inst, m)
	inst.Flavor = *m.OldFlavor
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.FinishRevertResize(ctx, inst) }); err != nil {
		if unreachable(err) {
			return noAnswer, false, fmt.Errorf("finish_revert_resize on the source %s (asked again when it answers): %w", a.Host, err)
		}
		return failed(migration.StepFailed, err)
	}
	return answer(migration.SourceDone)
}

func orNone(task records.TaskState) records.TaskState {
	if task == "" {
		return "None"
	}
	return task
}
