package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"time"

	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/sim/scenario"
	"keel/internal/store"
)

// Options tune a run.
type Options struct {
	// Policies to run; empty means the scenario's list.
	Policies []string
	// Samples is how many RAM samples per host the timeline keeps (0: no
	// timeline; the SVG chart needs one).
	Samples int
	// Progress, if not nil, receives a line now and then during long runs.
	Progress io.Writer
	// Parallel runs the policies concurrently (each is independent and
	// deterministic on its own).
	Parallel bool
	// Rebalance, when set, plans and runs a rebalance once the drains are
	// done (rebalance.go).
	Rebalance *RebalanceOptions
}

// Report is the result of a scenario run, one entry per policy.
type Report struct {
	Scenario string         `json:"scenario"`
	Seed     int64          `json:"seed"`
	Hosts    int            `json:"hosts"`
	Duration float64        `json:"duration_s"`
	Policies []PolicyReport `json:"policies"`
}

// PolicyReport is one policy's outcome.
type PolicyReport struct {
	Policy               string         `json:"policy"`
	Migrations           int            `json:"migrations"`
	FailedMigrations     int            `json:"failed_migrations"`
	Destinations         map[string]int `json:"destinations"`
	InitiallyBest        []string       `json:"initially_best"`
	ShareToInitiallyBest float64        `json:"share_to_initially_best"`
	StaleDecisions       int            `json:"stale_decisions"`
	Final                Final          `json:"final"`

	Decisions       int            `json:"decisions"`
	Conflicts       int            `json:"claim_conflicts"`
	NoValidHost     int            `json:"no_valid_host"`
	Boots           int            `json:"boots"`
	FailedBoots     int            `json:"failed_boots"`
	Deletes         int            `json:"deletes"`
	MigrationErrors map[string]int `json:"migration_errors,omitempty"`
	Audits          int            `json:"audits"`
	AuditsWithDrift int            `json:"audits_with_drift"`
	DriftFound      int            `json:"drift_found"`
	WallSeconds     float64        `json:"wall_seconds"`
	// Inconsistencies lists allocations that do not match the instances
	// at the end (leaks, double counts, hosts over capacity); empty when
	// the run kept placement exact.
	Inconsistencies []string `json:"inconsistencies,omitempty"`

	// Rebalance is what the rebalance did, when the run had one.
	Rebalance *RebalanceReport `json:"rebalance,omitempty"`

	// Timeline is each host's RAM in use over time (when sampled).
	Timeline *Timeline `json:"-"`
}

// Timeline holds RAM samples for the chart.
type Timeline struct {
	Hosts      []string
	CapacityMB []int64
	Times      []float64
	UsedMB     [][]int64 // [sample][host]
	Audits     []float64
}

// Run runs a scenario once per policy.
func Run(ctx context.Context, sc *scenario.Scenario, opts Options) (*Report, error) {
	policies := opts.Policies
	if len(policies) == 0 {
		policies = sc.Policies
	}
	rep := &Report{Scenario: sc.Name, Seed: sc.Seed, Hosts: len(sc.Hosts()), Duration: sc.Duration, Policies: make([]PolicyReport, len(policies))}
	errs := make([]error, len(policies))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	for i, name := range policies {
		p, err := scheduler.ParsePolicy(name)
		if err != nil {
			return nil, err
		}
		run := func() {
			rep.Policies[i], errs[i] = runPolicy(ctx, sc, p, opts)
		}
		if !opts.Parallel {
			run()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			run()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", policies[i], err)
		}
	}
	return rep, nil
}

func runPolicy(ctx context.Context, sc *scenario.Scenario, policy scheduler.Policy, opts Options) (PolicyReport, error) {
	start := time.Now()
	w, err := build(ctx, sc, policy)
	if err != nil {
		return PolicyReport{}, err
	}
	end := w.clock.Now().Add(secs(sc.Duration))
	// initially_best is taken before anything runs, so every policy
	// measures against the same hosts (those of the file's initial state:
	// hosts disabled from the start are not "best"; events, drains and
	// workloads at t=0 are not yet seen).
	if err := w.startMetrics(ctx); err != nil {
		return PolicyReport{}, err
	}
	best, err := w.initiallyBest(ctx)
	if err != nil {
		return PolicyReport{}, err
	}
	w.scheduleHeartbeats(ctx)
	w.scheduleAudits(ctx)
	w.scheduleEvents(ctx)
	w.scheduleDrains(ctx)
	w.scheduleRebalance(ctx, opts.Rebalance)
	w.scheduleWorkloads(ctx, end)
	var tl *Timeline
	if opts.Samples > 0 {
		tl = w.scheduleSamples(ctx, opts.Samples)
	}

	lastReport := time.Now()
	for w.clock.Step(end) {
		if ctx.Err() != nil {
			return PolicyReport{}, ctx.Err()
		}
		if opts.Progress != nil && time.Since(lastReport) > 2*time.Second {
			lastReport = time.Now()
			t := w.clock.Now().Sub(clockEpoch).Seconds()
			fmt.Fprintf(opts.Progress, "sim %s: policy %s at t=%.0fs of %.0fs (%.0f%%), %d decisions\n",
				sc.Name, policy, t, sc.Duration, 100*t/sc.Duration, w.stats.decisions)
		}
	}
	w.clock.RunUntil(end)

	fin, err := w.final(ctx)
	if err != nil {
		return PolicyReport{}, err
	}
	problems, err := w.checkConsistency(ctx)
	if err != nil {
		return PolicyReport{}, err
	}
	st := w.stats
	rep := PolicyReport{
		Policy: string(policy), Migrations: st.migrations, FailedMigrations: st.failedMigrations,
		Destinations: st.destinations, InitiallyBest: best, StaleDecisions: st.staleDecisions, Final: fin,
		Decisions: st.decisions, Conflicts: st.conflicts, NoValidHost: st.noValidHost,
		Boots: st.boots, FailedBoots: st.failedBoots, Deletes: st.deletes, MigrationErrors: st.migrationErrors,
		Audits: st.audits, AuditsWithDrift: st.auditsWithDrift, DriftFound: st.driftFound,
		Timeline: tl, Inconsistencies: problems,
	}
	if w.rebalance != nil {
		rep.Rebalance = w.rebalance.report
		if rep.Rebalance == nil {
			rep.Rebalance = &RebalanceReport{Stopped: "not planned: a drain did not end before the run did"}
		}
	}
	completed, toBest := 0, 0
	for h, n := range st.destinations {
		completed += n
		for _, b := range best {
			if b == h {
				toBest += n
			}
		}
	}
	if completed > 0 {
		rep.ShareToInitiallyBest = float64(toBest) / float64(completed)
	}
	rep.WallSeconds = time.Since(start).Seconds()
	return rep, nil
}

// scheduleAudits starts every host's periodic audit: audits run at
// audit_phase + k × update_resources_interval (the last one ran at t=0).
func (w *world) scheduleAudits(ctx context.Context) {
	interval := w.sc.Compute.UpdateResourcesInterval
	if interval < 0 {
		return
	}
	if interval == 0 {
		interval = scenario.DefaultUpdateResourcesInterval
	}
	for _, h := range w.hosts {
		first := secs(h.AuditPhase)
		if first <= 0 {
			first = secs(float64(interval))
		}
		w.agents[h.Name].StartPeriodicAudit(ctx, secs(float64(interval)), first, func(d compute.Drift) {
			w.stats.audits++
			if n := d.Count(); n > 0 {
				w.stats.auditsWithDrift++
				w.stats.driftFound += n
			}
		})
	}
}

func (w *world) setDisabled(ctx context.Context, host string, disabled bool) {
	svc, err := w.store.GetService(ctx, host)
	if err != nil {
		return
	}
	svc.Disabled = disabled
	if disabled {
		svc.DisabledReason = "disabled by scenario"
	}
	_ = w.store.PutService(ctx, svc)
	w.disabled[host] = disabled
}

func (w *world) at(t float64, f func()) {
	w.clock.AfterFunc(secs(t), f)
}

func (w *world) scheduleEvents(ctx context.Context) {
	for _, ev := range w.sc.Events {
		ev := ev
		w.at(ev.At, func() {
			for _, h := range ev.Disable {
				w.setDisabled(ctx, h, true)
			}
			for _, h := range ev.Enable {
				w.setDisabled(ctx, h, false)
			}
			for _, h := range ev.StopHeartbeats {
				w.beats.stop(ctx, h)
			}
			for _, h := range ev.StartHeartbeats {
				w.beats.start(ctx, h)
			}
		})
	}
}

// drain is one running drain.
type drain struct {
	spec     scenario.Drain
	queue    []string // instance UUIDs still to move
	inFlight int
	loaded   bool
	// started: its start time has come (its queue is loaded).
	started bool
	// targets are the destinations of a rebalance's moves (none: the
	// scheduler chooses).
	targets map[string]string
}

// migrationEnded lets drains start their next migration when a slot frees.
func (w *world) migrationEnded(m records.Migration) {
	w.rebalanceEnded(m)
	for _, d := range w.drains {
		if d.owns[m.ID] {
			delete(d.owns, m.ID)
			d.d.inFlight--
			if d.d.spec.Interval == 0 {
				w.clock.AfterFunc(0, func() { w.drainNext(context.Background(), d) })
			}
		}
	}
	if m.Status == records.MigrationCompleted || records.MigrationTerminal(m.Status) {
		if inst, err := w.store.GetInstance(context.Background(), m.InstanceUUID); err == nil && inst.VMState == records.VMActive {
			w.active.add(inst.UUID)
		}
	}
	if w.rebalance != nil && !w.rebalance.planned {
		w.clock.AfterFunc(0, func() { w.rebalanceWhenDrained(context.Background()) })
	}
}

type drainRun struct {
	d    *drain
	owns map[int64]bool
}

func (w *world) scheduleDrains(ctx context.Context) {
	for _, spec := range w.sc.Drains {
		dr := &drainRun{d: &drain{spec: spec}, owns: map[int64]bool{}}
		w.drains = append(w.drains, dr)
		w.at(spec.Start, func() {
			if spec.Disable == nil || *spec.Disable {
				for _, h := range spec.Hosts {
					w.setDisabled(ctx, h, true)
				}
			}
			dr.d.started = true
			var moves []records.PlanMove
			for _, h := range spec.Hosts {
				insts, _ := w.store.ListInstances(ctx, h) // creation order: UUIDs are a counter
				for _, in := range insts {
					if in.VMState == records.VMActive {
						moves = append(moves, records.PlanMove{Instance: in.UUID, RAMMB: in.Flavor.RAMMB})
					}
				}
			}
			// The order keel's plans use (validated with the scenario).
			if spec.Order != "" {
				_ = plan.Order(moves, spec.Order)
			}
			for _, mv := range moves {
				dr.d.queue = append(dr.d.queue, mv.Instance)
			}
			if spec.Interval > 0 {
				var tick func()
				tick = func() {
					w.drainNext(ctx, dr)
					if len(dr.d.queue) > 0 {
						w.clock.AfterFunc(secs(spec.Interval), tick)
					}
				}
				tick()
				return
			}
			w.drainNext(ctx, dr) // starts up to in_flight migrations
		})
	}
}

// drainNext starts the next migration of a drain if a slot is free. A
// paced drain (interval > 0) starts one a tick, and a migration that fails
// at once (refused, or no valid host) is that tick's: the next instance
// waits for the next tick, when a host may have come back. Instances
// deleted, busy or moved meanwhile are skipped without using the tick.
func (w *world) drainNext(ctx context.Context, dr *drainRun) {
	paced := dr.d.spec.Interval > 0
	for len(dr.d.queue) > 0 && dr.d.inFlight < max(dr.d.spec.InFlight, 1) {
		u := dr.d.queue[0]
		dr.d.queue = dr.d.queue[1:]
		inst, err := w.store.GetInstance(ctx, u)
		if err != nil || inst.VMState != records.VMActive || inst.TaskState != records.TaskNone || !w.rebalanceMove(dr, inst) {
			continue // deleted, busy or moved meanwhile: skip it
		}
		dr.d.inFlight++
		w.stats.migrations++
		w.active.remove(u)
		m, err := w.cond.LiveMigrate(ctx, u, dr.d.targets[u])
		switch {
		case err != nil:
			dr.d.inFlight--
			w.active.add(u)
			w.stats.failedMigrations++
		case records.MigrationTerminal(m.Status):
			// Ended at once (no valid host): MigrationDone already ran
			// before we could own it.
			dr.d.inFlight--
		default:
			dr.owns[m.ID] = true
		}
		if paced {
			return
		}
	}
}

// scheduleWorkloads fires boots, deletes and random migrations at their
// rates.
func (w *world) scheduleWorkloads(ctx context.Context, end time.Time) {
	for _, wl := range w.sc.Workloads {
		wl := wl
		stop := clockEpoch.Add(secs(wl.End))
		if wl.End <= 0 || stop.After(end) {
			stop = end
		}
		var names []string
		var weights []float64
		for _, f := range w.sc.Flavors {
			if wt := wl.Flavors[f.Name]; wt > 0 {
				names = append(names, f.Name)
				weights = append(weights, wt)
			}
		}
		// next is the time to the next operation, in seconds: compared
		// with the time left before it becomes a Duration, so a long gap
		// (a low rate, a Poisson draw) ends the stream instead of wrapping.
		next := func() float64 {
			if wl.Poisson {
				return w.rnd.ExpFloat64() / wl.Rate
			}
			return 1 / wl.Rate
		}
		var fire func()
		fire = func() {
			switch wl.Kind {
			case scenario.KindBoot:
				w.boot(ctx, pickWeighted(w.rnd, names, weights))
			case scenario.KindDelete:
				w.deleteRandom(ctx)
			case scenario.KindMigrate:
				w.migrateRandom(ctx)
			}
			if d := next(); d <= stop.Sub(w.clock.Now()).Seconds() {
				w.clock.AfterFunc(secs(d), fire)
			}
		}
		w.at(wl.Start, fire)
	}
}

func pickWeighted(r *rand.Rand, names []string, weights []float64) string {
	var total float64
	for _, x := range weights {
		total += x
	}
	x := r.Float64() * total
	for i, wt := range weights {
		if x < wt {
			return names[i]
		}
		x -= wt
	}
	return names[len(names)-1]
}

func (w *world) boot(ctx context.Context, flavor string) {
	w.stats.boots++
	f := w.flavors[flavor]
	_, _ = w.cond.Boot(ctx, records.Instance{UUID: w.id(), Name: "boot-" + flavor, Flavor: f, Zone: ""})
}

// pickActive returns a random ACTIVE instance with no task, trying a few
// times.
func (w *world) pickActive(ctx context.Context) (records.Instance, bool) {
	for i := 0; i < 8; i++ {
		u, ok := w.active.pick(w.rnd)
		if !ok {
			return records.Instance{}, false
		}
		inst, err := w.store.GetInstance(ctx, u)
		if err != nil {
			w.active.remove(u)
			continue
		}
		if inst.VMState == records.VMActive && inst.TaskState == records.TaskNone {
			return inst, true
		}
	}
	return records.Instance{}, false
}

func (w *world) deleteRandom(ctx context.Context) {
	inst, ok := w.pickActive(ctx)
	if !ok {
		return
	}
	if err := w.cond.Delete(ctx, inst.UUID); err == nil {
		w.stats.deletes++
		w.active.remove(inst.UUID)
	}
}

func (w *world) migrateRandom(ctx context.Context) {
	inst, ok := w.pickActive(ctx)
	if !ok {
		return
	}
	w.stats.migrations++
	w.active.remove(inst.UUID)
	if _, err := w.cond.LiveMigrate(ctx, inst.UUID, ""); err != nil {
		w.stats.failedMigrations++
		w.active.add(inst.UUID)
	}
}

// scheduleSamples records every host's RAM in use n+1 times over the run.
func (w *world) scheduleSamples(ctx context.Context, n int) *Timeline {
	tl := &Timeline{}
	sums, _ := w.store.ProviderSummaries(ctx, nil)
	for _, h := range store.HostTrees(sums) {
		tl.Hosts = append(tl.Hosts, h.Root.Name)
		tl.CapacityMB = append(tl.CapacityMB, h.Capacity[placement.MemoryMB])
	}
	step := w.sc.Duration / float64(n)
	for i := 0; i <= n; i++ {
		t := math.Min(float64(i)*step, w.sc.Duration)
		w.at(t, func() {
			sums, _ := w.store.ProviderSummaries(ctx, nil)
			trees := store.HostTrees(sums)
			row := make([]int64, len(trees))
			for j, h := range trees {
				row[j] = h.Used[placement.MemoryMB]
			}
			tl.Times = append(tl.Times, t)
			tl.UsedMB = append(tl.UsedMB, row)
		})
	}
	interval := w.sc.Compute.UpdateResourcesInterval
	if interval > 0 {
		phases := map[float64]bool{}
		for _, h := range w.hosts {
			phases[h.AuditPhase] = true
		}
		if len(phases) <= 4 {
			for p := range phases {
				for t := p; t <= w.sc.Duration; t += float64(interval) {
					if t > 0 {
						tl.Audits = append(tl.Audits, t)
					}
				}
			}
			sort.Float64s(tl.Audits)
		}
	}
	return tl
}
