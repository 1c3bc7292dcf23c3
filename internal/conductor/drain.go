package conductor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"keel/internal/natural"
	"keel/internal/placement"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// DrainRequest asks for a drain of hosts (`keel host drain`).
type DrainRequest struct {
	Hosts []string
	// Parallel, Order, ColdFallback and StopOnFailure are the plan's
	// options (records.PlanOptions).
	Parallel      int
	Order         string
	ColdFallback  bool
	StopOnFailure bool
	// DryRun computes the destinations on a copy of the view and stores
	// nothing, claims nothing, disables nothing.
	DryRun bool
}

// Shortfall is one resource the rest of the cloud lacks for a drain.
type Shortfall struct {
	Resource placement.ResourceClass `json:"resource"`
	Need     int64                   `json:"need"`
	Free     int64                   `json:"free"`
}

// CapacityError is a drain refused before anything moved: the enabled
// hosts left cannot hold the drained hosts' instances.
type CapacityError struct {
	Hosts      []string    `json:"hosts"`
	Shortfalls []Shortfall `json:"shortfalls,omitempty"`
	// Unplaced names the instances no host takes (on a copy of the view,
	// placing them in the plan's order), with why.
	Unplaced []string `json:"unplaced,omitempty"`
	// Why is the scheduler's answer for the first instance unplaced.
	Why string `json:"why,omitempty"`
}

func (e *CapacityError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cannot drain %s: the other enabled hosts cannot hold their instances", strings.Join(e.Hosts, ", "))
	for _, s := range e.Shortfalls {
		fmt.Fprintf(&b, "; %s: need %d, free %d (short by %d)", s.Resource, s.Need, s.Free, s.Need-s.Free)
	}
	if n := len(e.Unplaced); n > 0 {
		fmt.Fprintf(&b, "; %d instance(s) fit on no host: %s", n, strings.Join(e.Unplaced[:min(n, 3)], ", "))
		if n > 3 {
			b.WriteString(", …")
		}
		if e.Why != "" {
			fmt.Fprintf(&b, " (the first: %s)", e.Why)
		}
	}
	b.WriteString(". Free capacity (enable or add hosts) or drain fewer hosts at once.")
	return b.String()
}

// Drain creates a drain plan for req.Hosts and starts it: it checks that
// the other enabled, non-draining hosts can hold every instance (refusing
// with a *CapacityError otherwise, before anything moves), disables the
// hosts' compute services with a reason naming the plan, and hands the
// plan to the executor. With DryRun it returns the plan with the
// destinations the scheduler would choose now, computed on a copy of the
// view, and stores nothing.
func (ps *Plans) Drain(ctx context.Context, req DrainRequest) (records.Plan, error) {
	ctx = context.WithoutCancel(ctx)
	// Planned, recorded and its hosts disabled under the executor's
	// lock: a move the executor starts either started before the drain
	// (and is listed as arriving) or sees its hosts draining (startMove
	// reads them), never in between.
	ps.mu.Lock()
	p, derr, err := ps.drain(ctx, req)
	if err == nil && derr == nil && !req.DryRun {
		ps.redirectInto(ctx, p)
	}
	ps.mu.Unlock()
	if derr != nil {
		_, cerr := ps.CancelPlan(ctx, p.ID, false)
		return records.Plan{}, errors.Join(derr, cerr)
	}
	if err == nil && !req.DryRun {
		ps.log.Info("drain planned", "plan", p.ID, "hosts", p.Hosts, "moves", len(p.Moves), "parallel", req.Parallel, "order", req.Order)
		ps.kickPlans()
	}
	return p, err
}

// drain is Drain under planMu; derr is a failure to disable the hosts of
// the recorded plan p (which Drain then cancels).
func (ps *Plans) drain(ctx context.Context, req DrainRequest) (p records.Plan, derr, err error) {
	if len(req.Hosts) == 0 {
		return records.Plan{}, nil, &InvalidStateError{Msg: "a drain needs at least one host"}
	}
	hosts := slices.Clone(req.Hosts)
	slices.Sort(hosts)
	if len(slices.Compact(slices.Clone(hosts))) != len(hosts) {
		return records.Plan{}, nil, &InvalidStateError{Msg: "a host is named twice"}
	}
	hosts = slices.Clone(req.Hosts)
	draining, err := drainingHosts(ctx, ps.store)
	if err != nil {
		return records.Plan{}, nil, err
	}
	for _, h := range hosts {
		if _, err := ps.store.GetService(ctx, h); err != nil {
			if isNotFound(err) {
				return records.Plan{}, nil, ps.unknownHost(ctx, h)
			}
			return records.Plan{}, nil, fmt.Errorf("reading the service of %s: %w", h, err)
		}
		if slices.Contains(draining, h) {
			return records.Plan{}, nil, &InvalidStateError{Msg: fmt.Sprintf("host %s is already being drained (keel plan list)", h)}
		}
	}
	now := ps.clock.Now()
	p = records.Plan{UUID: ps.cfg.NewID(), Purpose: records.PlanDrain, State: records.PlanApproved, Hosts: hosts,
		Options: records.PlanOptions{Parallel: req.Parallel, Order: req.Order, ColdFallback: req.ColdFallback, StopOnFailure: req.StopOnFailure},
		Owner:   ps.cfg.Owner, CreatedAt: now, UpdatedAt: now}
	// Instances on their way to a drained host (moves started before
	// this drain) are drained too once they land (see startMove). They
	// are listed first: one that lands meanwhile is then also on its host,
	// and listed once.
	var insts []records.Instance
	arriving, err := ps.arriving(ctx, hosts, nil)
	if err != nil {
		return records.Plan{}, nil, err
	}
	seen := map[string]bool{}
	for _, a := range arriving {
		seen[a.inst.UUID] = true
		insts = append(insts, a.inst)
		p.Moves = append(p.Moves, records.PlanMove{Instance: a.inst.UUID, Source: a.host, RAMMB: a.inst.Flavor.RAMMB, State: records.MovePending})
	}
	for _, h := range hosts {
		on, err := ps.store.ListInstances(ctx, h)
		if err != nil {
			return records.Plan{}, nil, fmt.Errorf("listing the instances of %s: %w", h, err)
		}
		for _, in := range on {
			if in.VMState == records.VMDeleted || in.TaskState == records.TaskDeleting || seen[in.UUID] {
				continue
			}
			insts = append(insts, in)
			p.Moves = append(p.Moves, records.PlanMove{Instance: in.UUID, Source: h, RAMMB: in.Flavor.RAMMB, State: records.MovePending})
		}
	}
	byUUID := map[string]records.Instance{}
	for _, in := range insts {
		byUUID[in.UUID] = in
	}
	if err := plan.Order(p.Moves, req.Order); err != nil {
		return records.Plan{}, nil, &InvalidStateError{Msg: err.Error()}
	}
	dests, err := ps.fitCheck(ctx, p, byUUID, append(draining, hosts...))
	if err != nil {
		return records.Plan{}, nil, err
	}
	if req.DryRun {
		p.State = records.PlanRecommended
		for i := range p.Moves {
			p.Moves[i].Dest = dests[i]
		}
		return p, nil, nil
	}
	p.CreatedAt, p.UpdatedAt = ps.clock.Now(), ps.clock.Now()
	if p, err = ps.store.CreatePlan(ctx, p); err != nil {
		return records.Plan{}, nil, fmt.Errorf("recording the drain of %s: %w", strings.Join(hosts, ", "), err)
	}
	reason := fmt.Sprintf("keel drain plan %d", p.ID)
	for _, h := range hosts {
		if _, err := ps.store.UpdateService(ctx, h, func(s *records.Service) error {
			s.Disabled, s.DisabledReason, s.UpdatedAt = true, reason, ps.clock.Now()
			return nil
		}); err != nil {
			derr = fmt.Errorf("disabling %s for drain plan %d: %w", h, p.ID, err)
			break
		}
	}
	return p, derr, nil
}

// redirectInto re-checks the running moves of the other plans against the
// new drain p: a live migration a plan started onto one of p's hosts
// before p existed is aborted while it still can be and its move tried
// again elsewhere (plan.Redirect), so the instance does not land on a
// draining host only to be moved again. One too far along to abort lands
// and p moves it on (p lists it as arriving). Called under planMu.
func (ps *Plans) redirectInto(ctx context.Context, p records.Plan) {
	plans, err := ps.store.ListPlans(ctx, true)
	if err != nil {
		ps.log.Warn("re-checking running moves against a new drain", "plan", p.ID, "err", err)
		return
	}
	for _, o := range plans {
		if o.ID == p.ID || o.State != records.PlanRunning {
			continue
		}
		for i, mv := range o.Moves {
			if mv.State != records.MoveRunning || mv.Migration == 0 || mv.Cold || mv.Redirect != "" {
				continue
			}
			m, err := ps.store.GetMigration(ctx, mv.Migration)
			if err != nil || m.Type != records.MigrationTypeLive || records.MigrationTerminal(m.Status) || !slices.Contains(p.Hosts, m.DestHost) {
				continue
			}
			why := fmt.Sprintf("destination %s is being drained by plan %d: tried again elsewhere", m.DestHost, p.ID)
			if _, err := ps.stepPlan(ctx, o.ID, plan.Event{Kind: plan.Redirect, Move: i, Reason: why}); err != nil {
				ps.log.Warn("redirecting a move off a draining host", "plan", o.ID, "move", i, "err", err)
				continue
			}
			ps.log.Info("redirecting a move off a host being drained", "plan", o.ID, "move", i, "migration", m.ID,
				"dest", m.DestHost, "drain", p.ID)
		}
	}
}

type arrival struct {
	inst records.Instance
	host string
}

// arriving lists the instances an active migration moves onto one of
// hosts, except those already listed.
func (ps *Plans) arriving(ctx context.Context, hosts []string, listed []records.Instance) ([]arrival, error) {
	ms, err := ps.store.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return nil, fmt.Errorf("listing the migrations into %v: %w", hosts, err)
	}
	seen := map[string]bool{}
	for _, in := range listed {
		seen[in.UUID] = true
	}
	var out []arrival
	for _, m := range ms {
		if !slices.Contains(hosts, m.DestHost) || seen[m.InstanceUUID] {
			continue
		}
		in, err := ps.store.GetInstance(ctx, m.InstanceUUID)
		if isNotFound(err) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("reading arriving instance %s: %w", m.InstanceUUID, err)
		}
		seen[in.UUID] = true
		out = append(out, arrival{in, m.DestHost})
	}
	return out, nil
}

// fitCheck places every move of p, in order, on a copy of the view that
// ignores the draining hosts (nothing is claimed in the store), and
// returns the destinations; if some instance fits nowhere it returns a
// *CapacityError naming the shortfall per resource.
func (ps *Plans) fitCheck(ctx context.Context, p records.Plan, insts map[string]records.Instance, draining []string) ([]string, error) {
	view, err := ps.sched.View().Clone(ctx)
	if err != nil {
		return nil, err
	}
	dry, err := ps.sched.OnView(view, rand.New(rand.NewPCG(uint64(len(p.Moves)), 17)))
	if err != nil {
		return nil, fmt.Errorf("a scheduler on the copy of the view: %w", err)
	}
	// Free capacity on the hosts that may receive, against the demand.
	need, free := placement.Resources{}, placement.Resources{}
	for _, mv := range p.Moves {
		for rc, n := range insts[mv.Instance].Flavor.Resources() {
			need[rc] += n
		}
	}
	for _, h := range view.Hosts() {
		if h.Disabled || h.ForcedDown || !h.HasService || slices.Contains(draining, h.Name) {
			continue
		}
		used := h.Used()
		for rc, inv := range h.Inventories() {
			free[rc] += max(inv.Capacity()-used[rc], 0)
		}
	}
	cerr := &CapacityError{Hosts: p.Hosts}
	for _, rc := range []placement.ResourceClass{placement.VCPU, placement.MemoryMB, placement.DiskGB} {
		if need[rc] > free[rc] {
			cerr.Shortfalls = append(cerr.Shortfalls, Shortfall{Resource: rc, Need: need[rc], Free: free[rc]})
		}
	}
	dests := make([]string, len(p.Moves))
	for i, mv := range p.Moves {
		inst := insts[mv.Instance]
		req, err := ps.place.request(ctx, inst)
		if err != nil {
			return nil, err
		}
		req.IgnoreHosts = append(slices.Clone(draining), mv.Source)
		sel, err := dry.Select(ctx, req, func(_ context.Context, cand scheduler.Candidate) (int64, error) {
			return cand.Generation + 1, nil // the copy's claim: nothing is written
		})
		if err != nil {
			if !scheduler.IsNoValidHost(err) {
				return nil, fmt.Errorf("placing %s on the copy of the view: %w", inst.UUID, err)
			}
			if len(cerr.Unplaced) == 0 {
				cerr.Why = err.Error()
			}
			cerr.Unplaced = append(cerr.Unplaced, instanceRef(inst, fmt.Sprintf("%s on %s", inst.Flavor.Name, mv.Source)))
			continue
		}
		dests[i] = sel.Host
	}
	if len(cerr.Shortfalls) > 0 || len(cerr.Unplaced) > 0 {
		return nil, cerr
	}
	return dests, nil
}

// Undrain ends a host's maintenance: it enables its compute service
// again and, with moveBack, creates and starts a plan that moves the
// instances its last drain moved away back to it (those still where the
// drain put them). It refuses while a drain of the host still runs.
func (ps *Plans) Undrain(ctx context.Context, host string, moveBack bool) (records.Plan, error) {
	ctx = context.WithoutCancel(ctx)
	plans, err := ps.store.ListPlans(ctx, false)
	if err != nil {
		return records.Plan{}, fmt.Errorf("undraining %s: %w", host, err)
	}
	var last *records.Plan
	for i := range plans {
		p := &plans[i]
		if p.Purpose != records.PlanDrain || !slices.Contains(p.Hosts, host) {
			continue
		}
		if !records.PlanTerminal(p.State) && p.State != records.PlanRecommended {
			return records.Plan{}, &InvalidStateError{Msg: fmt.Sprintf("drain plan %d of %s is still %s: cancel it first (keel plan cancel %d)", p.ID, host, p.State, p.ID)}
		}
		last = p
	}
	if _, err := ps.store.UpdateService(ctx, host, func(s *records.Service) error {
		s.Disabled, s.DisabledReason, s.UpdatedAt = false, "", ps.clock.Now()
		return nil
	}); err != nil {
		if isNotFound(err) {
			return records.Plan{}, ps.unknownHost(ctx, host)
		}
		return records.Plan{}, fmt.Errorf("enabling %s: %w", host, err)
	}
	if !moveBack {
		return records.Plan{}, nil
	}
	if last == nil {
		return records.Plan{}, &InvalidStateError{Msg: fmt.Sprintf("%s was enabled; no drain of it to return instances from", host)}
	}
	now := ps.clock.Now()
	back := records.Plan{UUID: ps.cfg.NewID(), Purpose: records.PlanReturn, Hosts: []string{host}, State: records.PlanApproved,
		Options: records.PlanOptions{Parallel: last.Options.Parallel}, Owner: ps.cfg.Owner, CreatedAt: now, UpdatedAt: now,
		Reason: fmt.Sprintf("returns what drain plan %d moved off %s", last.ID, host)}
	for _, mv := range last.Moves {
		if mv.Source != host || mv.State != records.MoveDone {
			continue
		}
		in, err := ps.store.GetInstance(ctx, mv.Instance)
		if err != nil || in.Host != mv.Result {
			continue // gone, or moved since
		}
		back.Moves = append(back.Moves, records.PlanMove{Instance: mv.Instance, Source: mv.Result, Dest: host, RAMMB: in.Flavor.RAMMB, State: records.MovePending})
	}
	if back, err = ps.store.CreatePlan(ctx, back); err != nil {
		return records.Plan{}, fmt.Errorf("recording the return to %s: %w", host, err)
	}
	ps.kickPlans()
	return back, nil
}

// CreatePlan stores a plan a planner proposed (a rebalance): recommended,
// nothing claimed; ApprovePlan starts it. Its moves must name instances,
// sources and destinations.
func (ps *Plans) CreatePlan(ctx context.Context, p records.Plan) (records.Plan, error) {
	for i, mv := range p.Moves {
		if mv.Instance == "" || mv.Source == "" || mv.Dest == "" || mv.Source == mv.Dest {
			return records.Plan{}, &InvalidStateError{Msg: fmt.Sprintf("move %d needs an instance, a source and another destination", i)}
		}
		p.Moves[i].State = records.MovePending
	}
	now := ps.clock.Now()
	p.ID, p.State, p.Owner, p.CreatedAt, p.UpdatedAt = 0, records.PlanRecommended, ps.cfg.Owner, now, now
	if p.UUID == "" {
		p.UUID = ps.cfg.NewID()
	}
	saved, err := ps.store.CreatePlan(ctx, p)
	if err != nil {
		return records.Plan{}, fmt.Errorf("recording the %s plan: %w", p.Purpose, err)
	}
	return saved, nil
}

// supersedeOlder supersedes the recommended plans of p's purpose older
// than p, saying why.
func (ps *Plans) supersedeOlder(ctx context.Context, p records.Plan, why string) {
	plans, err := ps.store.ListPlans(ctx, true)
	if err != nil {
		ps.log.Warn("listing plans to supersede", "plan", p.ID, "err", err)
		return
	}
	for _, o := range plans {
		if o.ID < p.ID && o.Purpose == p.Purpose && o.State == records.PlanRecommended {
			reason := fmt.Sprintf("superseded by plan %d (%s)", p.ID, why)
			if _, err := ps.stepPlan(ctx, o.ID, plan.Event{Kind: plan.Supersede, Reason: reason}); err != nil {
				ps.log.Warn("superseding a plan", "plan", o.ID, "err", err)
			}
		}
	}
}

// ApprovePlan approves a recommended plan (`keel rebalance apply`): the
// executor starts it. Older recommended plans of the same purpose are
// superseded.
func (ps *Plans) ApprovePlan(ctx context.Context, id int64) (records.Plan, error) {
	ctx = context.WithoutCancel(ctx)
	p, err := ps.userPlanEvent(ctx, id, plan.Event{Kind: plan.Approve})
	if err != nil {
		return p, err
	}
	ps.supersedeOlder(ctx, p, "approved")
	ps.kickPlans()
	return p, nil
}

// CancelPlan cancels a plan: no move starts any more; running moves
// finish, or with abort are aborted. A drain's hosts stay disabled
// (`keel host undrain` enables them).
func (ps *Plans) CancelPlan(ctx context.Context, id int64, abort bool) (records.Plan, error) {
	ctx = context.WithoutCancel(ctx)
	p, err := ps.userPlanEvent(ctx, id, plan.Event{Kind: plan.Cancel, Abort: abort, Reason: "cancelled by an operator"})
	ps.kickPlans()
	return p, err
}

// userPlanEvent applies an operator's event, holding the executor's lock
// so it never interleaves with a tick of this replica.
func (ps *Plans) userPlanEvent(ctx context.Context, id int64, ev plan.Event) (records.Plan, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	cur, err := ps.store.GetPlan(ctx, id)
	if err != nil {
		return records.Plan{}, err // the store's error names the plan
	}
	if _, _, err := planMachine.Step(cur, ev); err != nil {
		return cur, &InvalidStateError{Msg: err.Error()}
	}
	return ps.stepPlan(ctx, id, ev)
}

// UnknownHostError is a request naming a host with no compute service; it
// lists the hosts there are. It matches store.ErrNotFound.
type UnknownHostError struct {
	Host  string
	Hosts []string // every compute host, sorted
}

func (e *UnknownHostError) Error() string {
	if len(e.Hosts) == 0 {
		return fmt.Sprintf("no compute host %s (there are no compute hosts yet)", e.Host)
	}
	return fmt.Sprintf("no compute host %s (hosts: %s)", e.Host, strings.Join(e.Hosts, ", "))
}

// Is makes the error match store.ErrNotFound.
func (e *UnknownHostError) Is(target error) bool { return target == store.ErrNotFound }

// unknownHost is the error for a host with no compute service.
func (ps *Plans) unknownHost(ctx context.Context, host string) error {
	e := &UnknownHostError{Host: host}
	if svcs, err := ps.store.ListServices(ctx); err == nil {
		for _, s := range svcs {
			if s.Binary == "" || s.Binary == "nova-compute" {
				e.Hosts = append(e.Hosts, s.Host)
			}
		}
	}
	slices.SortFunc(e.Hosts, natural.Compare)
	return e
}

// instanceRef names an instance as its user named it, then its UUID and
// what more there is to say: "vm9 (6e0cb098-…, m1.large on h01)"; an
// unnamed one by its UUID: "6e0cb098-… (m1.large on h01)".
func instanceRef(inst records.Instance, more string) string {
	if inst.Name == "" {
		return fmt.Sprintf("%s (%s)", inst.UUID, more)
	}
	return fmt.Sprintf("%s (%s, %s)", inst.Name, inst.UUID, more)
}
