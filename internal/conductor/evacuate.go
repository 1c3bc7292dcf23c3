package conductor

import (
	"context"
	"fmt"

	"keel/internal/migration"
	"keel/internal/records"
)

// Evacuate rebuilds the instance of a host that is down on another host
// (Nova's evacuate): on requestedHost, or where the scheduler puts it from
// the claim-time view. An ACTIVE or ERROR instance ends ACTIVE; a stopped
// one is rebuilt and powered off, and ends stopped, as Nova's. The source's service must be down — forced down
// (os-services forced_down, the fence) or silent past service_down_time —
// or it is refused with Nova's error. It answers once the migration is
// recorded and scheduled; the rebuild goes on.
func (c *Conductor) Evacuate(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error) {
	return c.evacuate(ctx, instanceUUID, requestedHost, moveOpts{})
}

// StartEvacuation is Evacuate answering early, as StartColdMigration:
// once the store decided (the checks, the migration recorded, the
// destination claimed or no valid host), with the destination's rebuild
// going on in the background.
func (c *Conductor) StartEvacuation(ctx context.Context, instanceUUID, requestedHost string) (records.Migration, error) {
	return c.evacuate(ctx, instanceUUID, requestedHost, moveOpts{early: true})
}

// evacuate is Evacuate for a plan's move too (o names it and the hosts
// never to choose).
func (c *Conductor) evacuate(ctx context.Context, instanceUUID, requestedHost string, o moveOpts) (records.Migration, error) {
	ctx = context.WithoutCancel(ctx)
	inst, err := c.store.GetInstance(ctx, instanceUUID)
	if err != nil {
		return records.Migration{}, fmt.Errorf("evacuating %s: %w", instanceUUID, err)
	}
	if (inst.VMState != records.VMActive && inst.VMState != records.VMStopped && inst.VMState != records.VMError) ||
		inst.TaskState != records.TaskNone || inst.Host == "" {
		return records.Migration{}, &InvalidStateError{Msg: fmt.Sprintf(
			"Cannot 'evacuate' instance %s while it is in vm_state %s, task_state %s", instanceUUID, inst.VMState, orNone(inst.TaskState))}
	}
	if requestedHost == inst.Host {
		return records.Migration{}, &BadRequestError{Msg: "The target host can't be the same one."}
	}
	down, err := c.serviceDown(ctx, inst.Host)
	if err != nil {
		return records.Migration{}, err
	}
	if !down {
		return records.Migration{}, &BadRequestError{Msg: fmt.Sprintf("Compute service of %s is still in use.", inst.Host)}
	}
	if _, err := c.store.GetConsumer(ctx, inst.UUID); err != nil {
		return records.Migration{}, fmt.Errorf("evacuating %s: its allocation: %w", instanceUUID, err)
	}
	now := c.clock.Now()
	f := inst.Flavor
	m, err := c.beginMove(ctx, c.moving(inst, records.TaskRebuilding), records.Migration{
		UUID: c.cfg.NewID(), InstanceUUID: inst.UUID, Type: records.MigrationTypeEvac, SourceHost: inst.Host,
		RequestedHost: requestedHost, CreatedAt: now, UpdatedAt: now, Owner: c.cfg.Owner, OldFlavor: &f, NewFlavor: &f,
		PlanMove: o.ref, AvoidHosts: o.avoid, OldVMState: inst.VMState,
	})
	if err != nil {
		return records.Migration{}, fmt.Errorf("evacuating %s: %w", instanceUUID, err)
	}
	return c.runMove(ctx, m, o)
}

// serviceDown reports whether host's compute service is down: forced
// down, or with no heartbeat for ServiceDownTime.
func (c *Conductor) serviceDown(ctx context.Context, host string) (bool, error) {
	svc, err := c.store.GetService(ctx, host)
	if err != nil {
		return false, fmt.Errorf("reading the service of %s: %w", host, err)
	}
	if svc.ForcedDown {
		return true, nil
	}
	return c.cfg.ServiceDownTime > 0 && c.clock.Now().Sub(svc.LastSeenUp) > c.cfg.ServiceDownTime, nil
}

func (e *moveEffects) actRebuildAtDest(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	inst.Host = a.Host
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.RebuildInstance(ctx, m.ID, inst) }); err != nil {
		return failed(migration.CopyFailed, err)
	}
	return noAnswer, false, nil // the destination reports the rebuild's end
}

// actCleanupSource makes sure the evacuated guest is gone from the source
// that came back (its agent destroys it at start; this repeats it).
func (e *moveEffects) actCleanupSource(ctx context.Context, m records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.TerminateInstance(ctx, inst.UUID) }); err != nil {
		return migration.Event{Kind: migration.SourceDone, Err: fmt.Sprintf("removing the evacuated guest from %s failed (left for its audit): %v", a.Host, err)}, true, nil
	}
	return answer(migration.SourceDone)
}

func (e *moveEffects) actTerminate(ctx context.Context, _ records.Migration, inst records.Instance, a migration.Action) (migration.Event, bool, error) {
	if a.Host == "" {
		return noAnswer, false, nil
	}
	if err := e.agents.call(a.Host, func(api ComputeAPI) error { return api.TerminateInstance(ctx, inst.UUID) }); err != nil {
		e.log.Warn("removing a guest; left for the host's audit", "instance", inst.UUID, "host", a.Host, "err", err)
	}
	return noAnswer, false, nil
}
