package computeapi

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// resetState is the admin's os-resetState: it sets the record's vm_state
// to active or error and clears its task, touching nothing on the host, as
// Nova's does — and, unlike Nova's, puts the instance's allocations right
// in the same request: an active instance holds its flavor's request on
// its host's provider tree (the host, its children, the pools sharing with
// it), an errored one holds nothing (keel's invariant: see package audit),
// and the consumers of its ended migrations are dropped.
// It is recorded as a reset-state instance action whose message says
// what was corrected. keel refuses it while a migration of the instance is
// in progress (409): the migration record owns the instance's task then;
// abort it, or end it with keel migration reset. An instance left
// migrating by a migration that has ended can be reset.
func (a *serverActionsAPI) resetState(w http.ResponseWriter, r *http.Request, in records.Instance, raw jsonRaw) error {
	if !caller(r).Admin {
		return forbidden("os_compute_api:os-admin-actions:reset_state")
	}
	var args struct {
		State string `json:"state"`
	}
	if err := unmarshalRaw(raw, &args); err != nil {
		return badRequest("Invalid input for os-resetState: " + err.Error())
	}
	state := map[string]records.VMState{"active": records.VMActive, "error": records.VMError}[args.State]
	if state == "" {
		return badRequest("Invalid input for field/attribute state. Value: " + args.State + ". '" + args.State + "' is not one of ['active', 'error']")
	}
	ctx := r.Context()
	for range 5 {
		cur, err := a.store.GetInstance(ctx, in.UUID)
		if err != nil {
			if isNotFound(err) {
				return notFoundf("Instance %s could not be found.", in.UUID)
			}
			return err
		}
		ms, err := a.store.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: in.UUID})
		if err != nil {
			return fmt.Errorf("reading the migrations of %s: %w", in.UUID, err)
		}
		for _, m := range ms {
			if !records.MigrationTerminal(m.Status) {
				return conflict(fmt.Sprintf("Cannot 'os-resetState' instance %s while its migration %d is %s; abort the migration first, or end it with keel migration reset %d", in.UUID, m.ID, m.Status, m.ID))
			}
		}
		writes, fixed, err := a.resetAllocations(ctx, cur, state, ms)
		if err != nil {
			return err
		}
		if len(writes) > 0 {
			if _, err := a.store.WriteAllocations(ctx, writes...); err != nil {
				if placement.IsConflict(err) {
					continue // a consumer changed meanwhile: read again
				}
				if placement.IsCapacity(err) && state == records.VMActive {
					return conflict(fmt.Sprintf("Cannot reset instance %s to active: its flavor does not fit on %s any more (%v); reset it to error, or free room on the host", in.UUID, cur.Host, err))
				}
				return fmt.Errorf("putting the allocations of %s right: %w", in.UUID, err)
			}
		}
		// No move is open (refused above): a resize's new flavor, counted
		// by quotas while one is, goes too.
		cur.VMState, cur.TaskState, cur.ResizeFlavor, cur.UpdatedAt = state, records.TaskNone, nil, a.clock.Now()
		if _, err = a.store.UpdateInstance(ctx, cur); err == nil {
			msg := "state " + args.State
			if len(fixed) > 0 {
				msg += "; allocations put right: " + strings.Join(fixed, "; ")
			}
			a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: "reset-state", Message: msg})
			w.WriteHeader(http.StatusAccepted)
			return nil
		} else if !placement.IsConflict(err) {
			return err
		}
	}
	return conflict("instance " + in.UUID + " kept changing; try again")
}

// resetAllocations returns the writes that put inst's allocations right
// for state, and a line for each: to active, what it holds if that is its
// flavor's request on its host's tree, else what a claim there would
// write (treeAllocation); to error, nothing; every ended migration's
// consumer dropped. Writes name the consumer generations read.
func (a *serverActionsAPI) resetAllocations(ctx context.Context, inst records.Instance, state records.VMState, ms []records.Migration) ([]placement.AllocationWrite, []string, error) {
	var (
		writes []placement.AllocationWrite
		fixed  []string
	)
	sums, err := a.store.ProviderSummaries(ctx, nil)
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
	c, err := a.store.GetConsumer(ctx, inst.UUID)
	found := err == nil
	if err != nil && !isNotFound(err) {
		return nil, nil, fmt.Errorf("reading the allocations of %s: %w", inst.UUID, err)
	}
	// The ended migrations' consumers go in the same write: what they
	// hold is free for the instance's claim.
	var released []map[string]placement.Resources
	var dropped []placement.AllocationWrite
	var droppedMsgs []string
	for _, m := range ms {
		mc, err := a.store.GetConsumer(ctx, m.UUID)
		if isNotFound(err) {
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
			return nil, nil, conflict(fmt.Sprintf("Cannot reset instance %s to active: it has no host with a resource provider (host %q); reset it to error or delete it", inst.UUID, inst.Host))
		}
		if want, err = treeAllocation(inst, rp, sums, c.Allocations, released); err != nil {
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
	case !sameAllocations(c.Allocations, want):
		gen := c.Generation
		writes = append(writes, placement.AllocationWrite{ConsumerUUID: inst.UUID, ConsumerGeneration: &gen, Type: placement.ConsumerInstance,
			ProjectID: inst.ProjectID, UserID: inst.UserID, Allocations: want})
		if len(want) > 0 {
			fixed = append(fixed, fmt.Sprintf("%s replaced by %s", describeAllocations(c.Allocations, nameOf), describeAllocations(want, nameOf)))
		} else {
			fixed = append(fixed, fmt.Sprintf("%s released", describeAllocations(c.Allocations, nameOf)))
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
		return nil, conflict(fmt.Sprintf("Cannot reset instance %s to active: its flavor (%s) does not fit on %s any more; reset it to error, or free room on the host", inst.UUID, q, inst.Host))
	}
	return want, nil
}

func sameAllocations(got, want map[string]placement.Resources) bool {
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
