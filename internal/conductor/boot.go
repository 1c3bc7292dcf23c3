package conductor

import (
	"context"
	"fmt"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// Boot creates an instance, schedules and claims it, and casts the build
// to the chosen agent. It returns once the build is cast (the instance is
// BUILDING) or failed (ERROR, with the fault saying why). BuildDone
// finishes it.
func (c *Conductor) Boot(ctx context.Context, inst records.Instance) (records.Instance, error) {
	return c.boot(ctx, inst, "")
}

// BootOn boots an instance on a named host, bypassing the filters (Nova's
// admin-only availability_zone "zone:host"); the claim is still checked
// against the host's capacity.
func (c *Conductor) BootOn(ctx context.Context, inst records.Instance, host string) (records.Instance, error) {
	return c.boot(ctx, inst, host)
}

func (c *Conductor) boot(ctx context.Context, inst records.Instance, forceHost string) (records.Instance, error) {
	if inst.UUID == "" {
		inst.UUID = c.cfg.NewID()
	}
	now := c.clock.Now()
	inst.VMState, inst.TaskState = records.VMBuilding, records.TaskSpawning
	inst.CreatedAt, inst.UpdatedAt = now, now
	inst, err := c.store.CreateInstance(ctx, inst)
	if err != nil {
		return inst, fmt.Errorf("creating instance %s: %w", inst.Name, err)
	}
	if err := c.joinGroup(ctx, inst); err != nil {
		return c.failBuild(ctx, inst, err.Error())
	}
	// The group's members are placed one at a time, from reading where
	// the others are to recording this one's host.
	unlock := c.groupLock(inst)
	defer unlock()
	var sel scheduler.Selection
	askedZone := inst.Zone
	for attempt := 1; ; attempt++ {
		req, err := c.request(ctx, inst)
		if err != nil {
			return c.failBuild(ctx, inst, err.Error())
		}
		req.Zone = askedZone
		if forceHost != "" {
			req.Zone, req.RequestedHost, req.Force = "", forceHost, true
		}
		res := inst.Flavor.Resources()
		sel, err = c.sched.Select(ctx, req, func(ctx context.Context, cand scheduler.Candidate) (int64, error) {
			plan, err := c.store.WriteAllocations(ctx, placement.AllocationWrite{
				ConsumerUUID: inst.UUID, ProjectID: inst.ProjectID, UserID: inst.UserID, Type: placement.ConsumerInstance,
				Allocations:         map[string]placement.Resources{cand.ProviderUUID: res},
				ProviderGenerations: map[string]int64{cand.ProviderUUID: cand.Generation},
			})
			return plan.Providers[cand.ProviderUUID], err
		})
		if c.hooks.Decision != nil {
			c.hooks.Decision("boot", inst, sel, err)
		}
		if err != nil {
			return c.failBuild(ctx, inst, err.Error())
		}
		inst.Host, inst.Zone = sel.Host, askedZone
		if inst.Zone == "" {
			// As Nova's conductor: an instance booted without a zone is in
			// its host's zone from now on.
			inst.Zone = c.sched.View().HostZone(sel.Host)
		}
		updated, err := c.store.UpdateInstance(ctx, inst)
		if err != nil {
			// Most likely a delete marked the instance meanwhile (its
			// version moved on): give the claim back and stand down.
			c.releaseAll(ctx, inst.UUID)
			return inst, fmt.Errorf("recording host %s of %s (deleted while it was scheduled?): %w", sel.Host, inst.UUID, err)
		}
		inst = updated
		ok, err := c.confirmGroup(ctx, inst)
		if err == nil && ok {
			break
		}
		// Another keel server placed a member of the group meanwhile and
		// this host now breaks its policy (Nova's late check on the compute
		// host): give the claim back and schedule again, knowing where that
		// member went.
		c.releaseAll(ctx, inst.UUID)
		if err == nil && attempt < lateCheckAttempts {
			c.log.Info("server group policy no longer allows the chosen host; scheduling again", "instance", inst.UUID, "host", sel.Host, "group", inst.Hints.Group)
			inst.Host = ""
			cleared, uerr := c.store.UpdateInstance(ctx, inst)
			if uerr == nil {
				inst = cleared
				continue
			}
			err = uerr
		}
		if err == nil {
			err = fmt.Errorf("No valid host was found. Server group %s's policy no longer allowed the chosen host %s after %d attempts (other members were placed meanwhile)",
				inst.Hints.Group, sel.Host, attempt)
		}
		inst.Host = ""
		return c.failBuild(ctx, inst, err.Error())
	}
	unlock()
	api, err := c.compute(sel.Host)
	if err == nil {
		err = api.BuildAndRunInstance(ctx, inst)
	}
	if err != nil {
		c.releaseAll(ctx, inst.UUID)
		return c.failBuild(ctx, inst, err.Error())
	}
	return inst, nil
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
		if api, err := c.compute(host); err == nil {
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
			if api, err := c.compute(host); err == nil {
				if err := api.TerminateInstance(ctx, instanceUUID); err != nil {
					c.log.Warn("removing the guest of an abandoned build", "instance", instanceUUID, "host", host, "err", err)
				}
			}
		}
		return nil
	}
	if buildErr != nil {
		c.releaseAll(ctx, instanceUUID)
		if _, err := c.failBuild(ctx, inst, fmt.Sprintf("build on %s failed: %v", host, buildErr)); err != nil {
			return fmt.Errorf("build report of %s on %s: %w", instanceUUID, host, err)
		}
		return nil
	}
	inst.VMState, inst.TaskState, inst.UpdatedAt = records.VMActive, records.TaskNone, c.clock.Now()
	if inst, err = c.store.UpdateInstance(ctx, inst); err != nil {
		if placement.IsConflict(err) {
			// Changed meanwhile (a delete marked it): judge again from
			// what is there now.
			return c.BuildDone(ctx, instanceUUID, host, buildErr)
		}
		return fmt.Errorf("build report of %s on %s: marking it active: %w", instanceUUID, host, err)
	}
	if c.hooks.BuildDone != nil {
		c.hooks.BuildDone(inst)
	}
	return nil
}

func (c *Conductor) failBuild(ctx context.Context, inst records.Instance, fault string) (records.Instance, error) {
	c.leaveGroup(ctx, inst)
	inst.VMState, inst.TaskState, inst.Fault, inst.UpdatedAt = records.VMError, records.TaskNone, fault, c.clock.Now()
	updated, err := c.store.UpdateInstance(ctx, inst)
	if err != nil {
		return inst, fmt.Errorf("marking %s ERROR (%s): %w", inst.UUID, fault, err)
	}
	if c.hooks.BuildDone != nil {
		c.hooks.BuildDone(updated)
	}
	return updated, nil
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
		api, err := c.compute(inst.Host)
		if err != nil {
			return err
		}
		if err := api.TerminateInstance(ctx, uuid); err != nil {
			return fmt.Errorf("deleting instance %s: %w", uuid, err)
		}
	}
	c.releaseAll(ctx, uuid)
	c.leaveGroup(ctx, inst)
	if err := c.store.DeleteInstance(ctx, uuid); err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting instance record %s: %w", uuid, err)
	}
	return nil
}
