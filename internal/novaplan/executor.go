// Package novaplan plans and runs keel's move plans (drains) on an
// OpenStack Nova cloud through Nova's own API. The plans are keel's
// records.Plan in a local store; they run on the same pure machine as
// keel's conductor (package plan: Step, Select under the caps,
// Summarise). What differs is the performer: a move's destination is
// chosen by keel's scheduler (Nova's filters and weighers as the cloud's
// nova.conf sets them) on a view of Placement — exact — plus keel's own
// claims for the moves it started until Placement shows them, and the move
// is Nova's os-migrateLive to that host (force false: Nova's conductor
// still checks it), followed through its migration record.
package novaplan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"keel/internal/client"
	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// Store is where the plans live (keel's SQLite store under --data-dir).
type Store interface {
	CreatePlan(ctx context.Context, p records.Plan) (records.Plan, error)
	GetPlan(ctx context.Context, id int64) (records.Plan, error)
	UpdatePlan(ctx context.Context, p records.Plan) (records.Plan, error)
	ListPlans(ctx context.Context, activeOnly bool) ([]records.Plan, error)
}

// machine is the plan machine: a move's live migration is tried up to
// three times (each on a host chosen again, never one it failed on).
var machine = plan.Machine{MaxAttempts: 3}

// maxRefusals is how many destinations one start tries when Nova refuses
// the request (its conductor's checks) before the move counts as failed.
const maxRefusals = 3

// Executor runs the plans of one data dir on one Nova cloud.
type Executor struct {
	Client  *client.Client
	Store   Store
	Sched   scheduler.Config
	Caps    plan.Caps
	DataDir string
	Log     *slog.Logger
	// Hosts are the hosts' provider UUIDs when the plans were made: a
	// host whose provider changed means the plan is for another cloud.
	Hosts map[string]string

	mu      sync.Mutex
	resumed bool
	claims  map[string]claim    // server UUID → claim
	avoid   map[string][]string // "plan/move" → hosts a move failed on
	figs    map[int64]*Figures
	rnd     *rand.Rand
}

// claim is a destination keel chose for a move it started, counted in the
// view until Placement shows the server there.
type claim struct {
	host, provider string
	res            placement.Resources
}

// Figures are a plan's measurements, kept next to the store.
type Figures struct {
	Moves map[int]*MoveFigures `json:"moves"`
}

// MoveFigures are one move's measurements: the wall time through Nova's
// API (os-migrateLive until its migration completed, as polled), keel's
// own time for it (decisions and bookkeeping, Nova's calls excluded), and
// the starts Nova refused.
type MoveFigures struct {
	NovaSeconds float64 `json:"nova_seconds"`
	// KeelMS is DecisionMS (the scheduler's choice on the view) plus
	// BookkeepingMS (the plan machine's steps and the store's writes).
	KeelMS        float64 `json:"keel_ms"`
	DecisionMS    float64 `json:"decision_ms"`
	BookkeepingMS float64 `json:"bookkeeping_ms"`
	Refused       int     `json:"refused"`
	Dest          string  `json:"dest"`
}

func (f *MoveFigures) add(decision, book time.Duration) {
	f.DecisionMS += ms(decision)
	f.BookkeepingMS += ms(book)
	f.KeelMS = f.DecisionMS + f.BookkeepingMS
}

func (e *Executor) init() {
	if e.claims == nil {
		e.claims, e.avoid, e.figs = map[string]claim{}, map[string][]string{}, map[int64]*Figures{}
		e.rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
}

// FiguresPath is where a plan's figures are kept.
func FiguresPath(dataDir string, id int64) string {
	return filepath.Join(dataDir, fmt.Sprintf("plan-%d-figures.json", id))
}

// LoadFigures reads a plan's figures (empty when none were written).
func LoadFigures(dataDir string, id int64) Figures {
	f := Figures{Moves: map[int]*MoveFigures{}}
	if b, err := os.ReadFile(FiguresPath(dataDir, id)); err == nil {
		_ = json.Unmarshal(b, &f)
	}
	if f.Moves == nil {
		f.Moves = map[int]*MoveFigures{}
	}
	return f
}

func (e *Executor) fig(id int64, move int) *MoveFigures {
	f, ok := e.figs[id]
	if !ok {
		l := LoadFigures(e.DataDir, id)
		f = &l
		e.figs[id] = f
	}
	m, ok := f.Moves[move]
	if !ok {
		m = &MoveFigures{}
		f.Moves[move] = m
	}
	return m
}

func (e *Executor) saveFigures(id int64) {
	f, ok := e.figs[id]
	if !ok || e.DataDir == "" {
		return
	}
	b, _ := json.Marshal(f)
	tmp := FiguresPath(e.DataDir, id) + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, FiguresPath(e.DataDir, id))
	}
}

// Tick does one round: it takes approved plans, resumes running ones
// after a (re)start, feeds the ends of the running moves' migrations to
// their plans, and starts the moves Select chooses under the caps. It
// reports whether any plan is still active.
func (e *Executor) Tick(ctx context.Context) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.init()
	plans, err := e.Store.ListPlans(ctx, true)
	if err != nil {
		return false, fmt.Errorf("listing plans: %w", err)
	}
	atStart := !e.resumed
	e.resumed = true
	var running []records.Plan
	active := false
	for _, p := range plans {
		switch {
		case p.State == records.PlanApproved:
			if p, err = e.step(ctx, p.ID, plan.Event{Kind: plan.Run}); err != nil {
				return true, err
			}
		case p.State == records.PlanRunning && atStart:
			e.Log.Info("resuming plan", "plan", p.ID)
			if p, err = e.step(ctx, p.ID, plan.Event{Kind: plan.Resume}); err != nil {
				return true, err
			}
		}
		if p.State != records.PlanRunning {
			active = active || p.State == records.PlanApproved || p.State == records.PlanRecommended
			continue
		}
		if p, err = e.poll(ctx, p); err != nil {
			e.Log.Warn("following a plan's moves", "plan", p.ID, "err", err)
		}
		if p.State == records.PlanRunning {
			running = append(running, p)
			active = true
		}
	}
	if len(running) == 0 {
		return active, nil
	}
	var u plan.Usage
	for _, p := range running {
		for _, mv := range p.Moves {
			if mv.State == records.MoveStarting || mv.State == records.MoveRunning {
				u.Add(mv.Source, e.claimHost(mv.Instance))
			}
		}
	}
	for _, pk := range plan.Select(running, &u, e.Caps) {
		if _, err := e.step(ctx, pk.Plan, plan.Event{Kind: plan.Begin, Move: pk.Move}); err != nil {
			e.Log.Warn("starting a move", "plan", pk.Plan, "move", pk.Move, "err", err)
		}
	}
	return true, nil
}

func (e *Executor) claimHost(server string) string { return e.claims[server].host }

// step feeds ev to plan id, saves it, and performs the actions, feeding
// their answers back until none is left.
func (e *Executor) step(ctx context.Context, id int64, ev plan.Event) (records.Plan, error) {
	queue := []plan.Event{ev}
	var p records.Plan
	for len(queue) > 0 {
		ev, queue = queue[0], queue[1:]
		t0 := time.Now()
		cur, err := e.Store.GetPlan(ctx, id)
		if err != nil {
			return p, err
		}
		ev.Now = time.Now().UTC()
		next, acts, err := machine.Step(cur, ev)
		if err != nil {
			return cur, err
		}
		next.UpdatedAt = ev.Now
		if p, err = e.Store.UpdatePlan(ctx, next); err != nil {
			return cur, fmt.Errorf("plan %d: saving %s: %w", id, ev.Kind, err)
		}
		if ev.Kind != plan.Run && ev.Kind != plan.Resume && ev.Kind != plan.Cancel {
			e.fig(id, ev.Move).add(0, time.Since(t0))
		}
		for _, a := range acts {
			if ans, ok := e.perform(ctx, p, a); ok {
				queue = append(queue, ans)
			}
		}
	}
	e.saveFigures(id)
	return p, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func key(p records.Plan, i int) string { return fmt.Sprintf("%d/%d", p.ID, i) }

func (e *Executor) perform(ctx context.Context, p records.Plan, a plan.Action) (plan.Event, bool) {
	switch a.Kind {
	case plan.StartMove:
		ev := e.start(ctx, p, a.Move)
		ev.Move = a.Move
		return ev, true
	case plan.FindMigration:
		m, found, err := e.findMigration(ctx, p, a.Move)
		switch {
		case err != nil:
			e.Log.Warn("looking for a move's migration; left starting", "plan", p.ID, "move", a.Move, "err", err)
			return plan.Event{}, false
		case found:
			return plan.Event{Kind: plan.Started, Move: a.Move, Migration: m.ID}, true
		}
		return plan.Event{Kind: plan.Lost, Move: a.Move}, true
	case plan.AbortMove:
		if err := e.Client.AbortMigration(ctx, p.Moves[a.Move].Instance, a.Migration); err != nil {
			e.Log.Warn("aborting a move", "plan", p.ID, "move", a.Move, "err", err)
		}
	case plan.Finished:
		s := plan.Summarise(p, time.Now())
		e.Log.Info("plan ended", "plan", p.ID, "state", p.State, "done", s.Done, "failed", s.Failed, "skipped", s.Skipped)
	}
	return plan.Event{}, false
}

// findMigration finds the Nova migration a starting move created before
// a restart: the server's live migration created at or after the move
// started, newer than its last one.
func (e *Executor) findMigration(ctx context.Context, p records.Plan, i int) (client.Migration, bool, error) {
	mv := p.Moves[i]
	list, err := e.Client.Migrations(ctx, client.MigrationFilter{InstanceUUID: mv.Instance})
	if err != nil {
		return client.Migration{}, false, err
	}
	for _, m := range list { // newest first
		if m.ID > mv.Migration && !m.Created.Before(mv.StartedAt.Add(-2*time.Second)) {
			return m, true, nil
		}
	}
	return client.Migration{}, false, nil
}

// poll feeds the ends of p's running moves' migrations to p.
func (e *Executor) poll(ctx context.Context, p records.Plan) (records.Plan, error) {
	for i, mv := range p.Moves {
		if mv.State != records.MoveRunning {
			continue
		}
		list, err := e.Client.Migrations(ctx, client.MigrationFilter{InstanceUUID: mv.Instance})
		if err != nil {
			return p, err
		}
		var m client.Migration
		for _, x := range list {
			if x.ID == mv.Migration {
				m = x
			}
		}
		if m.ID == 0 || !client.Terminal(m.Status) {
			continue
		}
		host := m.Dest
		reason := ""
		if sv, err := e.Client.NovaServerNow(ctx, mv.Instance); err == nil {
			host = sv.Host
		}
		if !client.Succeeded(m.Status) {
			e.avoid[key(p, i)] = append(e.avoid[key(p, i)], m.Dest)
			reason = e.Client.FailureReason(ctx, mv.Instance)
			e.fig(p.ID, i).Refused++
		}
		delete(e.claims, mv.Instance)
		f := e.fig(p.ID, i)
		f.NovaSeconds = time.Since(mv.StartedAt).Seconds() - f.KeelMS/1000
		f.Dest = host
		next, err := e.step(ctx, p.ID, plan.Event{Kind: plan.Ended, Move: i, Migration: m.ID, Status: records.MigrationStatus(m.Status), Host: host, Reason: reason})
		if err != nil {
			return p, err
		}
		p = next
	}
	return p, nil
}

func skip(format string, args ...any) plan.Event {
	return plan.Event{Kind: plan.Refused, Skip: true, Reason: fmt.Sprintf(format, args...)}
}

// start re-checks move i of p and starts it: the server still ACTIVE on
// the planned source with the planned flavor, the source still the same
// host, a destination chosen by keel's scheduler on Placement's view plus
// keel's claims, and Nova's os-migrateLive to it; a destination Nova
// refuses is avoided and the next best tried.
func (e *Executor) start(ctx context.Context, p records.Plan, i int) plan.Event {
	mv := p.Moves[i]
	sv, err := e.Client.NovaServerNow(ctx, mv.Instance)
	switch {
	case errors.Is(err, client.ErrNotFound):
		return skip("server %s is gone", mv.Instance)
	case err != nil:
		e.Log.Warn("re-reading a server", "server", mv.Instance, "err", err)
		return plan.Event{Kind: plan.Lost}
	case sv.Host != mv.Source:
		return skip("server %s is on %s, not on %s as planned (moved by someone else)", mv.Instance, sv.Host, mv.Source)
	case sv.Flavor.RAMMB != mv.RAMMB:
		return skip("server %s was resized (%d MB, planned with %d MB)", mv.Instance, sv.Flavor.RAMMB, mv.RAMMB)
	case sv.TaskState != "":
		return plan.Event{Kind: plan.Deferred, Reason: fmt.Sprintf("server %s is busy (task %s); waiting", mv.Instance, sv.TaskState)}
	case sv.Status != "ACTIVE":
		return skip("server %s is %s: only an ACTIVE server is live-migrated", mv.Instance, sv.Status)
	}
	nc, _, err := e.Client.ReadNova(ctx)
	if err != nil {
		e.Log.Warn("reading the cloud", "err", err)
		return plan.Event{Kind: plan.Lost}
	}
	if want, ok := e.Hosts[mv.Source]; ok {
		if h, ok := nc.Host(mv.Source); !ok || h.ProviderUUID != want {
			return plan.Event{Kind: plan.Refused, Reason: fmt.Sprintf("host %s is not the one planned (provider %s): the cloud's hosts changed since the plan was made; cancel it and plan again", mv.Source, want)}
		}
	}
	ignore := append([]string{mv.Source}, e.avoid[key(p, i)]...)
	plans, err := e.Store.ListPlans(ctx, true)
	if err == nil {
		for _, o := range plans {
			if o.Purpose == records.PlanDrain && o.State != records.PlanRecommended {
				ignore = append(ignore, o.Hosts...)
			}
		}
	}
	f := e.fig(p.ID, i)
	for try := 0; try < maxRefusals; try++ {
		t0 := time.Now()
		dest, err := e.choose(ctx, &nc, sv, ignore)
		f.add(time.Since(t0), 0)
		if err != nil {
			return plan.Event{Kind: plan.Refused, Reason: err.Error()}
		}
		begin := time.Now()
		w, err := e.Client.LiveMigrate(ctx, sv.UUID, dest.Name)
		if err != nil {
			var ae *client.APIError
			if errors.As(err, &ae) && (ae.Status == 400 || ae.Status == 409) {
				e.Log.Info("Nova refused the destination; trying the next best", "server", sv.UUID, "dest", dest.Name, "err", err)
				f.Refused++
				ignore = append(ignore, dest.Name)
				continue
			}
			e.Log.Warn("starting a live migration", "server", sv.UUID, "err", err)
			if m, found, ferr := e.findMigration(ctx, p, i); ferr == nil && found {
				return plan.Event{Kind: plan.Started, Migration: m.ID}
			}
			return plan.Event{Kind: plan.Lost}
		}
		e.claims[sv.UUID] = claim{host: dest.Name, provider: dest.ProviderUUID, res: sv.Flavor.Resources()}
		// The migration record exists once the API answered; find it.
		for {
			m, found, err := w.Poll(ctx)
			if err == nil && found {
				e.Log.Info("move started", "plan", p.ID, "move", i, "server", sv.UUID, "source", mv.Source, "dest", dest.Name, "migration", m.ID,
					"api_ms", ms(time.Since(begin)))
				return plan.Event{Kind: plan.Started, Migration: m.ID}
			}
			if time.Since(begin) > 30*time.Second || ctx.Err() != nil {
				return plan.Event{Kind: plan.Lost}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return plan.Event{Kind: plan.Refused, Reason: fmt.Sprintf("Nova refused %d destinations for server %s", maxRefusals, sv.UUID)}
}

// choose picks the destination with keel's scheduler on Placement's view
// plus the claims of moves keel started that Placement does not show yet.
func (e *Executor) choose(ctx context.Context, nc *client.NovaCloud, sv client.NovaServer, ignore []string) (client.NovaHost, error) {
	extra := map[string]placement.Resources{}
	for srv, c := range e.claims {
		if _, shown := nc.Allocations[srv][c.provider]; shown {
			continue // Placement holds it now
		}
		if extra[c.host] == nil {
			extra[c.host] = placement.Resources{}
		}
		for rc, n := range c.res {
			extra[c.host][rc] += n
		}
	}
	src := &cloudSource{nc: nc, extra: extra, now: time.Now()}
	view, err := scheduler.NewView(ctx, src, scheduler.PolicyClaim)
	if err != nil {
		return client.NovaHost{}, fmt.Errorf("building the scheduler's view: %w", err)
	}
	s, err := scheduler.New(e.Sched, view, clock.Real{}, e.rnd)
	if err != nil {
		return client.NovaHost{}, err
	}
	slices.Sort(ignore)
	sel, err := s.Select(ctx, request(nc, sv, slices.Compact(ignore)), func(_ context.Context, c scheduler.Candidate) (int64, error) {
		return c.Generation + 1, nil
	})
	if err != nil {
		return client.NovaHost{}, fmt.Errorf("no destination for server %s: %w", sv.UUID, err)
	}
	h, ok := nc.Host(sel.Host)
	if !ok {
		return client.NovaHost{}, fmt.Errorf("the scheduler chose %s, which the cloud does not have", sel.Host)
	}
	return *h, nil
}
