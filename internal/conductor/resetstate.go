package conductor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"keel/internal/lifecycle"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// ResetState is the admin's os-resetState: it sets the instance's vm_state
// to state (active or error) and clears its task, touching nothing on the
// host, as Nova's does — and, unlike Nova's, puts the instance's
// allocations right in the same step: an active instance holds its
// flavor's request on its host's provider tree (the host, its children,
// the pools sharing with it), an errored one holds nothing (keel's
// invariant: see package audit), and the consumers of its ended
// migrations are dropped. It returns a line for each allocation it put
// right. It refuses (an *InvalidStateError) while a migration of the
// instance is in progress — the migration record owns the instance's task
// then; abort it, or end it with keel migration reset — and when the
// flavor no longer fits on the host for active. An instance left
// migrating by a migration that has ended can be reset. A missing
// instance is store.ErrNotFound.
//
// A lifecycle action in flight (a rebuild, a shelve, a stop, a reboot,
// an unshelve, …) ends with the reset, as Nova's fails at its next save
// (expected_task_state) and leaves the reset's state: its agent's answer,
// when it comes, finds no action and is dropped (the guest is as the
// operation left it; the reset touched nothing on the host). A snapshot's
// image (createImage, createBackup, a shelve's) is deleted, as Nova's
// snapshot deletes the image it was writing.
func (c *Conductor) ResetState(ctx context.Context, uuid string, state records.VMState) ([]string, error) {
	for range 5 {
		cur, err := c.store.GetInstance(ctx, uuid)
		if err != nil {
			return nil, fmt.Errorf("resetting the state of instance %s: %w", uuid, err)
		}
		ms, err := c.store.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: uuid})
		if err != nil {
			return nil, fmt.Errorf("reading the migrations of %s: %w", uuid, err)
		}
		for _, m := range ms {
			if !records.MigrationTerminal(m.Status) {
				return nil, &InvalidStateError{fmt.Sprintf("Cannot 'os-resetState' instance %s while its migration %d is %s; abort the migration first, or end it with keel migration reset %d", uuid, m.ID, m.Status, m.ID)}
			}
		}
		writes, fixed, err := c.resetAllocations(ctx, cur, state, ms)
		if err != nil {
			return nil, err
		}
		if len(writes) > 0 {
			if _, err := c.store.WriteAllocations(ctx, writes...); err != nil {
				if placement.IsConflict(err) {
					continue // a consumer changed meanwhile: read again
				}
				if placement.IsCapacity(err) && state == records.VMActive {
					return nil, &InvalidStateError{fmt.Sprintf("Cannot reset instance %s to active: its flavor does not fit on %s any more (%v); reset it to error, or free room on the host", uuid, cur.Host, err)}
				}
				return nil, fmt.Errorf("putting the allocations of %s right: %w", uuid, err)
			}
		}
		// No move is open (refused above): a resize's new flavor, counted
		// by quotas while one is, goes too.
		cur.VMState, cur.TaskState, cur.ResizeFlavor, cur.UpdatedAt = state, records.TaskNone, nil, c.clock.Now()
		cur.Rescue = nil // not rescued any more: the guest's next start boots its own disk
		var orphan string
		if cur.Action != "" {
			what := cur.Action
			if cur.Snapshot != nil {
				orphan, what = cur.Snapshot.ImageID, "snapshot"
			}
			cur.Action, cur.ActionPhase, cur.ActionOps, cur.ActionFrom, cur.Snapshot = "", "", nil, "", nil
			cur.ActionError = "the server's state was reset during its " + what
		}
		if _, err = c.store.UpdateInstance(ctx, cur); err == nil {
			if orphan != "" {
				if err := c.lifeFx.dropImage(lifecycle.Action{Kind: lifecycle.DropImage, Image: orphan}); err != nil {
					c.log.Warn("deleting the image of a snapshot ended by a reset", "instance", uuid, "image", orphan, "err", err)
				} else {
					c.log.Info("a reset ended the snapshot in flight; its image is deleted", "instance", uuid, "image", orphan)
				}
			}
			return fixed, nil
		} else if !placement.IsConflict(err) {
			return nil, fmt.Errorf("saving the reset state of %s: %w", uuid, err)
		}
	}
	return nil, &InvalidStateError{"instance " + uuid + " kept changing; try again"}
}

// resetAllocations returns the writes that put inst's allocations right
// for state, and a line for each: to active, what it holds if that is its
// flavor's request on its host's tree, else what a claim there would
// write (treeAllocation); to error, nothing; every ended migration's
// consumer dropped. Writes name the consumer generations read.
func (c *Conductor) resetAllocations(ctx context.Context, inst records.Instance, state records.VMState, ms []records.Migration) ([]placement.AllocationWrite, []string, error) {
	var (
		writes []placement.AllocationWrite
		fixed  []string
	)
	sums, err := c.store.ProviderSummaries(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reading providers: %w", err)
	}
	nameOf := map[string]string{}
	rp := ""
	for _, s := range sums {
		nameOf[s.UUID] = s.Name
		if s.Name == inst.Host && inst.Host != "" {
			rp = s.UUID
		}
	}
	cons, err := c.store.GetConsumer(ctx, inst.UUID)
	found := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, nil, fmt.Errorf("reading the allocations of %s: %w", inst.UUID, err)
	}
	// The ended migrations' consumers go in the same write: what they
	// hold is free for the instance's claim.
	var released []map[string]placement.Resources
	var dropped []placement.AllocationWrite
	var droppedMsgs []string
	for _, m := range ms {
		mc, err := c.store.GetConsumer(ctx, m.UUID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the allocations of migration %d: %w", m.ID, err)
		}
		gen := mc.Generation
		dropped = append(dropped, placement.AllocationWrite{ConsumerUUID: m.UUID, ConsumerGeneration: &gen})
		droppedMsgs = append(droppedMsgs, fmt.Sprintf("%s of %s migration %d released", describeAllocations(mc.Allocations, nameOf), m.Status, m.ID))
		released = append(released, mc.Allocations)
	}
	var want map[string]placement.Resources
	if state == records.VMActive {
		if rp == "" {
			return nil, nil, &InvalidStateError{fmt.Sprintf("Cannot reset instance %s to active: it has no host with a resource provider (host %q); reset it to error or delete it", inst.UUID, inst.Host)}
		}
		if want, err = treeAllocation(inst, rp, sums, cons.Allocations, released); err != nil {
			return nil, nil, err
		}
	}
	switch {
	case !found:
		if len(want) > 0 {
			writes = append(writes, placement.AllocationWrite{ConsumerUUID: inst.UUID, Type: placement.ConsumerInstance,
				ProjectID: inst.ProjectID, UserID: inst.UserID, Allocations: want})
			fixed = append(fixed, fmt.Sprintf("claimed %s", describeAllocations(want, nameOf)))
		}
	case !equalAllocations(cons.Allocations, want):
		gen := cons.Generation
		writes = append(writes, placement.AllocationWrite{ConsumerUUID: inst.UUID, ConsumerGeneration: &gen, Type: placement.ConsumerInstance,
			ProjectID: inst.ProjectID, UserID: inst.UserID, Allocations: want})
		if len(want) > 0 {
			fixed = append(fixed, fmt.Sprintf("%s replaced by %s", describeAllocations(cons.Allocations, nameOf), describeAllocations(want, nameOf)))
		} else {
			fixed = append(fixed, fmt.Sprintf("%s released", describeAllocations(cons.Allocations, nameOf)))
		}
	}
	writes, fixed = append(writes, dropped...), append(fixed, droppedMsgs...)
	return writes, fixed, nil
}

// treeAllocation returns what inst should hold on its host's provider rp,
// holding held now, with the released allocations dropped in the same
// write: placement.Reclaim of its flavor's request (placement.FlavorQuery)
// — held if it is right, else what keel's scheduler would claim on rp's
// tree (the flavor on rp for a host without children or pools). It is a
// conflict when the flavor no longer fits there.
func treeAllocation(inst records.Instance, rp string, sums []store.ProviderSummary, held map[string]placement.Resources, released []map[string]placement.Resources) (map[string]placement.Resources, error) {
	q, err := placement.FlavorQuery(inst.Flavor.Resources(), inst.Flavor.ExtraSpecs)
	if err != nil || len(q.Groups) == 0 {
		// A flavor no scheduler could place (or one asking for nothing):
		// its plain resources on the host, as before trees.
		return map[string]placement.Resources{rp: inst.Flavor.Resources()}, nil
	}
	want, ok := placement.Reclaim(store.TreeProviders(sums), q, rp, held, released...)
	if !ok {
		return nil, &InvalidStateError{fmt.Sprintf("Cannot reset instance %s to active: its flavor (%s) does not fit on %s any more; reset it to error, or free room on the host", inst.UUID, q, inst.Host)}
	}
	return want, nil
}

func equalAllocations(got, want map[string]placement.Resources) bool {
	if len(got) != len(want) {
		return false
	}
	for p, r := range want {
		if !got[p].Equal(r) {
			return false
		}
	}
	return true
}

func describeAllocations(allocs map[string]placement.Resources, nameOf map[string]string) string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(allocs)) {
		parts = append(parts, fmt.Sprintf("%s on %s", allocs[p], nameOf[p]))
	}
	return strings.Join(parts, ", ")
}
