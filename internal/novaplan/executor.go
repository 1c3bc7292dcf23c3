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

	// ReadParallel bounds the concurrent reads of one start (one per
	// host's provider, the services, the server); 0 means 8.
	ReadParallel int

	// mu guards the plans' steps, the claims, the figures and the
	// scheduler's random source: the choice of a destination and its
	// claim happen under it, so each start sees the claims of the ones
	// before it. Reads and Nova's calls happen outside it.
	mu      sync.Mutex
	resumed bool
	claims  map[string]claim    // server UUID → claim
	avoid   map[string][]string // "plan/move" → hosts a move failed on
	figs    map[int64]*Figures
	rnd     *rand.Rand
	posted  map[string]time.Time // server UUID → when its os-migrateLive was sent
	starts  sync.WaitGroup       // the starts in flight

	// cloudMu guards cloud: the first start's full read (ReadNova,
	// version checks included); later starts refresh only what moves
	// change (RefreshNova).
	cloudMu sync.Mutex
	cloud   *client.NovaCloud
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
// API (from its os-migrateLive request until its migration was seen
// completed), keel's own time for it (decisions and bookkeeping, Nova's
// calls excluded), keel's reads before the request, and the starts Nova
// refused.
type MoveFigures struct {
	NovaSeconds float64 `json:"nova_seconds"`
	// ReadsMS is the wall time of keel's reads before the move's
	// os-migrateLive: the server and the hosts' allocations and services
	// (Nova's and Placement's APIs, in parallel), in neither NovaSeconds
	// nor KeelMS.
	ReadsMS float64 `json:"reads_ms"`
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
		e.claims, e.avoid, e.figs, e.posted = map[string]claim{}, map[string][]string{}, map[int64]*Figures{}, map[string]time.Time{}
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
// their plans (one os-migrations read per source host), and launches the
// moves Select chooses under the caps, each start in its own goroutine.
// It reports whether any plan is still active.
func (e *Executor) Tick(ctx context.Context) (bool, error) {
	e.mu.Lock()
	e.init()
	sources, anyRunning, active, err := e.advance(ctx)
	e.mu.Unlock()
	if err != nil || !anyRunning {
		return active, err
	}
	migs, seen := e.readMigrations(ctx, sources)
	e.mu.Lock()
	defer e.mu.Unlock()
	plans, err := e.Store.ListPlans(ctx, true)
	if err != nil {
		return true, fmt.Errorf("listing plans: %w", err)
	}
	var running []records.Plan
	for _, p := range plans {
		if p.State != records.PlanRunning {
			continue
		}
		if p, err = e.ended(ctx, p, migs, seen); err != nil {
			e.Log.Warn("following a plan's moves", "plan", p.ID, "err", err)
		}
		if p.State == records.PlanRunning {
			running = append(running, p)
		}
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

// advance takes approved plans and resumes running ones after a
// (re)start. It returns the source hosts of the moves whose migrations
// run, whether any plan runs, and whether any plan is active.
func (e *Executor) advance(ctx context.Context) (sources []string, running, active bool, err error) {
	plans, err := e.Store.ListPlans(ctx, true)
	if err != nil {
		return nil, false, false, fmt.Errorf("listing plans: %w", err)
	}
	atStart := !e.resumed
	e.resumed = true
	for _, p := range plans {
		switch {
		case p.State == records.PlanApproved:
			if p, err = e.step(ctx, p.ID, plan.Event{Kind: plan.Run}); err != nil {
				return nil, false, true, err
			}
		case p.State == records.PlanRunning && atStart:
			e.Log.Info("resuming plan", "plan", p.ID)
			if p, err = e.step(ctx, p.ID, plan.Event{Kind: plan.Resume}); err != nil {
				return nil, false, true, err
			}
		}
		if p.State != records.PlanRunning {
			// A recommended plan waits for keel rebalance apply, which
			// starts an executor: it keeps none running.
			active = active || p.State == records.PlanApproved
			continue
		}
		active, running = true, true
		for _, mv := range p.Moves {
			if mv.State == records.MoveRunning && !slices.Contains(sources, mv.Source) {
				sources = append(sources, mv.Source)
			}
		}
	}
	return sources, running, active, nil
}

// readMigrations reads the live migrations of each source host (one
// os-migrations request per host; Nova's host filter matches source or
// destination): migration ID → migration, and when each was read. A host
// whose read fails is left out (its moves are followed on the next tick).
func (e *Executor) readMigrations(ctx context.Context, sources []string) (map[int64]client.Migration, map[int64]time.Time) {
	migs, seen := map[int64]client.Migration{}, map[int64]time.Time{}
	for _, h := range sources {
		list, err := e.Client.Migrations(ctx, client.MigrationFilter{Host: h, Type: "live-migration"})
		at := time.Now()
		if err != nil {
			e.Log.Warn("reading the migrations of a source host", "host", h, "err", err)
			continue
		}
		for _, m := range list {
			migs[m.ID], seen[m.ID] = m, at
		}
	}
	return migs, seen
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
		e.launch(ctx, p, a.Move)
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

// ended feeds the ends of p's running moves' migrations (in migs, read
// at seen) to p. A move's Nova time runs from its os-migrateLive request
// (from its start when this executor did not send it: a resumed plan) to
// the read that saw its migration over.
func (e *Executor) ended(ctx context.Context, p records.Plan, migs map[int64]client.Migration, seen map[int64]time.Time) (records.Plan, error) {
	for i, mv := range p.Moves {
		if mv.State != records.MoveRunning {
			continue
		}
		m, ok := migs[mv.Migration]
		if !ok || !client.Terminal(m.Status) {
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
		if posted, ok := e.posted[mv.Instance]; ok {
			f.NovaSeconds = seen[m.ID].Sub(posted).Seconds()
		} else {
			f.NovaSeconds = seen[m.ID].Sub(mv.StartedAt).Seconds() - f.KeelMS/1000
		}
		delete(e.posted, mv.Instance)
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

// launch starts move i of p in its own goroutine and feeds the answer
// to p: the move stays starting (counted by Select's caps) until then.
func (e *Executor) launch(ctx context.Context, p records.Plan, i int) {
	e.starts.Add(1)
	go func() {
		defer e.starts.Done()
		ev := e.start(ctx, p, i)
		ev.Move = i
		e.mu.Lock()
		defer e.mu.Unlock()
		if _, err := e.step(ctx, p.ID, ev); err != nil {
			e.Log.Warn("recording a move's start", "plan", p.ID, "move", i, "event", ev.Kind, "err", err)
		}
	}()
}

// readCloud reads what a start decides on: the first time the whole
// cloud (ReadNova, with its version checks; or the read the command that
// started the executor kept, SaveRead, if it is recent), then only what
// moves change
// (RefreshNova: the hosts' allocations and services in parallel; every
// server too when server is in a server group, whose members' hosts the
// scheduler's group filters read).
func (e *Executor) readCloud(ctx context.Context, server string) (client.NovaCloud, error) {
	e.cloudMu.Lock()
	if e.cloud == nil && e.DataDir != "" {
		// The command that started this executor has just read it.
		e.cloud, _ = loadRead(e.DataDir)
	}
	if e.cloud == nil {
		nc, _, err := e.Client.ReadNova(ctx)
		if err != nil {
			e.cloudMu.Unlock()
			return client.NovaCloud{}, err
		}
		e.cloud = &nc
		e.cloudMu.Unlock()
		return nc, nil
	}
	base := e.cloud
	e.cloudMu.Unlock()
	inGroup := false
	for _, g := range base.Groups {
		inGroup = inGroup || contains(g.Members, server)
	}
	par := e.ReadParallel
	if par <= 0 {
		par = 8
	}
	return e.Client.RefreshNova(ctx, base, inGroup, par)
}

// start re-checks move i of p and starts it: the server still ACTIVE on
// the planned source with the planned flavor, the source still the same
// host, a destination chosen by keel's scheduler on Placement's view plus
// keel's claims, and Nova's os-migrateLive to it; a destination Nova
// refuses is avoided and the next best tried. It runs without e.mu but
// for the choice and the claim.
func (e *Executor) start(ctx context.Context, p records.Plan, i int) plan.Event {
	mv := p.Moves[i]
	t0 := time.Now()
	var (
		sv           client.NovaServer
		nc           client.NovaCloud
		svErr, ncErr error
		wg           sync.WaitGroup
	)
	wg.Add(2)
	go func() { defer wg.Done(); sv, svErr = e.Client.NovaServerNow(ctx, mv.Instance) }()
	go func() { defer wg.Done(); nc, ncErr = e.readCloud(ctx, mv.Instance) }()
	wg.Wait()
	reads := time.Since(t0)
	switch {
	case errors.Is(svErr, client.ErrNotFound):
		return skip("server %s is gone", mv.Instance)
	case svErr != nil:
		e.Log.Warn("re-reading a server", "server", mv.Instance, "err", svErr)
		return plan.Event{Kind: plan.Lost}
	case sv.Host != mv.Source:
		return skip("server %s is on %s, not on %s as planned (moved by someone else)", mv.Instance, sv.Host, mv.Source)
	case sv.Flavor.RAMMB != mv.RAMMB:
		return skip("server %s was resized (%d MB, planned with %d MB)", mv.Instance, sv.Flavor.RAMMB, mv.RAMMB)
	case sv.TaskState != "":
		return plan.Event{Kind: plan.Deferred, Reason: fmt.Sprintf("server %s is busy (task %s); waiting", mv.Instance, sv.TaskState)}
	case sv.Status != "ACTIVE":
		return skip("server %s is %s: only an ACTIVE server is live-migrated", mv.Instance, sv.Status)
	case ncErr != nil:
		e.Log.Warn("reading the cloud", "err", ncErr)
		return plan.Event{Kind: plan.Lost}
	}
	if want, ok := e.Hosts[mv.Source]; ok {
		if h, ok := nc.Host(mv.Source); !ok || h.ProviderUUID != want {
			return plan.Event{Kind: plan.Refused, Reason: fmt.Sprintf("host %s is not the one planned (provider %s): the cloud's hosts changed since the plan was made; cancel it and plan again", mv.Source, want)}
		}
	}
	ignore := append([]string{mv.Source}, e.avoided(p, i)...)
	plans, err := e.Store.ListPlans(ctx, true)
	if err == nil {
		for _, o := range plans {
			if o.Purpose == records.PlanDrain && o.State != records.PlanRecommended {
				ignore = append(ignore, o.Hosts...)
			}
		}
	}
	if mv.Dest != "" {
		// A planned destination (a rebalance's): that host, if it still
		// passes the filters with the claims counted, or the move is
		// skipped.
		for _, h := range nc.Hosts {
			if h.Name != mv.Dest {
				ignore = append(ignore, h.Name)
			}
		}
	}
	for try := 0; try < maxRefusals; try++ {
		// The choice and its claim under the lock: the next start's
		// choice counts this destination at once.
		e.mu.Lock()
		t1 := time.Now()
		dest, err := e.choose(ctx, &nc, sv, ignore)
		if err == nil {
			e.claims[sv.UUID] = claim{host: dest.Name, provider: dest.ProviderUUID, res: sv.Flavor.Resources()}
		}
		f := e.fig(p.ID, i)
		f.add(time.Since(t1), 0)
		if try == 0 {
			f.ReadsMS += ms(reads)
		}
		e.mu.Unlock()
		if err != nil && mv.Dest != "" {
			return skip("the planned destination %s no longer takes server %s: %v", mv.Dest, mv.Instance, err)
		}
		if err != nil {
			return plan.Event{Kind: plan.Refused, Reason: err.Error()}
		}
		posted := time.Now()
		w, err := e.Client.LiveMigrate(ctx, sv.UUID, dest.Name)
		if err != nil {
			var ae *client.APIError
			if errors.As(err, &ae) && (ae.Status == 400 || ae.Status == 409) {
				e.Log.Info("Nova refused the destination; trying the next best", "server", sv.UUID, "dest", dest.Name, "err", err)
				e.mu.Lock()
				delete(e.claims, sv.UUID)
				f.Refused++
				e.mu.Unlock()
				ignore = append(ignore, dest.Name)
				continue
			}
			e.Log.Warn("starting a live migration", "server", sv.UUID, "err", err)
			if m, found, ferr := e.findMigration(ctx, p, i); ferr == nil && found {
				e.setPosted(sv.UUID, posted)
				return plan.Event{Kind: plan.Started, Migration: m.ID}
			}
			e.mu.Lock()
			delete(e.claims, sv.UUID)
			e.mu.Unlock()
			return plan.Event{Kind: plan.Lost}
		}
		e.setPosted(sv.UUID, posted)
		// The migration record exists once the API answered; find it.
		for {
			m, found, err := w.Poll(ctx)
			if err == nil && found {
				e.Log.Info("move started", "plan", p.ID, "move", i, "server", sv.UUID, "source", mv.Source, "dest", dest.Name, "migration", m.ID,
					"reads_ms", ms(reads), "api_ms", ms(time.Since(posted)))
				return plan.Event{Kind: plan.Started, Migration: m.ID}
			}
			if time.Since(posted) > 30*time.Second || ctx.Err() != nil {
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

func (e *Executor) setPosted(server string, at time.Time) {
	e.mu.Lock()
	e.posted[server] = at
	e.mu.Unlock()
}

func (e *Executor) avoided(p records.Plan, i int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.avoid[key(p, i)])
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
