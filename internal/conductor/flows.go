package conductor

import (
	"context"
	"errors"
	"strconv"
	"time"

	"keel/internal/boot"
	"keel/internal/flow"
	"keel/internal/lifecycle"
	"keel/internal/migration"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// The flows the driver (package flow) recovers, takes over and sweeps,
// in this order: boots, moves, lifecycle actions, plans. Each is its machine,
// where its records are, and its effect table and hooks; the driver's one
// loop (flow.Flow.Run) feeds every one of them.

// instanceKey and migrationKey are the driver's lock keys: a boot and a
// lifecycle action of one instance share their record, and its lock.
func instanceKey(uuid string) string { return "instance/" + uuid }
func migrationKey(id int64) string   { return "migration/" + strconv.FormatInt(id, 10) }
func groupKey(group string) string   { return "group/" + group }

// newDriver builds the conductor's flow driver, each machine's effects, and
// registers the flows.
func (c *Conductor) newDriver() *flow.Driver {
	d := &flow.Driver{Owner: c.cfg.Owner, Live: c.liveReplicas, Clock: c.clock, Log: c.log, Spawn: c.handOff,
		// A step whose agent call got no answer (the agent restarting,
		// reconnecting after this server restarted, cut off) is repeated
		// from about a second on for one StallAfter, not only at its
		// phase's stall deadline.
		Retry:    func(err error) bool { return errors.Is(err, ErrAgentUnreachable) },
		RetryMax: c.stallAfter() / 2, RetryFor: c.stallAfter()}
	c.place = &placer{store: c.store, quota: c.cfg.Quota, flows: d, log: c.log, decision: c.hooks.Decision}
	c.moves = &moveEffects{cfg: c.cfg, store: c.store, sched: c.sched, place: c.place, agents: c.agents, slots: c.slots,
		clock: c.clock, log: c.log, tasks: c.tasks, handle: c.Handle}
	c.lifeFx = &lifecycleEffects{store: c.store, images: c.cfg.Images, agents: c.agents, clock: c.clock, log: c.log, boot: c.stepBoot}
	c.builds = &bootEffects{store: c.store, sched: c.sched, place: c.place, agents: c.agents, log: c.log}
	c.bootRuns = c.bootFlow()
	flow.Register(d, c.bootRuns)
	c.migrations = c.migrationFlow()
	flow.Register(d, c.migrations)
	c.lifecycles = c.lifecycleFlow()
	flow.Register(d, c.lifecycles)
	c.plans = newPlans(c.cfg, c.store, c.sched, c.place, c, c.clock, c.log, c.tasks, d)
	return d
}

// moved reports whether a versioned save or a read failed because the
// record moved on (changed or gone).
func moved(err error) bool { return placement.IsConflict(err) || isNotFound(err) }

func instanceOwned(in records.Instance, owner string, now time.Time) records.Instance {
	in.Owner, in.UpdatedAt = owner, now
	return in
}

func (c *Conductor) listInstances(ctx context.Context) ([]records.Instance, error) {
	return c.store.ListInstances(ctx, "")
}

func (c *Conductor) getInstance(ctx context.Context, in records.Instance) (records.Instance, error) {
	return c.store.GetInstance(ctx, in.UUID)
}

func (c *Conductor) bootFlow() *flow.Flow[records.Instance, boot.Event, boot.Action] {
	return &flow.Flow[records.Instance, boot.Event, boot.Action]{
		Name: "boot", Machine: c.boots,
		List: c.listInstances, Get: c.getInstance, Save: c.store.UpdateInstance,
		Key:   func(in records.Instance) string { return instanceKey(in.UUID) },
		Owner: func(in records.Instance) string { return in.Owner }, Version: func(in records.Instance) int64 { return in.Version },
		Owned: instanceOwned, Conflict: moved,
		Perform: closable(c.tasks, c.builds.perform()),
		Stamp: func(in records.Instance, now time.Time) records.Instance {
			in.UpdatedAt = now
			return in
		},
		Gone: func(in records.Instance) bool { return in.TaskState == records.TaskDeleting }, // the delete terminates and releases
		// Each save: a step logged, an ended boot told to the hooks.
		Saved: func(prev, next records.Instance, ev boot.Event) {
			if next.BuildPhase != prev.BuildPhase || next.VMState != prev.VMState {
				c.log.Debug("boot step", "instance", next.UUID, "event", ev.Kind, "phase", next.BuildPhase, "vm_state", next.VMState, "host", next.Host, "fault", next.Fault)
			}
			if !boot.Building(next) {
				c.bootEnded(next)
			}
		},
		// An answer to the loop's own action that came after someone else
		// moved the boot on (another replica applied the agent's report
		// first) leaves nothing to do; the caller's event refused is an
		// error.
		Refused: func(in records.Instance, ev boot.Event, answer bool, err error) error {
			if !answer {
				return err
			}
			c.log.Debug("boot answer no longer applies", "instance", in.UUID, "event", ev.Kind, "phase", in.BuildPhase, "vm_state", in.VMState)
			return nil
		},
		Scope: bootScope,
		// The cast and the removal of a guest wait on its agent.
		Remote: func(a boot.Action) bool { return a.Kind == boot.CastBuild || a.Kind == boot.Terminate },
	}
}

func (c *Conductor) lifecycleFlow() *flow.Flow[records.Instance, lifecycle.Event, lifecycle.Action] {
	return &flow.Flow[records.Instance, lifecycle.Event, lifecycle.Action]{
		Name: "lifecycle", Machine: c.lifecycle(),
		List: c.listInstances, Get: c.getInstance, Save: c.store.UpdateInstance,
		Key:   func(in records.Instance) string { return instanceKey(in.UUID) },
		Owner: func(in records.Instance) string { return in.Owner }, Version: func(in records.Instance) int64 { return in.Version },
		Owned: instanceOwned, Conflict: moved,
		Perform: closable(c.tasks, c.lifeFx.perform()),
		Stamp: func(in records.Instance, now time.Time) records.Instance {
			in.UpdatedAt = now
			return in
		},
		Gone: func(in records.Instance) bool { return in.TaskState == records.TaskDeleting }, // the delete removes the guest
		Saved: func(prev, next records.Instance, ev lifecycle.Event) {
			switch {
			case ev.Kind == lifecycle.MoveLost:
				c.log.Warn("cleared a move's task that no migration carries (the server that set it stopped before recording the move)",
					"instance", next.UUID, "task", prev.TaskState, "host", next.Host, "vm_state", next.VMState)
			case next.Action == "":
				c.log.Info("lifecycle action ended", "instance", next.UUID, "action", prev.Action, "vm_state", next.VMState, "error", next.ActionError)
			}
		},
		Due: c.lifecycleDue,
		// An agent's answer for an action an admin's reset ended
		// meanwhile (os-resetState) finds no action: it is dropped, as
		// Nova's compute drops an operation whose save finds another
		// task state. The caller's own event refused is an error.
		Refused: func(in records.Instance, ev lifecycle.Event, answer bool, err error) error {
			if !answer || in.Action != "" || in.TaskState == records.TaskDeleting {
				return err
			}
			c.log.Info("a lifecycle answer came after the action ended (a reset); dropped", "instance", in.UUID, "event", ev.Kind,
				"vm_state", in.VMState, "reset", in.ActionError)
			return nil
		},
		// The agent's operation, and an unshelve's boot (its cast).
		Remote: func(a lifecycle.Action) bool { return a.Kind == lifecycle.CallAgent || a.Kind == lifecycle.StartBoot },
	}
}

// lifecycleDue is what a lifecycle deadline needs besides its record: a
// move's task is lost only when no migration of the instance is active.
func (c *Conductor) lifecycleDue(ctx context.Context, in records.Instance, ev lifecycle.Event) bool {
	if ev.Kind != lifecycle.MoveLost {
		return true
	}
	moving, err := inMigration(ctx, c.store, in.UUID)
	if err != nil {
		c.log.Warn("checking a move's task for its migration; left for the next sweep", "instance", in.UUID, "err", err)
	}
	return err == nil && !moving
}

func (c *Conductor) migrationFlow() *flow.Flow[records.Migration, migration.Event, migration.Action] {
	return &flow.Flow[records.Migration, migration.Event, migration.Action]{
		Name: "migration", Machine: c.machine,
		List: func(ctx context.Context) ([]records.Migration, error) {
			return c.store.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
		},
		Get: func(ctx context.Context, m records.Migration) (records.Migration, error) {
			return c.store.GetMigration(ctx, m.ID)
		},
		Save:  c.store.UpdateMigration,
		Key:   func(m records.Migration) string { return migrationKey(m.ID) },
		Owner: func(m records.Migration) string { return m.Owner }, Version: func(m records.Migration) int64 { return m.Version },
		Owned: func(m records.Migration, owner string, now time.Time) records.Migration {
			m.Owner, m.UpdatedAt = owner, now
			return m
		},
		Conflict: moved,
		Perform:  closable(c.tasks, c.moves.migrationEffects()),
		Stamp: func(m records.Migration, now time.Time) records.Migration {
			m.UpdatedAt = now
			return m
		},
		// The instance settles on its final host before the record says
		// the migration ended (as Nova saves the instance before the
		// migration's status): whoever reads "completed" finds the
		// instance where it now runs. Settling is idempotent, so a crash
		// between the two repeats it on recovery.
		Early: func(a migration.Action) bool { return a.Kind == migration.SettleInstance },
		// The actions that call an agent; the claims, slots and the
		// instance's settling are the store's and this replica's.
		Remote: func(a migration.Action) bool { return !localMigrationActions[a.Kind] },
		// Each save: a step that moved the migration on is logged, and an
		// ended one forgotten, its plan's executor woken and the
		// MigrationDone hook called (its instance already settled).
		Saved: func(prev, next records.Migration, ev migration.Event) {
			if next.Phase != prev.Phase || next.Status != prev.Status {
				c.log.Info("migration step", "migration", next.ID, "instance", next.InstanceUUID, "event", ev.Kind,
					"phase", next.Phase, "status", next.Status, "source", next.SourceHost, "dest", next.DestHost, "error", next.Error)
			}
			if !records.MigrationTerminal(next.Status) {
				return
			}
			c.moves.forget(next)
			if next.PlanMove != nil {
				c.plans.kickPlans() // its plan's move ended: the executor goes on
			}
			if c.hooks.MigrationDone != nil {
				c.hooks.MigrationDone(next)
			}
		},
		// A late answer (progress, a slot handed on) for an ended
		// migration makes the conductor forget it.
		Refused: func(m records.Migration, _ migration.Event, _ bool, err error) error {
			if records.MigrationTerminal(m.Status) {
				c.moves.forget(m)
			}
			c.log.Warn("migration event refused", "migration", m.ID, "err", err)
			return err
		},
		Due: c.migrationDue,
	}
}

// migrationDue is what a migration's deadline needs besides its record:
// an evacuation's source is back only when its service is up, and a live
// migration waiting in this replica's queue for a slot (or just handed
// one) is not stalled.
func (c *Conductor) migrationDue(ctx context.Context, m records.Migration, ev migration.Event) bool {
	switch {
	case ev.Kind == migration.SourceBack:
		down, err := c.serviceDown(ctx, m.SourceHost)
		return err == nil && !down
	case m.Phase == migration.PhaseQueue:
		return !c.isWaiting(m)
	}
	return true
}

// localMigrationActions are the migration actions that call no agent.
var localMigrationActions = map[migration.ActionKind]bool{
	migration.ClaimDestination: true, migration.ReleaseDestination: true, migration.RevertAllocations: true,
	migration.AcquireSlot: true, migration.HoldSlot: true, migration.ReleaseSlot: true,
	migration.FinishAllocations: true, migration.SettleInstance: true,
}
