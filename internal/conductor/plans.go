package conductor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"keel/internal/clock"
	"keel/internal/flow"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// The plan executor: one for every plan (drain, rebalance, evacuate-all).
// The decisions are package plan's (the machine, Select under the caps);
// this file reads and saves the plan records, re-checks and starts each
// move, and feeds the moves' migrations' ends back. It runs on this
// replica's plans only (see Config.Owner): those it created, and those of
// a replica whose heartbeat stopped, taken over by the flow driver as
// migrations are (planFlow).

// Plans is the plan API (drains, undrains, evacuate-all, rebalance
// plans; create, approve, cancel) and its executor (RunPlans, TickPlans),
// the conductor's plans flow. It holds only what those need; the moves a
// plan starts, confirms and aborts are the conductor's (planMover).
// Conductor.Plans returns it.
type Plans struct {
	// planEffects is what plans need of the cloud (the config, store,
	// scheduler, placer, the conductor's moves, clock and log), and
	// performs the plan machine's actions.
	*planEffects
	tasks *tasks
	// flows is the conductor's flow driver; flow the plans' flow it
	// recovers, takes over and starts (approved plans).
	flows *flow.Driver
	flow  *flow.Flow[records.Plan, plan.Event, plan.Action]
	// mu serialises the executor's ticks (one writer of the plans this
	// replica runs) with an operator's events; wake wakes the executor
	// early (a move's migration ended, a plan was created or cancelled).
	mu   sync.Mutex
	wake chan struct{}
}

// newPlans builds the plans' API and executor and registers their flow
// with the driver d.
func newPlans(cfg Config, st Store, sched *scheduler.Scheduler, place *placer, moves planMover, clk clock.Clock, log *slog.Logger,
	t *tasks, d *flow.Driver) *Plans {
	fx := &planEffects{cfg: cfg, store: st, sched: sched, place: place, moves: moves, clock: clk, log: log}
	ps := &Plans{planEffects: fx, tasks: t, flows: d, wake: make(chan struct{}, 1)}
	ps.flow = ps.planFlow()
	flow.Register(d, ps.flow)
	return ps
}

// planMachine is the executor's machine: a move's live migration is tried
// twice (the scheduler choosing again) before it fails or falls back.
var planMachine = plan.Machine{MaxAttempts: 2}

// PlanCaps returns the caps the executor starts moves under.
func (ps *Plans) PlanCaps() plan.Caps {
	return plan.Caps{PerSource: ps.cfg.MaxConcurrentLiveMigrations,
		PerDest: ps.cfg.MaxConcurrentIncomingLiveMigrations, Total: ps.cfg.MaxConcurrentLiveMigrationsTotal}
}

// kickPlans wakes the executor (RunPlans) without waiting.
func (ps *Plans) kickPlans() {
	select {
	case ps.wake <- struct{}{}:
	default:
	}
}

// RunPlans runs the plan executor until ctx ends: TickPlans every
// Config.PlanTick on the conductor's clock, and at once when a plan
// move's migration ends or a plan is created, approved or cancelled.
func (ps *Plans) RunPlans(ctx context.Context) {
	every := ps.cfg.PlanTick
	if every <= 0 {
		every = time.Second
	}
	ps.tasks.repeat(ctx, ps.clock, every, func() { ps.kickPlans() })
	ps.tasks.goDo(func() {
		for {
			if _, err := ps.TickPlans(ctx); err != nil && ctx.Err() == nil {
				ps.log.Warn("running plans", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-ps.tasks.closing.Done():
				return
			case <-ps.wake:
			}
		}
	})
}

// TickPlans does one round of the executor: the plan flow's take-over
// (dead replicas' plans) and deadlines (approved plans start running) at
// once rather than at the driver's next round, then the ends of the
// running moves' migrations fed to this replica's running plans, then the
// pending moves Select chooses under the caps started. A restart's
// running plans are resumed by Recover. It returns how many moves it
// started.
func (ps *Plans) TickPlans(ctx context.Context) (int, error) {
	ctx = context.WithoutCancel(ctx)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, err := ps.flow.TakeOver(ctx, ps.flows); err != nil {
		ps.log.Warn("taking dead replicas' plans over", "err", err)
	}
	if _, err := ps.flow.Sweep(ctx, ps.flows); err != nil {
		ps.log.Warn("starting approved plans", "err", err)
	}
	plans, err := ps.store.ListPlans(ctx, true)
	if err != nil {
		return 0, fmt.Errorf("listing plans: %w", err)
	}
	var mine []records.Plan
	for _, p := range plans {
		if p.State != records.PlanRunning || (ps.cfg.Owner != "" && p.Owner != ps.cfg.Owner) {
			continue // recommended, approved (the sweep runs it), or another replica's
		}
		if p, err = ps.pollMoves(ctx, p); err != nil {
			ps.log.Warn("reading a plan's moves", "plan", p.ID, "err", err)
		}
		if p.State == records.PlanRunning {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 {
		return 0, nil
	}
	u, err := ps.inFlight(ctx)
	if err != nil {
		return 0, err
	}
	started := 0
	byID := map[int64]*records.Plan{}
	for i := range mine {
		byID[mine[i].ID] = &mine[i]
	}
	for _, pk := range plan.Select(mine, &u, ps.PlanCaps()) {
		p := byID[pk.Plan]
		next, err := ps.stepPlan(withUsage(ctx, &u), p.ID, plan.Event{Kind: plan.Begin, Move: pk.Move})
		if err != nil {
			ps.log.Warn("starting a plan move", "plan", p.ID, "move", pk.Move, "err", err)
			continue
		}
		*p = next
		started++
	}
	return started, nil
}

// pollMoves feeds the ends (and progress) of p's running moves'
// migrations to p, and confirms a cold move waiting in VERIFY_RESIZE.
func (ps *Plans) pollMoves(ctx context.Context, p records.Plan) (records.Plan, error) {
	for i, mv := range p.Moves {
		if mv.State != records.MoveRunning {
			continue
		}
		m, err := ps.store.GetMigration(ctx, mv.Migration)
		if isNotFound(err) {
			m = records.Migration{ID: mv.Migration, Status: records.MigrationError, Error: "migration record missing"}
		} else if err != nil {
			return p, err
		}
		ev := plan.Event{Move: i, Migration: m.ID, Bytes: m.MemoryProcessedBytes}
		switch {
		case records.MigrationTerminal(m.Status) || (m.Type == records.MigrationTypeEvac && m.Status == records.MigrationDone):
			// An evacuation is done once the instance runs on its
			// destination (its source, down, cleans up when it is back).
			ev.Kind, ev.Status, ev.Reason, ev.Interrupted = plan.Ended, m.Status, m.Error, m.Interrupted
			if ev.Host, err = ps.place.hostOf(ctx, mv.Instance); err != nil {
				return p, err
			}
		case m.Status == records.MigrationFinished:
			// A cold move's guest runs on its destination: the plan
			// confirms it (nobody else will).
			if err := ps.moves.ConfirmResize(ctx, mv.Instance); err != nil {
				ps.log.Warn("confirming a plan's cold move", "plan", p.ID, "move", i, "err", err)
			}
			continue
		case m.MemoryProcessedBytes > mv.BytesCopied:
			ev.Kind = plan.Progress
		default:
			continue
		}
		next, err := ps.stepPlan(ctx, p.ID, ev)
		if err != nil {
			return p, err
		}
		p = next
	}
	return p, nil
}

// inFlight counts the cloud's active migrations by source and
// destination: what the caps are measured against. Evacuations count
// until their instance runs on its destination (status done).
func (ps *Plans) inFlight(ctx context.Context) (plan.Usage, error) {
	ms, err := ps.store.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return plan.Usage{}, fmt.Errorf("counting migrations in flight: %w", err)
	}
	var u plan.Usage
	for _, m := range ms {
		switch {
		case m.Type == records.MigrationTypeLive || m.Type == "":
			u.Add(m.SourceHost, m.DestHost)
		case m.Type == records.MigrationTypeEvac && m.Status != records.MigrationDone:
			u.Add(m.SourceHost, m.DestHost)
		}
	}
	return u, nil
}

// planFlow is the plans' flow: the driver recovers a restart's running
// plans, takes dead replicas' over and starts approved ones (its
// deadline); the executor (TickPlans) feeds the rest.
func (ps *Plans) planFlow() *flow.Flow[records.Plan, plan.Event, plan.Action] {
	return &flow.Flow[records.Plan, plan.Event, plan.Action]{
		Name: "plan", Machine: planSteps{planMachine},
		List: func(ctx context.Context) ([]records.Plan, error) { return ps.store.ListPlans(ctx, true) },
		Get: func(ctx context.Context, p records.Plan) (records.Plan, error) {
			return ps.store.GetPlan(ctx, p.ID)
		},
		Save:  ps.store.UpdatePlan,
		Key:   func(p records.Plan) string { return "plan/" + strconv.FormatInt(p.ID, 10) },
		Owner: func(p records.Plan) string { return p.Owner }, Version: func(p records.Plan) int64 { return p.Version },
		Owned: func(p records.Plan, owner string, now time.Time) records.Plan {
			p.Owner, p.UpdatedAt = owner, now
			return p
		},
		Conflict: moved,
		Stamp: func(p records.Plan, now time.Time) records.Plan {
			p.UpdatedAt = now
			return p
		},
		Perform: closable(ps.tasks, func(ctx context.Context, p records.Plan, a plan.Action) (plan.Event, bool, error) {
			ev, ok := ps.perform(ctx, p, a)
			return ev, ok, nil
		}),
	}
}

// stepPlan feeds ev to plan id through the driver's loop (flow.Flow.Run)
// and the plan machine's effects, until none is left.
func (ps *Plans) stepPlan(ctx context.Context, id int64, ev plan.Event) (records.Plan, error) {
	p, err := ps.flow.Run(ctx, ps.flows, records.Plan{ID: id}, ev)
	if err != nil {
		return p, fmt.Errorf("plan %d: %s: %w", id, ev.Kind, err)
	}
	return p, nil
}

// usageKey carries the executor's count of moves in flight
// (withUsage), which a move it starts adds to.
type usageKey struct{}

func withUsage(ctx context.Context, u *plan.Usage) context.Context {
	return context.WithValue(ctx, usageKey{}, u)
}

func usageOf(ctx context.Context) *plan.Usage {
	u, _ := ctx.Value(usageKey{}).(*plan.Usage)
	return u
}

// planSteps is the plan machine as the driver steps it (the event stamped
// with the clock's now). A running plan resumes (its starting moves look
// for their migration); an approved one is due at once: it starts
// running. A running plan has no deadline: its executor feeds it every
// tick.
type planSteps struct{ plan.Machine }

func (m planSteps) Step(p records.Plan, ev plan.Event, now time.Time) (records.Plan, []plan.Action, error) {
	ev.Now = now
	return m.Machine.Step(p, ev)
}

func (planSteps) Deadline(p records.Plan, _ time.Time) (time.Time, plan.Event, bool) {
	if p.State == records.PlanApproved {
		return time.Time{}, plan.Event{Kind: plan.Run}, true
	}
	return time.Time{}, plan.Event{}, false
}

func (planSteps) Resume(p records.Plan) (plan.Event, bool) {
	switch p.State {
	case records.PlanRunning:
		return plan.Event{Kind: plan.Resume}, true
	case records.PlanApproved:
		return plan.Event{Kind: plan.Run}, true
	}
	return plan.Event{}, false
}

// planEffects performs the plan machine's actions: a move re-checked
// and started (a live or cold migration, or an evacuation, through the
// conductor's starts), its migration found, a cancelled plan's move
// aborted, the end logged. It holds only what those need.
type planEffects struct {
	cfg   Config
	store Store
	sched *scheduler.Scheduler
	place *placer
	moves planMover
	clock clock.Clock
	log   *slog.Logger
}

// planMover is what plans ask of the conductor (*Conductor): their
// moves' migrations started as a plan starts them (the caller waits for
// the first steps), aborted or confirmed, and whether a host is down.
type planMover interface {
	liveMigrate(ctx context.Context, instanceUUID, requestedHost string, o moveOpts) (records.Migration, error)
	startColdMove(ctx context.Context, instanceUUID, requestedHost string, newFlavor *records.Flavor, o moveOpts) (records.Migration, error)
	evacuate(ctx context.Context, instanceUUID, requestedHost string, o moveOpts) (records.Migration, error)
	Abort(ctx context.Context, migID int64) error
	serviceDown(ctx context.Context, host string) (bool, error)
	// ConfirmResize confirms a plan's cold move left in VERIFY_RESIZE.
	ConfirmResize(ctx context.Context, instanceUUID string) error
}

var _ planMover = (*Conductor)(nil)

// perform is the plan machine's effect table: it runs one action and
// returns its answer, if it has one.
func (e *planEffects) perform(ctx context.Context, p records.Plan, a plan.Action) (plan.Event, bool) {
	switch a.Kind {
	case plan.StartMove:
		ev := e.startMove(ctx, p, a.Move, a.Cold, usageOf(ctx))
		ev.Move = a.Move
		return ev, true
	case plan.FindMigration:
		m, found, err := e.moveMigration(ctx, p, a.Move)
		switch {
		case err != nil:
			e.log.Warn("looking for a plan move's migration; left starting", "plan", p.ID, "move", a.Move, "err", err)
			return plan.Event{}, false
		case found:
			return plan.Event{Kind: plan.Started, Move: a.Move, Migration: m.ID}, true
		}
		return plan.Event{Kind: plan.Lost, Move: a.Move}, true
	case plan.AbortMove:
		if err := e.moves.Abort(ctx, a.Migration); err != nil {
			e.log.Warn("aborting a cancelled plan's move", "plan", p.ID, "move", a.Move, "migration", a.Migration, "err", err)
		}
	case plan.Finished:
		s := plan.Summarise(p, e.clock.Now())
		e.log.Info("plan ended", "plan", p.ID, "purpose", p.Purpose, "state", p.State, "reason", p.Reason,
			"done", s.Done, "failed", s.Failed, "skipped", s.Skipped, "cancelled", s.Cancelled,
			"took", p.FinishedAt.Sub(p.StartedAt).Round(time.Millisecond))
	}
	return plan.Event{}, false
}

// moveMigration finds the migration started for move i of p (by the plan
// move the migration names): the newest one.
func (e *planEffects) moveMigration(ctx context.Context, p records.Plan, i int) (records.Migration, bool, error) {
	ms, err := e.store.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: p.Moves[i].Instance})
	if err != nil {
		return records.Migration{}, false, err
	}
	for j := len(ms) - 1; j >= 0; j-- {
		m := ms[j]
		if m.PlanMove != nil && m.PlanMove.Plan == p.ID && m.PlanMove.Move == i && m.ID > p.Moves[i].Migration {
			return m, true, nil
		}
	}
	return records.Migration{}, false, nil
}

// startMove re-checks move i of p just before it starts — the instance
// still active on the planned source, a planned destination still
// passing the scheduler's filters and not draining — and starts its
// migration, never onto a draining host nor one at its incoming cap.
func (e *planEffects) startMove(ctx context.Context, p records.Plan, i int, cold bool, u *plan.Usage) plan.Event {
	if p.Purpose == records.PlanEvacuateAll {
		return e.startEvacuation(ctx, p, i, u)
	}
	mv := p.Moves[i]
	fail := func(format string, args ...any) plan.Event {
		return plan.Event{Kind: plan.Refused, Reason: fmt.Sprintf(format, args...)}
	}
	inst, ev, ok := e.recheckMove(ctx, p, i)
	switch {
	case !ok:
		return ev
	case inst.VMState != records.VMActive || inst.TaskState != records.TaskNone:
		return fail("instance %s is %s (task %s): only an active instance with no task moves", mv.Instance, inst.VMState, orNone(inst.TaskState))
	}
	draining, err := drainingHosts(ctx, e.store)
	if err != nil {
		return e.lostOr(ctx, p, i, err)
	}
	avoid := e.avoidHosts(draining, u)
	if mv.Dest == "" && mv.Migration != 0 {
		// A retry: not onto the host the last attempt failed on (its
		// agent may be dead while its service still reads up), unless
		// keel's own restart ended that attempt.
		if last, err := e.store.GetMigration(ctx, mv.Migration); err == nil && last.DestHost != "" && !last.Interrupted &&
			(last.Status == records.MigrationFailed || last.Status == records.MigrationError) {
			avoid = append(avoid, last.DestHost)
		}
	}
	if mv.Dest != "" {
		if slices.Contains(draining, mv.Dest) {
			return skipMove("destination %s is being drained", mv.Dest)
		}
		req, err := e.place.request(ctx, inst)
		if err != nil {
			return e.lostOr(ctx, p, i, err)
		}
		ok, filter, err := e.sched.Passes(ctx, req, mv.Dest)
		if err != nil {
			return e.lostOr(ctx, p, i, err)
		}
		if !ok {
			return skipMove("destination %s no longer passes the scheduler's filters (%s)", mv.Dest, filter)
		}
	}
	o := moveOpts{ref: &records.MoveRef{Plan: p.ID, Move: i}, avoid: avoid}
	var m records.Migration
	if cold {
		m, err = e.moves.startColdMove(ctx, inst.UUID, mv.Dest, nil, o)
	} else {
		m, err = e.moves.liveMigrate(ctx, inst.UUID, mv.Dest, o)
	}
	var invalid *InvalidStateError
	var bad *BadRequestError
	switch {
	case errors.As(err, &invalid):
		return fail("%s", invalid.Msg)
	case errors.As(err, &bad):
		return fail("%s", bad.Msg)
	case err != nil:
		return e.lostOr(ctx, p, i, err)
	}
	if u != nil {
		u.Add(m.SourceHost, m.DestHost)
	}
	e.log.Info("plan move started", "plan", p.ID, "move", i, "instance", inst.UUID, "source", mv.Source,
		"dest", m.DestHost, "migration", m.ID, "cold", cold, "status", m.Status)
	return plan.Event{Kind: plan.Started, Migration: m.ID}
}

// inMigration reports whether inst has an active migration.
func inMigration(ctx context.Context, st store.Migrations, inst string) (bool, error) {
	ms, err := st.ListMigrations(ctx, store.MigrationFilter{InstanceUUID: inst, ActiveOnly: true})
	if err != nil {
		return false, fmt.Errorf("listing the migrations of %s: %w", inst, err)
	}
	return len(ms) > 0, nil
}

// lostOr answers a start that failed before or while creating the
// migration: Started if the migration exists after all, else Lost (the
// move is pending again and the next tick retries it).
func (e *planEffects) lostOr(ctx context.Context, p records.Plan, i int, cause error) plan.Event {
	e.log.Warn("starting a plan move", "plan", p.ID, "move", i, "err", cause)
	if m, found, err := e.moveMigration(ctx, p, i); err == nil && found {
		return plan.Event{Kind: plan.Started, Migration: m.ID}
	}
	return plan.Event{Kind: plan.Lost}
}

// drainingHosts are the hosts of every active drain plan (none is a
// destination of any move).
func drainingHosts(ctx context.Context, st store.Plans) ([]string, error) {
	plans, err := st.ListPlans(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("listing draining hosts: %w", err)
	}
	var out []string
	for _, p := range plans {
		if p.Purpose == records.PlanDrain && p.State != records.PlanRecommended {
			out = append(out, p.Hosts...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// avoidHosts are the hosts no plan move may choose: the draining ones,
// and those at their incoming cap.
func (e *planEffects) avoidHosts(draining []string, u *plan.Usage) []string {
	avoid := slices.Clone(draining)
	if u != nil {
		for h, n := range u.ByDest {
			if e.cfg.MaxConcurrentIncomingLiveMigrations > 0 && n >= e.cfg.MaxConcurrentIncomingLiveMigrations {
				avoid = append(avoid, h)
			}
		}
	}
	slices.Sort(avoid)
	return slices.Compact(avoid)
}

// skipMove refuses a move that no longer applies (it is skipped, the plan
// goes on).
func skipMove(format string, args ...any) plan.Event {
	return plan.Event{Kind: plan.Refused, Skip: true, Reason: fmt.Sprintf(format, args...)}
}

// recheckMove re-reads move i's instance just before it starts, as
// every kind of move does: gone, or no longer on the planned source, the
// move is skipped; moved by another migration (one that started before
// the plan: it may be arriving on a host being drained), it waits for it
// to end; with a move's task and no migration (one starting this instant,
// or left by a server that died before recording it, which the sweep
// clears: lifecycle.MoveLost), it waits too. ok is false with the event
// to answer when the move does not start now.
func (e *planEffects) recheckMove(ctx context.Context, p records.Plan, i int) (inst records.Instance, ev plan.Event, ok bool) {
	mv := p.Moves[i]
	inst, err := e.store.GetInstance(ctx, mv.Instance)
	switch {
	case isNotFound(err):
		return inst, skipMove("instance %s is gone", mv.Instance), false
	case err != nil:
		return inst, e.lostOr(ctx, p, i, fmt.Errorf("reading instance %s: %w", mv.Instance, err)), false
	}
	if inst.TaskState != records.TaskNone {
		moving, err := inMigration(ctx, e.store, inst.UUID)
		switch {
		case err != nil:
			return inst, e.lostOr(ctx, p, i, err), false
		case moving:
			return inst, plan.Event{Kind: plan.Deferred, Reason: fmt.Sprintf("instance %s is being moved by another migration; waiting for it", mv.Instance)}, false
		case records.MoveTask(inst.TaskState):
			return inst, plan.Event{Kind: plan.Deferred, Reason: fmt.Sprintf("instance %s has task %s and no migration; waiting for it to start or be cleared", mv.Instance, inst.TaskState)}, false
		}
	}
	switch {
	case inst.Host != mv.Source:
		return inst, skipMove("instance %s is on %s, not on %s as planned", mv.Instance, inst.Host, mv.Source), false
	}
	return inst, plan.Event{}, true
}

// startEvacuation re-checks move i of an evacuate-all plan — the instance
// still on the planned source, which is still down — and starts its
// evacuation (never onto a draining host).
func (e *planEffects) startEvacuation(ctx context.Context, p records.Plan, i int, u *plan.Usage) plan.Event {
	mv := p.Moves[i]
	inst, ev, ok := e.recheckMove(ctx, p, i)
	switch {
	case !ok:
		return ev
	case inst.VMState == records.VMDeleted || inst.TaskState == records.TaskDeleting:
		return skipMove("instance %s is being deleted", mv.Instance)
	}
	down, err := e.moves.serviceDown(ctx, mv.Source)
	if err != nil {
		return e.lostOr(ctx, p, i, err)
	}
	if !down {
		return skipMove("%s is up again: instance %s stays on it", mv.Source, mv.Instance)
	}
	draining, err := drainingHosts(ctx, e.store)
	if err != nil {
		return e.lostOr(ctx, p, i, err)
	}
	if mv.Dest != "" && slices.Contains(draining, mv.Dest) {
		return skipMove("destination %s is being drained", mv.Dest)
	}
	m, err := e.moves.evacuate(ctx, inst.UUID, mv.Dest, moveOpts{ref: &records.MoveRef{Plan: p.ID, Move: i}, avoid: e.avoidHosts(draining, u)})
	var invalid *InvalidStateError
	var bad *BadRequestError
	switch {
	case errors.As(err, &invalid):
		return plan.Event{Kind: plan.Refused, Reason: invalid.Msg}
	case errors.As(err, &bad):
		return plan.Event{Kind: plan.Refused, Reason: bad.Msg}
	case err != nil:
		return e.lostOr(ctx, p, i, err)
	}
	if u != nil {
		u.Add(m.SourceHost, m.DestHost)
	}
	e.log.Info("plan evacuation started", "plan", p.ID, "move", i, "instance", inst.UUID, "source", mv.Source,
		"dest", m.DestHost, "migration", m.ID, "status", m.Status)
	return plan.Event{Kind: plan.Started, Migration: m.ID}
}
