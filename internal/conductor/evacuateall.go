package conductor

import (
	"context"
	"fmt"
	"slices"

	"keel/internal/plan"
	"keel/internal/records"
)

// EvacuateAllRequest asks for every instance of a host that is down to
// be rebuilt elsewhere, as one plan (`keel host evacuate HOST --plan`).
type EvacuateAllRequest struct {
	Host string
	// Target rebuilds every instance there instead of where the scheduler
	// puts each one.
	Target string
	// Parallel is how many of the plan's evacuations run at once (0: the
	// cluster-wide cap alone limits them).
	Parallel int
	// StopOnFailure ends the plan at its first failed evacuation.
	StopOnFailure bool
}

// EvacuateAll creates an evacuate-all plan for req.Host and starts it: the
// host's compute service must be down (forced down, or silent past
// service_down_time), as for Nova's evacuate; every instance on it that is
// not being deleted becomes a move, largest first. The executor serves
// evacuations before drains and rebalances, re-checks each move as it
// starts (the instance still there, the host still down), and lets the
// scheduler place each instance (never on a draining host) unless Target
// names a host. The plan is stored: a restarted server resumes it.
func (ps *Plans) EvacuateAll(ctx context.Context, req EvacuateAllRequest) (records.Plan, error) {
	ctx = context.WithoutCancel(ctx)
	ps.mu.Lock()
	p, err := ps.evacuateAll(ctx, req)
	ps.mu.Unlock()
	if err != nil {
		return records.Plan{}, err
	}
	ps.log.Info("evacuation planned", "plan", p.ID, "host", req.Host, "moves", len(p.Moves), "parallel", req.Parallel, "target", req.Target)
	ps.kickPlans()
	return p, nil
}

func (ps *Plans) evacuateAll(ctx context.Context, req EvacuateAllRequest) (records.Plan, error) {
	h := req.Host
	if h == "" {
		return records.Plan{}, &InvalidStateError{Msg: "an evacuation needs a host"}
	}
	if req.Target == h {
		return records.Plan{}, &BadRequestError{Msg: "The target host can't be the same one."}
	}
	if req.Parallel < 0 {
		return records.Plan{}, &InvalidStateError{Msg: "parallel must be 0 (no limit but the caps) or more"}
	}
	if _, err := ps.store.GetService(ctx, h); err != nil {
		if isNotFound(err) {
			return records.Plan{}, ps.unknownHost(ctx, h)
		}
		return records.Plan{}, fmt.Errorf("reading the service of %s: %w", h, err)
	}
	down, err := ps.moves.serviceDown(ctx, h)
	if err != nil {
		return records.Plan{}, err
	}
	if !down {
		return records.Plan{}, &BadRequestError{Msg: fmt.Sprintf("Compute service of %s is still in use.", h)}
	}
	plans, err := ps.store.ListPlans(ctx, true)
	if err != nil {
		return records.Plan{}, fmt.Errorf("listing plans: %w", err)
	}
	for _, o := range plans {
		if o.Purpose == records.PlanEvacuateAll && slices.Contains(o.Hosts, h) {
			return records.Plan{}, &InvalidStateError{Msg: fmt.Sprintf("host %s is already being evacuated by plan %d (keel plan show %d)", h, o.ID, o.ID)}
		}
	}
	on, err := ps.store.ListInstances(ctx, h)
	if err != nil {
		return records.Plan{}, fmt.Errorf("listing the instances of %s: %w", h, err)
	}
	now := ps.clock.Now()
	p := records.Plan{UUID: ps.cfg.NewID(), Purpose: records.PlanEvacuateAll, State: records.PlanApproved, Hosts: []string{h},
		Options: records.PlanOptions{Parallel: req.Parallel, StopOnFailure: req.StopOnFailure}, Owner: ps.cfg.Owner,
		CreatedAt: now, UpdatedAt: now}
	for _, in := range on {
		if in.VMState == records.VMDeleted || in.TaskState == records.TaskDeleting {
			continue
		}
		p.Moves = append(p.Moves, records.PlanMove{Instance: in.UUID, Source: h, Dest: req.Target, RAMMB: in.Flavor.RAMMB, State: records.MovePending})
	}
	if len(p.Moves) == 0 {
		return records.Plan{}, &InvalidStateError{Msg: fmt.Sprintf("%s runs no instances: nothing to evacuate", h)}
	}
	if err := plan.Order(p.Moves, "largest"); err != nil {
		return records.Plan{}, err
	}
	if p, err = ps.store.CreatePlan(ctx, p); err != nil {
		return records.Plan{}, fmt.Errorf("recording the evacuation of %s: %w", h, err)
	}
	return p, nil
}
