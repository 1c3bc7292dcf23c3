package conductor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"keel/internal/boot"
	"keel/internal/placement"
	"keel/internal/quota"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// Boot creates an instance and drives its boot (package boot) until it
// waits for the agent's report (the instance is BUILDING on its host) or
// ends in ERROR (the fault says why). BuildDone finishes it. The flow runs
// on its own context: a caller that stops waiting (a client hang-up)
// changes nothing, and a flow interrupted by a crash is resumed by Recover
// or the sweep (see RunOwnership).
func (c *Conductor) Boot(ctx context.Context, inst records.Instance) (records.Instance, error) {
	return c.boot(ctx, inst, "", false)
}

// BootOn boots an instance on a named host, bypassing the filters (Nova's
// admin-only availability_zone "zone:host"); the claim is still checked
// against the host's capacity.
func (c *Conductor) BootOn(ctx context.Context, inst records.Instance, host string) (records.Instance, error) {
	return c.boot(ctx, inst, host, false)
}

// StartBoot is Boot (BootOn with a host) answering early, as a request
// does (Nova's create answers 202 before the build): it returns once the
// store alone has decided what it can — the instance created, admitted,
// scheduled and its claim made, or in ERROR (no valid host) — and the
// build's cast to the agent goes on in the background, its outcome
// reported on the instance. No agent is waited on (rpc_timeout).
func (c *Conductor) StartBoot(ctx context.Context, inst records.Instance, host string) (records.Instance, error) {
	return c.boot(ctx, inst, host, true)
}

func (c *Conductor) boot(ctx context.Context, inst records.Instance, forceHost string, early bool) (records.Instance, error) {
	ctx = context.WithoutCancel(ctx)
	if inst.UUID == "" {
		inst.UUID = c.cfg.NewID()
	}
	now := c.clock.Now()
	inst.VMState, inst.TaskState, inst.BuildPhase = records.VMBuilding, records.TaskScheduling, ""
	inst.ForcedHost, inst.Owner = forceHost, c.cfg.Owner
	inst.CreatedAt, inst.UpdatedAt = now, now
	created, err := c.store.CreateInstance(ctx, inst)
	if err != nil {
		return inst, fmt.Errorf("creating instance %s: %w", inst.Name, err)
	}
	if err := c.admit(ctx, created); err != nil {
		return records.Instance{}, err
	}
	if err := c.place.joinGroup(ctx, created); err != nil {
		if errors.Is(err, quota.ErrExceeded) {
			return records.Instance{}, c.refuse(ctx, created, err)
		}
		// Not in the group: fail the boot without leaving it.
		created.VMState, created.TaskState, created.Fault, created.UpdatedAt = records.VMError, records.TaskNone, err.Error(), c.clock.Now()
		failed, uerr := c.store.UpdateInstance(ctx, created)
		if uerr != nil {
			return created, fmt.Errorf("marking %s ERROR (%s): %w", created.UUID, err, uerr)
		}
		c.bootEnded(failed)
		return failed, nil
	}
	if early {
		// The cast and what follows go on in the background
		// (flow.Flow.Start).
		return c.bootRuns.Start(ctx, c.flows, records.Instance{UUID: created.UUID}, boot.Event{Kind: boot.Start}, c.handOff)
	}
	return c.StepBoot(ctx, created.UUID, boot.Event{Kind: boot.Start})
}

// admit runs the quota check on a created instance; a refusal deletes
// the record.
func (c *Conductor) admit(ctx context.Context, inst records.Instance) error {
	if c.cfg.Quota == nil {
		return nil
	}
	if err := c.cfg.Quota.AdmitBoot(ctx, inst); err != nil {
		return c.refuse(ctx, inst, err)
	}
	return nil
}

// refuse deletes the record of a boot the quotas refused and returns why.
func (c *Conductor) refuse(ctx context.Context, inst records.Instance, why error) error {
	if err := c.store.DeleteInstance(ctx, inst.UUID); err != nil && !isNotFound(err) {
		return errors.Join(why, fmt.Errorf("deleting refused instance %s: %w", inst.UUID, err))
	}
	return why
}

// StepBoot feeds one event to an instance's boot and performs the
// resulting actions, feeding their answers back, until the boot waits for
// the agent or ends, or an action cannot be done now (the record then
// stays in its phase for Recover or the sweep to resume; the error says
// why). The record is saved before each action runs. It is the driver's
// loop (flow.Flow.Run) over the boot flow (see bootFlow).
func (c *Conductor) StepBoot(ctx context.Context, uuid string, ev boot.Event) (records.Instance, error) {
	defer c.flows.Lock(instanceKey(uuid))()
	return c.stepBoot(ctx, uuid, ev)
}

// stepBoot is StepBoot with the instance's lock held (the unshelve of a
// lifecycle action boots under its own).
func (c *Conductor) stepBoot(ctx context.Context, uuid string, ev boot.Event) (records.Instance, error) {
	return c.bootRuns.Drive(context.WithoutCancel(ctx), c.flows, records.Instance{UUID: uuid}, []boot.Event{ev}, nil)
}

// groupHold is a boot loop's hold of its instance's server-group lock
// (flow.Flow.Scope): the members of a group are placed one at a time,
// from reading where the others are to confirming this one's host.
type groupHold struct{ unlock func() }

type groupHoldKey struct{}

// bootScope gives a boot loop its group hold, released when the loop ends.
func bootScope(ctx context.Context) (context.Context, func()) {
	h := &groupHold{}
	return context.WithValue(ctx, groupHoldKey{}, h), func() { h.release() }
}

func (h *groupHold) release() {
	if h != nil && h.unlock != nil {
		h.unlock()
		h.unlock = nil
	}
}

// bootEffects performs the boot machine's actions: the schedule and
// claim, the server group's late check, the build's cast, the removal of
// a guest and the claim's release. It holds only what those need.
type bootEffects struct {
	store  Store
	sched  *scheduler.Scheduler
	place  *placer
	agents agents
	log    *slog.Logger
}

// perform is the boot machine's effect table, as the driver's loop
// (flow.Flow.Perform) calls it: each action returns the answer event, if
// it has one now, or an error when it cannot be done now (the boot is
// then resumed later). The schedule effect takes the instance's group
// lock, held until the boot leaves scheduling (schedule, confirm) or the
// loop ends.
func (b *bootEffects) perform() func(context.Context, records.Instance, boot.Action) (boot.Event, bool, error) {
	table := map[boot.ActionKind]func(b *bootEffects, ctx context.Context, inst records.Instance, a boot.Action) (boot.Event, bool, error){
		boot.Schedule:     (*bootEffects).bootSchedule,
		boot.ConfirmGroup: (*bootEffects).bootConfirmGroup,
		boot.CastBuild:    (*bootEffects).bootCast,
		boot.Terminate:    (*bootEffects).bootTerminate,
		boot.ReleaseClaim: (*bootEffects).bootRelease,
	}
	return func(ctx context.Context, inst records.Instance, a boot.Action) (boot.Event, bool, error) {
		hold, _ := ctx.Value(groupHoldKey{}).(*groupHold)
		if inst.BuildPhase != boot.PhaseSchedule && inst.BuildPhase != boot.PhaseConfirm {
			hold.release()
		}
		if a.Kind == boot.Schedule && hold != nil && hold.unlock == nil {
			hold.unlock = b.place.groupLock(inst)
		}
		f, ok := table[a.Kind]
		if !ok {
			return boot.Event{}, false, fmt.Errorf("boot of %s: unknown action %q", inst.UUID, a.Kind)
		}
		ev, ok, err := f(b, ctx, inst, a)
		if err != nil {
			return ev, ok, fmt.Errorf("boot of %s: %s: %w", inst.UUID, a.Kind, err)
		}
		return ev, ok, nil
	}
}

// decided records a scheduling decision: a log line an operator can
// replay the pick from (`keel schedule explain --pick-seed`, see
// scheduler.Selection.PickSeed), then the Decision hook. kind is boot or
// migration; args name the decision further (the migration).
func (p *placer) decided(kind string, inst records.Instance, sel scheduler.Selection, err error, args ...any) {
	if err == nil {
		p.log.Info("scheduled", append([]any{"kind", kind, "instance", inst.UUID, "host", sel.Host,
			"pick_seed", sel.PickSeed, "claims", sel.Claims}, args...)...)
	}
	if p.decision != nil {
		p.decision(kind, inst, sel, err)
	}
}

// bootEnded tells the hooks a boot ended (ACTIVE or ERROR).
func (c *Conductor) bootEnded(inst records.Instance) {
	c.lifecycleBootEnded(inst)
	if c.hooks.BuildDone != nil {
		c.hooks.BuildDone(inst)
	}
}

// bootSchedule gives back any claim an earlier attempt left (a.GiveBack),
// then asks the scheduler for a host and claims it.
func (b *bootEffects) bootSchedule(ctx context.Context, inst records.Instance, a boot.Action) (boot.Event, bool, error) {
	if a.GiveBack {
		if _, err := b.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: inst.UUID, AnyConsumerGeneration: true}); err != nil {
			return boot.Event{}, false, fmt.Errorf("giving back an earlier claim: %w", err)
		}
	}
	req, err := b.place.request(ctx, inst)
	if err != nil {
		return boot.Event{}, false, err
	}
	req.Zone = inst.RequestedZone
	switch {
	case inst.ForcedHost != "":
		req.Zone, req.RequestedHost, req.Force = "", inst.ForcedHost, true
	case inst.RequestedHost != "":
		// An unshelve to a named host: that host alone, filtered.
		req.RequestedHost = inst.RequestedHost
	}
	sel, err := b.sched.Select(ctx, req, func(ctx context.Context, cand scheduler.Candidate) (int64, error) {
		plan, err := b.store.WriteAllocations(ctx, placement.AllocationWrite{
			ConsumerUUID: inst.UUID, ProjectID: inst.ProjectID, UserID: inst.UserID, Type: placement.ConsumerInstance,
			Allocations: cand.Allocations, ProviderGenerations: cand.Generations,
		})
		return plan.Providers[cand.ProviderUUID], err
	})
	b.place.decided("boot", inst, sel, err)
	if err != nil {
		if scheduler.IsNoValidHost(err) {
			return boot.Event{Kind: boot.NoValidHost, Err: err.Error()}, true, nil
		}
		return boot.Event{}, false, err
	}
	return boot.Event{Kind: boot.Scheduled, Host: sel.Host, Zone: b.sched.View().HostZone(sel.Host)}, true, nil
}

func (b *bootEffects) bootConfirmGroup(ctx context.Context, inst records.Instance, _ boot.Action) (boot.Event, bool, error) {
	ok, err := b.place.confirmGroup(ctx, inst)
	if err != nil {
		return boot.Event{}, false, err
	}
	if !ok {
		b.log.Info("server group policy no longer allows the chosen host; scheduling again", "instance", inst.UUID, "host", inst.Host, "group", inst.Hints.Group)
		return boot.Event{Kind: boot.GroupRefused, Err: "another member was placed meanwhile"}, true, nil
	}
	return boot.Event{Kind: boot.GroupConfirmed}, true, nil
}

// bootCast casts the build. An agent that refuses it fails the boot (the
// claim is given back). A cast that got no answer (ErrAgentUnreachable:
// the agent restarting or cut off, or too busy to answer within
// rpc_timeout) may still have reached it, and its guest be building: the
// boot stays in its cast step, as any step whose agent cannot be reached
// does; the agent's report ends it, or the sweep casts again (the agent
// answers a repeat from the guest it has), and instance_build_timeout
// ends a boot whose agent never comes back.
func (b *bootEffects) bootCast(ctx context.Context, inst records.Instance, a boot.Action) (boot.Event, bool, error) {
	api, err := b.agents.compute(a.Host)
	if err == nil {
		err = api.BuildAndRunInstance(ctx, inst)
	}
	if errors.Is(err, ErrAgentUnreachable) {
		return boot.Event{}, false, err
	}
	if err != nil {
		return boot.Event{Kind: boot.CastFailed, Err: err.Error()}, true, nil
	}
	return boot.Event{Kind: boot.Cast}, true, nil
}

func (b *bootEffects) bootTerminate(ctx context.Context, inst records.Instance, a boot.Action) (boot.Event, bool, error) {
	if a.Host == "" {
		return boot.Event{}, false, nil
	}
	if err := b.agents.call(a.Host, func(api ComputeAPI) error { return api.TerminateInstance(ctx, inst.UUID) }); err != nil {
		b.log.Warn("removing the guest of a boot that timed out; the host's audit removes it", "instance", inst.UUID, "host", a.Host, "err", err)
	}
	return boot.Event{}, false, nil
}

func (b *bootEffects) bootRelease(ctx context.Context, inst records.Instance, _ boot.Action) (boot.Event, bool, error) {
	if _, err := b.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: inst.UUID, AnyConsumerGeneration: true}); err != nil {
		return boot.Event{}, false, fmt.Errorf("releasing the claim: %w", err)
	}
	b.place.leaveGroup(ctx, inst)
	return boot.Event{Kind: boot.Released}, true, nil
}

// BuildDone implements compute.Reporter: the agent's spawn finished. It
// returns nil once the outcome is committed, or when the report no longer
// applies (a repeat, or a build given up meanwhile, whose guest it
// removes); an error (the store could not be read or written) means the
// report was not taken and the agent must send it again.
func (c *Conductor) BuildDone(ctx context.Context, instanceUUID, host string, buildErr error) error {
	inst, err := c.store.GetInstance(ctx, instanceUUID)
	if isNotFound(err) || (err == nil && inst.TaskState == records.TaskDeleting) {
		// Deleted while it was building: the delete may have run before
		// the guest existed, so remove it now.
		c.log.Info("build finished for an instance being deleted; removing its guest", "instance", instanceUUID, "host", host)
		if api, err := c.agents.compute(host); err == nil {
			if err := api.TerminateInstance(ctx, instanceUUID); err != nil {
				c.log.Warn("removing the guest of a deleted instance", "instance", instanceUUID, "host", host, "err", err)
			}
		}
		if isNotFound(err) {
			c.releaseAll(ctx, instanceUUID)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("build report of %s on %s: reading the instance: %w", instanceUUID, host, err)
	}
	switch {
	case inst.VMState == records.VMActive && inst.Host == host:
		return nil // a repeated report (its first answer was lost on the bus)
	case inst.VMState != records.VMBuilding || inst.Host != host:
		// The build was given up meanwhile (its call timed out and the
		// boot failed, releasing the claim): the guest must not stay.
		c.log.Warn("build report for an instance no longer building there; removing its guest", "instance", instanceUUID, "host", host, "vm_state", inst.VMState)
		if buildErr == nil {
			if api, err := c.agents.compute(host); err == nil {
				if err := api.TerminateInstance(ctx, instanceUUID); err != nil {
					c.log.Warn("removing the guest of an abandoned build", "instance", instanceUUID, "host", host, "err", err)
				}
			}
		}
		return nil
	}
	ev := boot.Event{Kind: boot.Spawned}
	if buildErr != nil {
		ev = boot.Event{Kind: boot.SpawnFailed, Err: buildErr.Error()}
	}
	if _, err := c.StepBoot(ctx, instanceUUID, ev); err != nil {
		var illegal *boot.IllegalError
		if errors.As(err, &illegal) {
			return nil // ended meanwhile (judged above on a stale read)
		}
		return fmt.Errorf("build report of %s on %s: %w", instanceUUID, host, err)
	}
	return nil
}

// releaseAll deletes every allocation of a consumer.
func (c *Conductor) releaseAll(ctx context.Context, consumer string) {
	_, err := c.store.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: consumer, AnyConsumerGeneration: true})
	if err != nil {
		c.log.Warn("releasing allocations", "consumer", consumer, "err", err)
	}
}

// Delete terminates an instance on its host and releases its allocations.
// It first marks the instance deleting (a versioned update), so a boot or
// a live migration racing it sees the mark, or fails its own update, and
// stands down; a live migration already in progress refuses the delete.
func (c *Conductor) Delete(ctx context.Context, uuid string) error {
	ctx = context.WithoutCancel(ctx)
	var inst records.Instance
	err := retryConflicts(func() error {
		cur, err := c.store.GetInstance(ctx, uuid)
		if err != nil {
			return err
		}
		if cur.TaskState == records.TaskMigrating {
			return &InvalidStateError{Msg: fmt.Sprintf("instance %s is being live-migrated; abort the migration first", uuid)}
		}
		cur.TaskState, cur.UpdatedAt = records.TaskDeleting, c.clock.Now()
		inst, err = c.store.UpdateInstance(ctx, cur)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting instance %s: %w", uuid, err)
	}
	if inst.Host != "" {
		api, err := c.agents.compute(inst.Host)
		if err != nil {
			return err
		}
		if err := api.TerminateInstance(ctx, uuid); err != nil {
			return fmt.Errorf("deleting instance %s: %w", uuid, err)
		}
	}
	c.releaseAll(ctx, uuid)
	c.place.leaveGroup(ctx, inst)
	if err := c.store.DeleteInstance(ctx, uuid); err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting instance record %s: %w", uuid, err)
	}
	c.lifeFx.dropImagesOf(inst)
	return nil
}
