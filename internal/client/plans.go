package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gophercloud/gophercloud/v2"

	"keel/internal/plan"
	"keel/internal/rebalance"
	"keel/internal/records"
)

// Plan is a move plan as keel's API shows it: the record, its progress
// and, until it ends, the pace of its moves left (nil from a server that
// does not say).
type Plan struct {
	records.Plan
	Progress plan.Summary `json:"progress"`
	Pace     *plan.Pace   `json:"pace,omitempty"`
}

// DrainOptions are a drain's options (POST /keel/v1/plans {"drain": …}).
type DrainOptions struct {
	Hosts         []string `json:"hosts"`
	Parallel      int      `json:"parallel,omitempty"`
	Order         string   `json:"order,omitempty"`
	ColdFallback  bool     `json:"cold_fallback,omitempty"`
	StopOnFailure bool     `json:"stop_on_failure,omitempty"`
	DryRun        bool     `json:"dry_run,omitempty"`
}

// Plans lists the move plans (GET /keel/v1/plans, admin), oldest first.
func (c *Client) Plans(ctx context.Context) ([]Plan, error) {
	var body struct {
		Plans []Plan `json:"plans"`
	}
	if _, err := c.keel.Get(ctx, c.keel.ServiceURL("plans"), &body, nil); err != nil {
		return nil, fmt.Errorf("listing plans: %w", describe(err))
	}
	return body.Plans, nil
}

// GetPlan shows one plan with its moves.
func (c *Client) GetPlan(ctx context.Context, id int64) (Plan, error) {
	var body struct {
		Plan Plan `json:"plan"`
	}
	if _, err := c.keel.Get(ctx, c.keel.ServiceURL("plans", strconv.FormatInt(id, 10)), &body, nil); err != nil {
		return Plan{}, planError(id, "reading", err)
	}
	return body.Plan, nil
}

// Drain creates and starts a drain plan (or, with DryRun, returns the
// destinations the scheduler would choose now, storing nothing). A drain
// the cloud cannot hold is refused with a 409 naming the shortfall.
func (c *Client) Drain(ctx context.Context, o DrainOptions) (Plan, error) {
	var body struct {
		Plan Plan `json:"plan"`
	}
	_, err := c.keel.Post(ctx, c.keel.ServiceURL("plans"), map[string]any{"drain": o}, &body,
		&gophercloud.RequestOpts{OkCodes: []int{200, 202}})
	if err != nil {
		return Plan{}, fmt.Errorf("draining %s: %w", strings.Join(o.Hosts, ", "), describe(err))
	}
	return body.Plan, nil
}

// EvacuateOptions are an evacuate-all plan's (POST /keel/v1/plans
// {"evacuate": …}).
type EvacuateOptions struct {
	Host          string `json:"host"`
	Target        string `json:"target,omitempty"`
	Parallel      int    `json:"parallel,omitempty"`
	StopOnFailure bool   `json:"stop_on_failure,omitempty"`
}

// EvacuateAll creates and starts an evacuate-all plan for a host that is
// down (refused with 400, Nova's "still in use", while it is up).
func (c *Client) EvacuateAll(ctx context.Context, o EvacuateOptions) (Plan, error) {
	var body struct {
		Plan Plan `json:"plan"`
	}
	_, err := c.keel.Post(ctx, c.keel.ServiceURL("plans"), map[string]any{"evacuate": o}, &body,
		&gophercloud.RequestOpts{OkCodes: []int{202}})
	if err != nil {
		return Plan{}, fmt.Errorf("evacuating %s: %w", o.Host, describe(err))
	}
	return body.Plan, nil
}

// CreateRebalancePlan stores a recommended plan of the given moves
// (instance, source, destination); ApprovePlan starts it.
func (c *Client) CreateRebalancePlan(ctx context.Context, moves []records.PlanMove, opts records.PlanOptions, reason string) (Plan, error) {
	var body struct {
		Plan Plan `json:"plan"`
	}
	_, err := c.keel.Post(ctx, c.keel.ServiceURL("plans"),
		map[string]any{"rebalance": map[string]any{"moves": moves, "options": opts, "reason": reason}}, &body,
		&gophercloud.RequestOpts{OkCodes: []int{201}})
	if err != nil {
		return Plan{}, fmt.Errorf("recording the rebalance plan: %w", describe(err))
	}
	return body.Plan, nil
}

// RebalanceOptions ask the rebalance planner for a plan.
type RebalanceOptions struct {
	Metric    string  `json:"metric,omitempty"`
	Threshold float64 `json:"threshold,omitempty"`
	MaxMoves  int     `json:"max_moves,omitempty"`
	Seed      uint64  `json:"seed,omitempty"`
	Parallel  int     `json:"parallel,omitempty"`
}

// PlanRebalance asks keel's rebalance planner for moves that lower the
// imbalance; the answer is the planner's summary and, if it proposed
// moves, the recommended plan that holds them (ID 0 otherwise).
func (c *Client) PlanRebalance(ctx context.Context, o RebalanceOptions) (rebalance.Plan, Plan, error) {
	var body struct {
		Rebalance rebalance.Plan `json:"rebalance"`
		Plan      Plan           `json:"plan"`
	}
	_, err := c.keel.Post(ctx, c.keel.ServiceURL("plans"), map[string]any{"rebalance": o}, &body,
		&gophercloud.RequestOpts{OkCodes: []int{200, 201}})
	if err != nil {
		return rebalance.Plan{}, Plan{}, fmt.Errorf("planning a rebalance: %w", describe(err))
	}
	return body.Rebalance, body.Plan, nil
}

// ApprovePlan starts a recommended plan.
func (c *Client) ApprovePlan(ctx context.Context, id int64) (Plan, error) {
	return c.planAction(ctx, id, "approve", map[string]any{})
}

// CancelPlan cancels a plan: running moves finish, or with abort are
// aborted.
func (c *Client) CancelPlan(ctx context.Context, id int64, abort bool) (Plan, error) {
	return c.planAction(ctx, id, "cancel", map[string]any{"abort": abort})
}

func (c *Client) planAction(ctx context.Context, id int64, action string, req map[string]any) (Plan, error) {
	var body struct {
		Plan Plan `json:"plan"`
	}
	_, err := c.keel.Post(ctx, c.keel.ServiceURL("plans", strconv.FormatInt(id, 10), action), req, &body,
		&gophercloud.RequestOpts{OkCodes: []int{200}})
	if err != nil {
		return Plan{}, planError(id, map[string]string{"approve": "approving", "cancel": "cancelling"}[action], err)
	}
	return body.Plan, nil
}

// planError is a plan request's error: "plan N: not found" with where to
// look, or what was being done and the server's reason.
func planError(id int64, doing string, err error) error {
	err = describe(err)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("plan %d: %w (keel plan list shows the plans)", id, ErrNotFound)
	}
	return fmt.Errorf("%s plan %d: %w", doing, id, err)
}

// Undrain enables a drained host again; with moveBack it also starts a
// plan returning the instances its drain moved away (returned; ID 0
// without one).
func (c *Client) Undrain(ctx context.Context, host string, moveBack bool) (Plan, error) {
	var body struct {
		Plan *Plan `json:"plan"`
	}
	_, err := c.keel.Post(ctx, c.keel.ServiceURL("hosts", host, "undrain"), map[string]any{"return": moveBack}, &body,
		&gophercloud.RequestOpts{OkCodes: []int{200}})
	if err != nil {
		return Plan{}, fmt.Errorf("undraining %s: %w", host, describe(err))
	}
	if body.Plan == nil {
		return Plan{}, nil
	}
	return *body.Plan, nil
}
