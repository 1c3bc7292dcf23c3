package conductor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"keel/internal/boot"
	"keel/internal/clock"
	"keel/internal/lifecycle"
	"keel/internal/placement"
	"keel/internal/records"
)

// LifecycleAPI is what the lifecycle actions ask of an agent: run one
// operation (lifecycle.Op*) on a guest and answer when it is done. The
// bus's agent client (rpc.Agent) and the agent's own compute.Manager
// implement it.
type LifecycleAPI interface {
	InstanceLifecycle(ctx context.Context, inst records.Instance, op string) error
}

func (c *Conductor) lifecycle() lifecycle.Machine {
	return lifecycle.Machine{ShelvedOffloadTime: c.cfg.ShelvedOffloadTime, StallAfter: c.stallAfter(), ActionTimeout: c.actionTimeout()}
}

// Act starts a lifecycle action (package lifecycle) on an instance: it
// checks the lock and the state (a refusal is an *InvalidStateError with
// Nova's text, or a *ForbiddenError) and saves the action's first step
// with a versioned update, then drives the action on its own context
// until it ends or waits. It returns the saved record at once and a
// channel that receives the flow's outcome when it stops (nil when the
// action ended or handed over to the boot of an unshelve; an error when a
// step was left for the sweep). Lock and unlock end in the first save.
// edits change the record in the same save (a rebuild's new name and
// image).
func (c *Conductor) Act(ctx context.Context, uuid string, req lifecycle.Request, edits ...func(*records.Instance)) (records.Instance, <-chan error, error) {
	ctx = context.WithoutCancel(ctx)
	done := make(chan error, 1)
	unlock := c.flows.Lock(instanceKey(uuid))
	var saved records.Instance
	var acts []lifecycle.Action
	err := retryConflicts(func() error {
		cur, err := c.store.GetInstance(ctx, uuid)
		if err != nil {
			return err
		}
		if cur.TaskState == records.TaskDeleting {
			return &InvalidStateError{Msg: fmt.Sprintf("Cannot '%s' instance %s while it is in task_state %s", req.Action, uuid, cur.TaskState)}
		}
		next, a, err := c.lifecycle().Begin(cur, req, c.clock.Now())
		if err != nil {
			return refusal(err)
		}
		if len(a) > 0 {
			next.Owner = c.cfg.Owner
		}
		for _, e := range edits {
			e(&next)
		}
		next.UpdatedAt = c.clock.Now()
		if saved, err = c.store.UpdateInstance(ctx, next); err != nil {
			return err
		}
		acts = a
		return nil
	})
	unlock()
	var ise *InvalidStateError
	var fe *ForbiddenError
	if errors.As(err, &ise) || errors.As(err, &fe) {
		return saved, nil, err // Nova's text, as it is
	}
	if err != nil {
		return saved, nil, fmt.Errorf("%s of instance %s: %w", req.Action, uuid, err)
	}
	if len(acts) == 0 {
		done <- nil
		return saved, done, nil
	}
	c.log.Info("lifecycle action", "instance", uuid, "action", req.Action, "task_state", saved.TaskState, "host", saved.Host)
	if !c.tasks.goDo(func() {
		unlock := c.flows.Lock(instanceKey(uuid))
		_, err := c.lifecycles.Drive(ctx, c.flows, saved, nil, acts)
		unlock() // before the outcome: who reads it finds the instance free
		done <- err
	}) {
		done <- errClosed
	}
	return saved, done, nil
}

// refusal turns the machine's refusals into the conductor's error types.
func refusal(err error) error {
	var ise *lifecycle.InvalidStateError
	var le *lifecycle.LockedError
	var fe *lifecycle.ForbiddenError
	switch {
	case errors.As(err, &ise):
		return &InvalidStateError{Msg: ise.Msg}
	case errors.As(err, &le):
		return &InvalidStateError{Msg: le.Error()}
	case errors.As(err, &fe):
		return &ForbiddenError{Msg: fe.Msg}
	}
	return err
}

// lifecycleEffects performs the lifecycle machine's actions: the agent's
// operation, a shelved server's claim given back, an unshelve's boot, and
// a snapshot's capture, upload and clean-up (snapshot.go). It holds only
// what those need; an unshelve's boot goes through boot, the conductor's
// stepBoot.
type lifecycleEffects struct {
	store  Store
	images Images
	agents agents
	clock  clock.Clock
	log    *slog.Logger
	boot   func(ctx context.Context, uuid string, ev boot.Event) (records.Instance, error)
}

// perform is the lifecycle machine's effect table, as the
// driver's loop (flow.Flow.Perform) calls it: each action is done on the
// instance as stored now — nothing when a delete took it or its action
// ended meanwhile (an admin's reset) — and answers with its event, or an
// error when it cannot be done now (the store, or the agent cannot be
// reached: the record stays in its phase for the sweep). The boot of an
// unshelve runs under the instance's lock, which the driver's loop holds.
func (e *lifecycleEffects) perform() func(context.Context, records.Instance, lifecycle.Action) (lifecycle.Event, bool, error) {
	type effect func(ctx context.Context, inst records.Instance, a lifecycle.Action) (lifecycle.Event, bool, error)
	left := func(inst records.Instance, a lifecycle.Action, err error) error {
		return fmt.Errorf("%s of %s: %s: %w", inst.Action, inst.UUID, a.Kind, err)
	}
	table := map[lifecycle.ActionKind]effect{
		lifecycle.CallAgent: func(ctx context.Context, inst records.Instance, a lifecycle.Action) (lifecycle.Event, bool, error) {
			api, err := e.agents.compute(a.Host)
			if err != nil {
				return lifecycle.Event{}, false, left(inst, a, err)
			}
			la, ok := api.(LifecycleAPI)
			if !ok {
				return lifecycle.Event{Kind: lifecycle.Failed, Err: fmt.Sprintf("the agent of %s cannot %s", a.Host, a.Op)}, true, nil
			}
			err = la.InstanceLifecycle(ctx, inst, a.Op)
			switch {
			case err == nil:
				return lifecycle.Event{Kind: lifecycle.Done}, true, nil
			case unreachable(err):
				return lifecycle.Event{}, false, left(inst, a, err)
			}
			return lifecycle.Event{Kind: lifecycle.Failed, Err: err.Error()}, true, nil
		},
		lifecycle.ReleaseClaim: func(ctx context.Context, inst records.Instance, a lifecycle.Action) (lifecycle.Event, bool, error) {
			if _, err := e.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: inst.UUID, AnyConsumerGeneration: true}); err != nil {
				return lifecycle.Event{}, false, left(inst, a, fmt.Errorf("giving back the claim of shelved %s: %w", inst.UUID, err))
			}
			return lifecycle.Event{Kind: lifecycle.Released}, true, nil
		},
		lifecycle.StartBoot: func(ctx context.Context, inst records.Instance, _ lifecycle.Action) (lifecycle.Event, bool, error) {
			_, err := e.unshelveBoot(ctx, inst)
			return lifecycle.Event{}, false, err
		},
	}
	for k, do := range e.snapshotEffects() {
		table[k] = do
	}
	return func(ctx context.Context, inst records.Instance, a lifecycle.Action) (lifecycle.Event, bool, error) {
		if a.Kind == lifecycle.DropImage {
			return lifecycle.Event{}, false, e.dropImage(a) // after the action's end
		}
		cur, err := e.store.GetInstance(ctx, inst.UUID)
		if err != nil {
			return lifecycle.Event{}, false, fmt.Errorf("lifecycle action of %s: %w", inst.UUID, err)
		}
		if cur.TaskState == records.TaskDeleting || cur.Action == "" {
			return lifecycle.Event{}, false, nil
		}
		do, ok := table[a.Kind]
		if !ok {
			return lifecycle.Event{}, false, fmt.Errorf("unknown lifecycle action %q", a.Kind)
		}
		return do(ctx, cur, a)
	}
}

// unreachable reports whether an agent call failed without an answer
// (the agent is down, restarting or cut off: ErrAgentUnreachable, or the
// call's time ran out): the step is repeated later.
func unreachable(err error) bool {
	return errors.Is(err, ErrAgentUnreachable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// unshelveBoot boots a shelved_offloaded instance again through the boot
// machine: scheduled through the claim-time view as a new boot would be
// (in the zone it asked for at first, not forced to a host), claimed and
// spawned; the boot's end finishes the unshelve (lifecycleBootEnded).
func (e *lifecycleEffects) unshelveBoot(ctx context.Context, inst records.Instance) (records.Instance, error) {
	if inst.VMState != records.VMBuilding {
		inst.VMState, inst.BuildPhase, inst.BuildAttempts = records.VMBuilding, "", 0
		inst.Host, inst.Zone, inst.ForcedHost, inst.Fault = "", inst.RequestedZone, "", ""
		inst.UpdatedAt = e.clock.Now()
		var err error
		if inst, err = e.store.UpdateInstance(ctx, inst); err != nil {
			return inst, fmt.Errorf("unshelve of %s: %w", inst.UUID, err)
		}
	}
	if inst.BuildPhase != "" {
		return inst, nil // the boot runs (its own recovery resumes it)
	}
	return e.boot(ctx, inst.UUID, boot.Event{Kind: boot.Start}) // under the instance's lock
}

// lifecycleBootEnded finishes the unshelve whose boot just ended (ACTIVE
// or ERROR). Called by bootEnded, under the instance's lock (the boot's,
// or the unshelve's own when its boot ended at once).
func (c *Conductor) lifecycleBootEnded(inst records.Instance) {
	if inst.Action != lifecycle.Unshelve || inst.ActionPhase != lifecycle.PhaseBoot {
		return
	}
	ev := lifecycle.Event{Kind: lifecycle.Booted}
	if inst.VMState != records.VMActive {
		ev = lifecycle.Event{Kind: lifecycle.BootFailed, Err: inst.Fault}
	}
	if _, err := c.lifecycles.Drive(context.Background(), c.flows, inst, []lifecycle.Event{ev}, nil); err != nil {
		// The sweep finishes it (the lifecycle machine's Deadline).
		c.log.Warn("finishing an unshelve", "instance", inst.UUID, "err", err)
	}
}

// actionTimeout is how long a lifecycle action may wait for its agent
// before it ends as failed: instance_build_timeout, or ten times the
// stall time when that is off.
func (c *Conductor) actionTimeout() time.Duration {
	if c.cfg.BuildTimeout > 0 {
		return c.cfg.BuildTimeout
	}
	return 10 * c.stallAfter()
}
