package conductor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"keel/internal/boot"
	"keel/internal/bus"
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

// ForbiddenError is a request the caller's role does not allow (HTTP 403
// in the API): unlocking a server an admin locked.
type ForbiddenError struct{ Msg string }

func (e *ForbiddenError) Error() string { return e.Msg }

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
		_, err := c.driveLifecycle(ctx, uuid, acts, unlock)
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

// StepAction feeds one event to an instance's lifecycle action and
// performs what follows, as StepBoot does for boots.
func (c *Conductor) StepAction(ctx context.Context, uuid string, ev lifecycle.Event) (records.Instance, error) {
	ctx = context.WithoutCancel(ctx)
	unlock := c.flows.Lock(instanceKey(uuid))
	cur, acts, err := c.stepLifecycle(ctx, uuid, ev)
	if err != nil || len(acts) == 0 {
		unlock()
		return cur, err
	}
	return c.driveLifecycle(ctx, uuid, acts, unlock)
}

// stepLifecycle applies ev to the stored record and saves the result.
// Called with the instance's lock held.
func (c *Conductor) stepLifecycle(ctx context.Context, uuid string, ev lifecycle.Event) (records.Instance, []lifecycle.Action, error) {
	for attempt := 0; ; attempt++ {
		cur, err := c.store.GetInstance(ctx, uuid)
		if err != nil {
			return cur, nil, fmt.Errorf("lifecycle action of %s: %w", uuid, err)
		}
		if cur.TaskState == records.TaskDeleting {
			return cur, nil, nil // the delete removes the guest
		}
		next, acts, err := c.lifecycle().Step(cur, ev, c.clock.Now())
		if err != nil {
			return cur, nil, err
		}
		next.UpdatedAt = c.clock.Now()
		saved, err := c.store.UpdateInstance(ctx, next)
		if placement.IsConflict(err) && attempt < 3 {
			continue
		}
		if err != nil {
			return cur, nil, fmt.Errorf("lifecycle action %s of %s: saving: %w", cur.Action, uuid, err)
		}
		if saved.Action == "" {
			c.log.Info("lifecycle action ended", "instance", uuid, "action", cur.Action, "vm_state", saved.VMState, "error", saved.ActionError)
		}
		return saved, acts, nil
	}
}

// driveLifecycle performs acts and the actions that follow from their
// answers until the action ends, waits, or an action cannot be done now
// (then the record stays in its phase for the sweep and the error says
// why). unlock releases the instance's lock, which the caller holds.
func (c *Conductor) driveLifecycle(ctx context.Context, uuid string, acts []lifecycle.Action, unlock func()) (records.Instance, error) {
	var cur records.Instance
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		inst, err := c.store.GetInstance(ctx, uuid)
		if err != nil {
			return cur, fmt.Errorf("lifecycle action of %s: %w", uuid, err)
		}
		cur = inst
		if inst.TaskState == records.TaskDeleting || inst.Action == "" {
			return inst, nil
		}
		if a.Kind == lifecycle.StartBoot {
			// The boot machine takes the instance's lock itself.
			locked = false
			unlock()
			return c.unshelveBoot(ctx, inst)
		}
		ev, err := c.performLifecycle(ctx, inst, a)
		if err != nil {
			c.log.Warn("lifecycle step left for the sweep", "instance", uuid, "action", inst.Action, "step", a.Kind, "op", a.Op, "err", err)
			return inst, fmt.Errorf("%s of %s: %s: %w", inst.Action, uuid, a.Kind, err)
		}
		next, more, err := c.stepLifecycle(ctx, uuid, ev)
		if err != nil {
			return next, err
		}
		cur = next
		acts = append(acts, more...)
	}
	return cur, nil
}

// performLifecycle does one action and returns its answer; an error when
// it cannot be done now (the store, or the agent cannot be reached).
func (c *Conductor) performLifecycle(ctx context.Context, inst records.Instance, a lifecycle.Action) (lifecycle.Event, error) {
	switch a.Kind {
	case lifecycle.CallAgent:
		api, err := c.compute(a.Host)
		if err != nil {
			return lifecycle.Event{}, err
		}
		la, ok := api.(LifecycleAPI)
		if !ok {
			return lifecycle.Event{Kind: lifecycle.Failed, Err: fmt.Sprintf("the agent of %s cannot %s", a.Host, a.Op)}, nil
		}
		err = la.InstanceLifecycle(ctx, inst, a.Op)
		switch {
		case err == nil:
			return lifecycle.Event{Kind: lifecycle.Done}, nil
		case unreachable(err):
			return lifecycle.Event{}, err
		}
		return lifecycle.Event{Kind: lifecycle.Failed, Err: err.Error()}, nil
	case lifecycle.ReleaseClaim:
		if _, err := c.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: inst.UUID, AnyConsumerGeneration: true}); err != nil {
			return lifecycle.Event{}, fmt.Errorf("giving back the claim of shelved %s: %w", inst.UUID, err)
		}
		return lifecycle.Event{Kind: lifecycle.Released}, nil
	}
	return lifecycle.Event{}, fmt.Errorf("unknown lifecycle action %q", a.Kind)
}

// unreachable reports whether an agent call failed without an answer
// (the agent is down, restarting or cut off): the step is repeated later.
func unreachable(err error) bool {
	return errors.Is(err, bus.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// unshelveBoot boots a shelved_offloaded instance again through the boot
// machine: scheduled through the claim-time view as a new boot would be
// (in the zone it asked for at first, not forced to a host), claimed and
// spawned; the boot's end finishes the unshelve (lifecycleBootEnded).
func (c *Conductor) unshelveBoot(ctx context.Context, inst records.Instance) (records.Instance, error) {
	if inst.VMState != records.VMBuilding {
		inst.VMState, inst.BuildPhase, inst.BuildAttempts = records.VMBuilding, "", 0
		inst.Host, inst.Zone, inst.ForcedHost, inst.Fault = "", inst.RequestedZone, "", ""
		inst.UpdatedAt = c.clock.Now()
		var err error
		if inst, err = c.store.UpdateInstance(ctx, inst); err != nil {
			return inst, fmt.Errorf("unshelve of %s: %w", inst.UUID, err)
		}
	}
	if inst.BuildPhase != "" {
		return inst, nil // the boot runs (its own recovery resumes it)
	}
	return c.StepBoot(ctx, inst.UUID, boot.Event{Kind: boot.Start})
}

// lifecycleBootEnded finishes the unshelve whose boot just ended (ACTIVE
// or ERROR). Called by bootEnded, under the instance's lock.
func (c *Conductor) lifecycleBootEnded(inst records.Instance) {
	if inst.Action != lifecycle.Unshelve || inst.ActionPhase != lifecycle.PhaseBoot {
		return
	}
	ev := lifecycle.Event{Kind: lifecycle.Booted}
	if inst.VMState != records.VMActive {
		ev = lifecycle.Event{Kind: lifecycle.BootFailed, Err: inst.Fault}
	}
	if _, _, err := c.stepLifecycle(context.Background(), inst.UUID, ev); err != nil {
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
