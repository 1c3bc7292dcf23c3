package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"keel/internal/api/computeapi"
	"keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/identity"
	"keel/internal/placement"
	"keel/internal/plan"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

//go:embed ui
var uiFiles embed.FS

// The web view's timings.
const (
	// uiTick is how often the hub checks the change stream while a page
	// is open: a claim colours its host within about this long.
	uiTick = 200 * time.Millisecond
	// uiInstancesEvery is the shortest time between two reads of every
	// instance (a boot storm re-reads them at most this often).
	uiInstancesEvery = time.Second
	// uiResync re-reads instances and re-judges liveness this often even
	// when nothing announced a change (an instance stopped through the API
	// changes no claim; a host that stops heartbeating writes nothing).
	uiResync = 5 * time.Second
	// uiFinishedFor is how long a finished move stays on the page.
	uiFinishedFor = 2 * time.Second
	// uiHeartbeat keeps idle streams open through proxies.
	uiHeartbeat = 15 * time.Second
	// uiRecentPlans is how many ended plans the Plans panel keeps.
	uiRecentPlans = 5
	// uiShare bounds the share of one core the hub's builds take: after a
	// build that took d, the next waits at least d/uiShare. At 1,000 hosts
	// a build takes a few ms and the tick rules; at 10,000 one took about
	// 110 ms of CPU, so the page follows claims about once a second
	// instead of spending half a core (BenchmarkUIBuild).
	uiShare = 0.1
)

// uiPause is how long the hub waits after a build that took cost before
// it builds again: a tick, or longer when builds are dear (see uiShare).
func uiPause(cost time.Duration) time.Duration {
	return max(uiTick, time.Duration(float64(cost)/uiShare))
}

// uiStore is what the web view reads besides the host view: instances,
// migrations, flavors and plans.
type uiStore interface {
	store.Instances
	store.Migrations
	store.Flavors
	store.Plans
}

// uiHub feeds the web view (/keel/ui/): it follows the store's change
// stream (the host view) and the conductor's events, rebuilds the part of
// the cloud's state that changed (hosts, instances, moves), and pushes
// each changed part to every open page over server-sent events
// (/keel/v1/ui/events). While no page is open it does nothing; /metrics
// refreshes the host view itself.
type uiHub struct {
	st       uiStore
	view     *hostView
	log      *slog.Logger
	now      func() time.Time
	downTime time.Duration

	mu    sync.Mutex
	subs  int
	state *uiState
	// pokedAll: instances may have changed (a decision, a build or a
	// move ended); pokedMoves: a move reported progress.
	pokedAll, pokedMoves bool
	lastInstances        time.Time
	lastHosts            time.Time
	flavors              []records.Flavor // read with the instances
	changed              chan struct{}    // closed when state changes
	// moves seen in flight (by migration ID) and the first progress
	// sample of each (for the ETA); finished moves with their end time.
	active   map[int64]records.Migration
	samples  map[int64]progressSample
	finished map[int64]finishedMove
	// Plans: those not ended (re-read every tick while there are any),
	// the last few ended ones, and each host of an active drain with its
	// plan (what marks the host draining).
	activePlans map[int64]records.Plan
	endedPlans  []records.Plan
	drainOf     map[string]int64

	wake chan struct{}
	done chan struct{}
	once sync.Once
}

type progressSample struct {
	at        time.Time
	processed int64
}

type finishedMove struct {
	m  records.Migration
	at time.Time
}

func newUIHub(st uiStore, view *hostView, downTime time.Duration, log *slog.Logger) *uiHub {
	return &uiHub{
		st: st, view: view, log: log, now: time.Now, downTime: downTime,
		changed: make(chan struct{}),
		active:  map[int64]records.Migration{}, samples: map[int64]progressSample{}, finished: map[int64]finishedMove{},
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

// run builds the state while pages are open, until close.
func (u *uiHub) run(ctx context.Context) {
	t := time.NewTicker(uiTick)
	defer t.Stop()
	var notBefore time.Time
	for {
		select {
		case <-u.done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		case <-u.wake:
		}
		u.mu.Lock()
		subs := u.subs
		u.mu.Unlock()
		if subs == 0 || time.Now().Before(notBefore) {
			continue
		}
		start := time.Now()
		if err := u.build(ctx); err != nil {
			u.log.Warn("web view: building the cloud's state", "err", err)
		}
		notBefore = start.Add(uiPause(time.Since(start)))
	}
}

// close ends every stream (http.Server.Shutdown waits for none of them).
func (u *uiHub) close() { u.once.Do(func() { close(u.done) }) }

// poke marks the instances stale: the next tick re-reads them.
func (u *uiHub) poke() {
	u.mu.Lock()
	u.pokedAll = true
	u.mu.Unlock()
}

// pokeMoves marks the moves stale.
func (u *uiHub) pokeMoves() {
	u.mu.Lock()
	u.pokedMoves = true
	u.mu.Unlock()
}

// hooks chains the hub's pokes after next's hooks.
func (u *uiHub) hooks(next conductor.Hooks) conductor.Hooks {
	h := next
	h.Decision = func(kind string, in records.Instance, sel scheduler.Selection, err error) {
		if next.Decision != nil {
			next.Decision(kind, in, sel, err)
		}
		u.poke()
	}
	h.MigrationDone = func(m records.Migration) {
		if next.MigrationDone != nil {
			next.MigrationDone(m)
		}
		u.poke()
	}
	h.BuildDone = func(in records.Instance) {
		if next.BuildDone != nil {
			next.BuildDone(in)
		}
		u.poke()
	}
	return h
}

// reporter passes the agents' reports to r and pokes the hub on copy
// progress (the conductor has recorded it by then).
func (u *uiHub) reporter(r compute.Reporter) compute.Reporter { return &uiReporter{r, u} }

type uiReporter struct {
	compute.Reporter
	u *uiHub
}

func (r *uiReporter) CopyProgress(ctx context.Context, migID int64, total, processed, remaining int64) {
	r.Reporter.CopyProgress(ctx, migID, total, processed, remaining)
	r.u.pokeMoves()
}

func (r *uiReporter) CopyDone(ctx context.Context, migID int64, copyErr error) error {
	defer r.u.poke()
	return r.Reporter.CopyDone(ctx, migID, copyErr)
}

// uiState is the whole cloud as an admin sees it, in three parts, each
// also kept encoded (what every admin's stream sends) with the version it
// last changed in.
type uiState struct {
	Time      time.Time
	Hosts     []uiHost
	Imbalance *uiImbalance
	Instances []uiInstance
	Moves     []uiMove
	Plans     []uiPlan

	hostsJSON, instancesJSON, movesJSON, plansJSON []byte
	hostsVer, instancesVer, movesVer, plansVer     uint64
}

// The parts as events carry them.
type (
	uiHostsPart struct {
		Time      time.Time    `json:"time"`
		Hosts     []uiHost     `json:"hosts"`
		Imbalance *uiImbalance `json:"imbalance"`
	}
	uiInstancesPart struct {
		Time      time.Time    `json:"time"`
		Instances []uiInstance `json:"instances"`
	}
	uiMovesPart struct {
		Time  time.Time `json:"time"`
		Moves []uiMove  `json:"moves"`
	}
	// uiPlansPart is admin-only (plans are, as /keel/v1/plans is).
	uiPlansPart struct {
		Time  time.Time `json:"time"`
		Plans []uiPlan  `json:"plans"`
	}
	// uiHello opens a stream: who the caller is.
	uiHello struct {
		Admin   bool   `json:"admin"`
		User    string `json:"user"`
		Project string `json:"project"`
	}
)

type uiHost struct {
	Name           string `json:"name"`
	Zone           string `json:"zone"`
	Enabled        bool   `json:"enabled"`
	Up             bool   `json:"up"`
	DisabledReason string `json:"disabled_reason,omitempty"`
	// Draining: a drain plan that has not ended empties the host (or,
	// without one, the host is disabled and moves leave it); Drained: the
	// host is still disabled by a drain plan that has ended. DrainPlan
	// names that plan.
	Draining   bool                                   `json:"draining"`
	Drained    bool                                   `json:"drained,omitempty"`
	DrainPlan  int64                                  `json:"drain_plan,omitempty"`
	Fill       float64                                `json:"fill"`
	FillClass  placement.ResourceClass                `json:"fill_class"`
	Resources  map[placement.ResourceClass]uiResource `json:"resources"`
	RunningVMs int64                                  `json:"running_vms"`
	Instances  int                                    `json:"instances"`
	// Measured is the host's measured CPU, beside the claims of
	// Resources; absent when the host reports none (unavailable).
	Measured *uiMeasured `json:"measured,omitempty"`
}

// uiMeasured is what a host's guests really use, as its agent last
// measured it (the host record's cpu.percent).
type uiMeasured struct {
	// CPUPercent is the fraction of the host's CPUs busy (0.37: 37 %).
	CPUPercent float64 `json:"cpu_percent"`
	// MeasuredAt is when; AgeSeconds its age when the state was built.
	MeasuredAt time.Time `json:"measured_at"`
	AgeSeconds float64   `json:"age_seconds"`
}

type uiResource struct {
	Total           int64   `json:"total"`
	Reserved        int64   `json:"reserved"`
	AllocationRatio float64 `json:"allocation_ratio"`
	Capacity        int64   `json:"capacity"`
	Used            int64   `json:"used"`
}

type uiInstance struct {
	UUID      string  `json:"uuid"`
	Name      string  `json:"name"`
	ProjectID string  `json:"project_id"`
	Host      string  `json:"host,omitempty"`
	Status    string  `json:"status"`
	TaskState string  `json:"task_state,omitempty"`
	Flavor    string  `json:"flavor"`
	VCPUs     int64   `json:"vcpus"`
	RAMMB     int64   `json:"ram_mb"`
	DiskGB    int64   `json:"disk_gb"`
	Share     float64 `json:"share"` // largest fraction of its host's capacity
}

type uiMove struct {
	ID             int64     `json:"id"`
	Kind           string    `json:"kind"`
	InstanceUUID   string    `json:"instance_uuid"`
	InstanceName   string    `json:"instance_name"`
	Source         string    `json:"source,omitempty"`
	Dest           string    `json:"dest,omitempty"`
	Status         string    `json:"status"`
	Phase          string    `json:"phase"`
	MemoryTotal    int64     `json:"memory_total_bytes"`
	MemoryCopied   int64     `json:"memory_processed_bytes"`
	MemoryLeft     int64     `json:"memory_remaining_bytes"`
	ETASeconds     *float64  `json:"eta_seconds,omitempty"`
	Started        time.Time `json:"started"`
	Finished       bool      `json:"finished"`
	FinishedAgoSec float64   `json:"finished_ago_seconds,omitempty"`
	Error          string    `json:"error,omitempty"`
	// Plan is the plan that started the move (0: none).
	Plan      int64 `json:"plan,omitempty"`
	projectID string
}

// uiPlan is a move plan with its progress (package plan's Summary: moves
// done, running and left, bytes, rate and ETA).
type uiPlan struct {
	ID         int64        `json:"id"`
	Purpose    string       `json:"purpose"`
	State      string       `json:"state"`
	Hosts      []string     `json:"hosts,omitempty"`
	Reason     string       `json:"reason,omitempty"`
	Parallel   int          `json:"parallel,omitempty"`
	Progress   plan.Summary `json:"progress"`
	ETASeconds *float64     `json:"eta_seconds,omitempty"`
	Created    time.Time    `json:"created"`
	Started    time.Time    `json:"started,omitzero"`
	Finished   time.Time    `json:"finished,omitzero"`
	// Running lists the instances (names, else UUIDs) whose moves run.
	Running []string `json:"running,omitempty"`
}

type uiImbalance struct {
	CV            map[placement.ResourceClass]float64 `json:"cv"`
	EnabledHosts  int                                 `json:"enabled_hosts"`
	EmptyHosts    int                                 `json:"empty_hosts"`
	MostLoaded    *uiLoad                             `json:"most_loaded,omitempty"`
	LeastLoaded   *uiLoad                             `json:"least_loaded,omitempty"`
	LargestFlavor string                              `json:"largest_free_flavor"`
	FitsOn        int                                 `json:"largest_free_flavor_hosts"`
	// MeasuredCV is the coefficient of variation of the enabled hosts'
	// measured CPU (cpu.percent, what `keel rebalance plan --by measured`
	// evens out) over the MeasuredHosts of them that reported one; nil
	// when none did.
	MeasuredCV    *float64 `json:"measured_cpu_cv,omitempty"`
	MeasuredHosts int      `json:"measured_hosts"`
}

type uiLoad struct {
	Host  string                  `json:"host"`
	Fill  float64                 `json:"fill"`
	Class placement.ResourceClass `json:"class"`
}

// build re-reads what may have changed and publishes the parts that did.
func (u *uiHub) build(ctx context.Context) error {
	vc, err := u.view.refresh(ctx)
	if err != nil {
		return err
	}
	now := u.now()
	u.mu.Lock()
	first := u.state == nil
	wantInstances := first || vc.Providers || u.pokedAll || now.Sub(u.lastInstances) >= uiResync
	readInstances := wantInstances && (first || now.Sub(u.lastInstances) >= uiInstancesEvery)
	if readInstances {
		u.pokedAll = false
	}
	readMoves := readInstances || u.pokedMoves || vc.Providers || len(u.active) > 0 || len(u.finished) > 0
	u.pokedMoves = false
	readPlans := first || readInstances || readMoves || len(u.activePlans) > 0
	hostsDue := readMoves || readPlans || vc.any() || now.Sub(u.lastHosts) >= uiResync
	prevActive := u.active
	prevPlans := u.activePlans
	u.mu.Unlock()
	if !hostsDue {
		return nil
	}

	var ins []records.Instance
	var flavors []records.Flavor
	if readInstances {
		if ins, err = u.st.ListInstances(ctx, ""); err != nil {
			return fmt.Errorf("listing instances: %w", err)
		}
		if flavors, err = u.st.ListFlavors(ctx); err != nil {
			return fmt.Errorf("listing flavors: %w", err)
		}
	}
	var migs []records.Migration
	var ended []finishedMove
	if readMoves {
		if migs, ended, err = u.readMoves(ctx, now, prevActive); err != nil {
			return err
		}
	}
	var plans []records.Plan
	if readPlans {
		if plans, err = u.readPlans(ctx, first, prevPlans); err != nil {
			return err
		}
	}
	vhs := u.view.hosts()

	u.mu.Lock()
	defer u.mu.Unlock()
	next := &uiState{Time: now}
	if u.state != nil {
		*next = *u.state
		next.Time = now
	}
	if readMoves {
		u.active = make(map[int64]records.Migration, len(migs))
		for _, m := range migs {
			u.active[m.ID] = m
		}
		for _, f := range ended {
			u.finished[f.m.ID] = f
			delete(u.samples, f.m.ID)
		}
		for id, f := range u.finished {
			if now.Sub(f.at) > uiFinishedFor {
				delete(u.finished, id)
			}
		}
	}
	if readInstances {
		u.lastInstances = now
		next.Instances = instancesOf(ins, vhs)
	}
	if readMoves {
		next.Moves = u.movesOf(now, migs, next.Instances)
	}
	if readPlans {
		next.Plans = u.plansOf(now, plans, next.Instances)
	}
	u.lastHosts = now
	next.Hosts, next.Imbalance = u.hostsOf(now, vhs, next.Instances, next.Moves, flavors)

	if !u.encodeChanged(next, now, readInstances, readMoves, readPlans) {
		return nil
	}
	u.state = next
	close(u.changed)
	u.changed = make(chan struct{})
	return nil
}

// readMoves reads the migrations in flight, and how each of prevActive
// that is no longer in flight ended (error if it cannot be read).
func (u *uiHub) readMoves(ctx context.Context, now time.Time, prevActive map[int64]records.Migration) ([]records.Migration, []finishedMove, error) {
	migs, err := u.st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return nil, nil, fmt.Errorf("listing migrations in flight: %w", err)
	}
	nowActive := make(map[int64]bool, len(migs))
	for _, m := range migs {
		nowActive[m.ID] = true
	}
	var ended []finishedMove
	for id, old := range prevActive {
		if nowActive[id] {
			continue
		}
		m, err := u.st.GetMigration(ctx, id)
		if err != nil {
			m = old
			m.Status = records.MigrationError
		}
		ended = append(ended, finishedMove{m: m, at: now})
	}
	return migs, ended, nil
}

// readPlans reads every plan the first time (the ended ones too), then
// those not ended, and each of prevPlans that ended since (read alone).
func (u *uiHub) readPlans(ctx context.Context, first bool, prevPlans map[int64]records.Plan) ([]records.Plan, error) {
	plans, err := u.st.ListPlans(ctx, !first)
	if err != nil {
		return nil, fmt.Errorf("listing plans: %w", err)
	}
	still := make(map[int64]bool, len(plans))
	for _, p := range plans {
		still[p.ID] = true
	}
	for id := range prevPlans {
		if still[id] {
			continue
		}
		p, err := u.st.GetPlan(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("reading plan %d: %w", id, err)
		}
		plans = append(plans, p)
	}
	return plans, nil
}

// encodeChanged encodes next's parts that were read (the hosts always) and
// gives each that differs from the published state, its time aside, a new
// version; it reports whether any did.
func (u *uiHub) encodeChanged(next *uiState, now time.Time, readInstances, readMoves, readPlans bool) bool {
	changed := false
	if b := mustMarshal(uiHostsPart{Time: now, Hosts: next.Hosts, Imbalance: next.Imbalance}); u.state == nil || !equalButTime(b, u.state.hostsJSON) {
		next.hostsJSON, next.hostsVer, changed = b, next.hostsVer+1, true
	}
	if readInstances {
		if b := mustMarshal(uiInstancesPart{Time: now, Instances: next.Instances}); u.state == nil || !equalButTime(b, u.state.instancesJSON) {
			next.instancesJSON, next.instancesVer, changed = b, next.instancesVer+1, true
		}
	}
	if readMoves {
		if b := mustMarshal(uiMovesPart{Time: now, Moves: next.Moves}); u.state == nil || !equalButTime(b, u.state.movesJSON) {
			next.movesJSON, next.movesVer, changed = b, next.movesVer+1, true
		}
	}
	if readPlans {
		if b := mustMarshal(uiPlansPart{Time: now, Plans: next.Plans}); u.state == nil || !equalButTime(b, u.state.plansJSON) {
			next.plansJSON, next.plansVer, changed = b, next.plansVer+1, true
		}
	}
	return changed
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("web view: encoding the state: %v", err)) // plain structs: cannot fail
	}
	return b
}

// equalButTime compares two encoded parts after their leading "time"
// field.
func equalButTime(a, b []byte) bool {
	cut := func(x []byte) []byte {
		if i := bytes.IndexByte(x, ','); i >= 0 {
			return x[i:]
		}
		return x
	}
	return b != nil && bytes.Equal(cut(a), cut(b))
}

// instancesOf lists the instances with their share of their host.
func instancesOf(ins []records.Instance, vhs []viewHost) []uiInstance {
	byHost := make(map[string]viewHost, len(vhs))
	for _, h := range vhs {
		byHost[h.Name] = h
	}
	out := make([]uiInstance, 0, len(ins))
	for _, in := range ins {
		ui := uiInstance{
			UUID: in.UUID, Name: in.Name, ProjectID: in.ProjectID, Host: in.Host,
			Status: computeapi.ServerStatus(in), TaskState: string(in.TaskState), Flavor: in.Flavor.Name,
			VCPUs: in.Flavor.VCPUs, RAMMB: in.Flavor.RAMMB, DiskGB: in.Flavor.DiskGB,
		}
		if h, ok := byHost[in.Host]; ok {
			for rc, n := range in.Flavor.Resources() {
				if c := h.Capacity[rc]; c > 0 {
					ui.Share = max(ui.Share, float64(n)/float64(c))
				}
			}
		}
		out = append(out, ui)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Host != out[j].Host {
			return out[i].Host < out[j].Host
		}
		return out[i].Share > out[j].Share
	})
	return out
}

// movesOf lists the moves in flight and those just finished; called with
// mu held.
func (u *uiHub) movesOf(now time.Time, migs []records.Migration, ins []uiInstance) []uiMove {
	byUUID := make(map[string]uiInstance, len(ins))
	for _, in := range ins {
		byUUID[in.UUID] = in
	}
	out := []uiMove{}
	for _, m := range migs {
		out = append(out, u.move(now, m, byUUID[m.InstanceUUID], false, time.Time{}))
	}
	for _, f := range u.finished {
		out = append(out, u.move(now, f.m, byUUID[f.m.InstanceUUID], true, f.at))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// hostsOf builds the hosts and the imbalance header; flavors nil keeps
// the previous largest free slot's flavor list (flavors are read with the
// instances). Called with mu held.
func (u *uiHub) hostsOf(now time.Time, vhs []viewHost, ins []uiInstance, moves []uiMove, flavors []records.Flavor) ([]uiHost, *uiImbalance) {
	if flavors == nil {
		flavors = u.flavors
	}
	u.flavors = flavors
	count := map[string]int{}
	for _, in := range ins {
		count[in.Host]++
	}
	outgoing := map[string]int{}
	for _, m := range moves {
		if !m.Finished {
			outgoing[m.Source]++
		}
	}
	var enabled []viewHost
	var measured []float64
	hosts := make([]uiHost, 0, len(vhs))
	imb := &uiImbalance{}
	for _, h := range vhs {
		uh := uiHost{Name: h.Name, Zone: h.Zone, Enabled: h.HasService && !h.Service.Disabled, Up: up(h, now, u.downTime),
			DisabledReason: h.Service.DisabledReason, RunningVMs: h.Record.RunningVMs, Instances: count[h.Name],
			Resources: map[placement.ResourceClass]uiResource{}}
		if m, ok := h.Record.Metric(records.MetricCPUPercent); ok && h.HasRecord {
			uh.Measured = &uiMeasured{CPUPercent: m.Value, MeasuredAt: m.Timestamp.UTC(), AgeSeconds: max(0, now.Sub(m.Timestamp).Seconds())}
		}
		switch id, ok := u.drainOf[h.Name]; {
		case ok:
			uh.Draining, uh.DrainPlan = true, id
		case !uh.Enabled && outgoing[h.Name] > 0:
			uh.Draining = true
		case !uh.Enabled:
			if id, ok := drainReason(h.Service.DisabledReason); ok {
				uh.Drained, uh.DrainPlan = true, id
			}
		}
		for rc, c := range h.Capacity {
			if inv, own := h.Provider.Inventories[rc]; own && !h.Nested[rc] {
				uh.Resources[rc] = uiResource{Total: inv.Total, Reserved: inv.Reserved, AllocationRatio: inv.AllocationRatio,
					Capacity: c, Used: h.Used[rc]}
				continue
			}
			// Held (also) by its children: the tree's sums, as capacity.
			uh.Resources[rc] = uiResource{Total: c, AllocationRatio: 1, Capacity: c, Used: h.Used[rc]}
		}
		for _, rc := range stdClasses {
			if f, ok := fill(h, rc); ok && (f > uh.Fill || uh.FillClass == "") {
				uh.Fill, uh.FillClass = f, rc
			}
		}
		hosts = append(hosts, uh)
		if !uh.Enabled {
			continue
		}
		enabled = append(enabled, h)
		imb.EnabledHosts++
		if uh.Measured != nil {
			measured = append(measured, uh.Measured.CPUPercent)
		}
		if usageZero(h.Used) {
			imb.EmptyHosts++
		}
		if imb.MostLoaded == nil || uh.Fill > imb.MostLoaded.Fill {
			imb.MostLoaded = &uiLoad{Host: uh.Name, Fill: uh.Fill, Class: uh.FillClass}
		}
		if imb.LeastLoaded == nil || uh.Fill < imb.LeastLoaded.Fill {
			imb.LeastLoaded = &uiLoad{Host: uh.Name, Fill: uh.Fill, Class: uh.FillClass}
		}
	}
	imb.CV = imbalance(enabled)
	if imb.MeasuredHosts = len(measured); len(measured) > 0 {
		v := cv(measured)
		imb.MeasuredCV = &v
	}
	// The largest flavor that still fits on an enabled, up host, as the
	// scheduler's placement step decides (provider trees, sharing pools,
	// a flavor's request groups and traits).
	fl := append([]records.Flavor(nil), flavors...)
	sort.SliceStable(fl, func(i, j int) bool {
		a, b := fl[i], fl[j]
		if a.RAMMB != b.RAMMB {
			return a.RAMMB > b.RAMMB
		}
		if a.VCPUs != b.VCPUs {
			return a.VCPUs > b.VCPUs
		}
		return a.DiskGB > b.DiskGB
	})
	usable := make(map[string]bool, len(enabled))
	for _, h := range enabled {
		usable[h.Name] = up(h, now, u.downTime)
	}
	pf := u.view.providers()
	for _, f := range fl {
		if n := len(pf.fitsOn(f, func(h string) bool { return usable[h] })); n > 0 {
			imb.LargestFlavor, imb.FitsOn = f.Name, n
			break
		}
	}
	return hosts, imb
}

func (u *uiHub) move(now time.Time, m records.Migration, in uiInstance, finished bool, at time.Time) uiMove {
	mv := uiMove{
		ID: m.ID, Kind: m.Type, InstanceUUID: m.InstanceUUID, InstanceName: in.Name, Source: m.SourceHost, Dest: m.DestHost,
		Status: string(m.Status), Phase: string(m.Phase), MemoryTotal: m.MemoryTotalBytes, MemoryCopied: m.MemoryProcessedBytes,
		MemoryLeft: m.MemoryRemainingBytes, Started: m.CreatedAt, Finished: finished, Error: m.Error, projectID: in.ProjectID,
	}
	if m.PlanMove != nil {
		mv.Plan = m.PlanMove.Plan
	}
	if finished {
		mv.FinishedAgoSec = now.Sub(at).Seconds()
		return mv
	}
	// The rate is measured from the first report seen (or, before a
	// second one, from the migration's start).
	s, ok := u.samples[m.ID]
	if !ok && m.MemoryProcessedBytes > 0 {
		u.samples[m.ID] = progressSample{at: now, processed: m.MemoryProcessedBytes}
		s = progressSample{at: m.CreatedAt}
		ok = !m.CreatedAt.IsZero()
	}
	if ok && m.MemoryProcessedBytes > s.processed && now.After(s.at) {
		rate := float64(m.MemoryProcessedBytes-s.processed) / now.Sub(s.at).Seconds()
		eta := float64(m.MemoryRemainingBytes) / rate
		mv.ETASeconds = &eta
	}
	return mv
}

// memberInstances and memberMoves are what a caller who is not an admin
// may see: their project's instances and moves, without host names (as
// the compute API's policy hides OS-EXT-SRV-ATTR:host and the hypervisors
// from non-admins).
func memberInstances(s *uiState, project string) []uiInstance {
	out := []uiInstance{}
	for _, in := range s.Instances {
		if in.ProjectID == project {
			in.Host, in.Share = "", 0
			out = append(out, in)
		}
	}
	return out
}

func memberMoves(s *uiState, project string) []uiMove {
	out := []uiMove{}
	for _, m := range s.Moves {
		if m.projectID == project {
			m.Source, m.Dest, m.Plan = "", "", 0
			out = append(out, m)
		}
	}
	return out
}

// current returns the state and the channel closed when it changes.
func (u *uiHub) current() (*uiState, <-chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state, u.changed
}

func (u *uiHub) subscribe() {
	u.mu.Lock()
	u.subs++
	u.pokedAll = true
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

func (u *uiHub) unsubscribe() {
	u.mu.Lock()
	u.subs--
	u.mu.Unlock()
}

// routes serves the page (no token: it logs in itself) on mux and the
// state and its stream on keel (behind the token check).
func (u *uiHub) routes(mux, keel *http.ServeMux) {
	sub, _ := fs.Sub(uiFiles, "ui")
	files := http.StripPrefix("/keel/ui/", http.FileServerFS(sub))
	mux.Handle("GET /keel/ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	}))
	mux.Handle("GET /keel/ui", http.RedirectHandler("/keel/ui/", http.StatusMovedPermanently))
	keel.HandleFunc("GET /keel/v1/ui/state", u.serveState)
	keel.HandleFunc("GET /keel/v1/ui/events", u.serveEvents)
}

// uiView is GET /keel/v1/ui/state's answer: the parts the caller may
// see, at once.
type uiView struct {
	uiHello
	Time      time.Time    `json:"time"`
	Hosts     []uiHost     `json:"hosts,omitempty"`
	Imbalance *uiImbalance `json:"imbalance,omitempty"`
	Instances []uiInstance `json:"instances"`
	Moves     []uiMove     `json:"moves"`
	Plans     []uiPlan     `json:"plans,omitempty"`
}

func hello(p identity.Principal) uiHello {
	return uiHello{Admin: p.IsAdmin(), User: p.UserName, Project: p.ProjectName}
}

// serveState answers the current state once.
func (u *uiHub) serveState(w http.ResponseWriter, r *http.Request) {
	p, ok := identity.PrincipalFrom(r.Context())
	if !ok {
		computeapi.WriteError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	u.subscribe()
	defer u.unsubscribe()
	if err := u.build(r.Context()); err != nil {
		computeapi.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s, _ := u.current()
	v := uiView{uiHello: hello(p), Time: s.Time}
	if p.IsAdmin() {
		v.Hosts, v.Imbalance, v.Instances, v.Moves, v.Plans = s.Hosts, s.Imbalance, s.Instances, s.Moves, s.Plans
	} else {
		v.Instances, v.Moves = memberInstances(s, p.ProjectID), memberMoves(s, p.ProjectID)
	}
	writeJSON(w, http.StatusOK, v)
}

// serveEvents streams the state as server-sent events: "hello" first (who
// the caller is), then "hosts", "instances", "moves" and "plans", each
// whenever that part of what the caller may see changes (an admin gets
// every part; anyone else their project's instances and moves, never
// hosts nor plans), a
// comment as heartbeat, and "expired" when the token expires.
func (u *uiHub) serveEvents(w http.ResponseWriter, r *http.Request) {
	p, ok := identity.PrincipalFrom(r.Context())
	if !ok {
		computeapi.WriteError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	// Gzip when the client takes it (browsers do): the instances part of
	// a large cloud shrinks about tenfold. Every event is flushed through.
	var out io.Writer = w
	flush := rc.Flush
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer gz.Close()
		out = gz
		flush = func() error {
			if err := gz.Flush(); err != nil {
				return err
			}
			return rc.Flush()
		}
	}
	w.WriteHeader(http.StatusOK)
	send := func(event string, data []byte) bool {
		if _, err := fmt.Fprintf(out, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		return flush() == nil
	}
	if !send("hello", mustMarshal(hello(p))) {
		return
	}
	u.subscribe()
	defer u.unsubscribe()
	hb := time.NewTicker(uiHeartbeat)
	defer hb.Stop()
	var expiry <-chan time.Time
	if !p.ExpiresAt.IsZero() {
		t := time.NewTimer(time.Until(p.ExpiresAt))
		defer t.Stop()
		expiry = t.C
	}
	admin := p.IsAdmin()
	var (
		hostsVer, instancesVer, movesVer, plansVer uint64
		lastInstances, lastMoves                   []byte // a member's, to skip repeats
	)
	for {
		s, ch := u.current()
		if s != nil {
			if admin && s.hostsVer != hostsVer {
				hostsVer = s.hostsVer
				if !send("hosts", s.hostsJSON) {
					return
				}
			}
			if admin && s.plansVer != plansVer {
				plansVer = s.plansVer
				if !send("plans", s.plansJSON) {
					return
				}
			}
			if s.instancesVer != instancesVer {
				instancesVer = s.instancesVer
				data := s.instancesJSON
				if !admin {
					data = mustMarshal(uiInstancesPart{Time: s.Time, Instances: memberInstances(s, p.ProjectID)})
				}
				if admin || !equalButTime(data, lastInstances) {
					lastInstances = data
					if !send("instances", data) {
						return
					}
				}
			}
			if s.movesVer != movesVer {
				movesVer = s.movesVer
				data := s.movesJSON
				if !admin {
					data = mustMarshal(uiMovesPart{Time: s.Time, Moves: memberMoves(s, p.ProjectID)})
				}
				if admin || !equalButTime(data, lastMoves) {
					lastMoves = data
					if !send("moves", data) {
						return
					}
				}
			}
		}
		select {
		case <-ch:
		case <-hb.C:
			if _, err := fmt.Fprint(out, ": keep-alive\n\n"); err != nil {
				return
			}
			if err := flush(); err != nil {
				return
			}
		case <-expiry:
			send("expired", []byte("{}"))
			return
		case <-r.Context().Done():
			return
		case <-u.done:
			return
		}
	}
}

// acceptsGzip says whether the request's Accept-Encoding names gzip
// (without q=0).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") {
			q := strings.ReplaceAll(params, " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

func usageZero(r placement.Resources) bool {
	for _, n := range r {
		if n != 0 {
			return false
		}
	}
	return true
}

// plansOf keeps the plans just read (those not ended, then those that
// ended, newest last) and lists them for the Plans panel: the active
// ones by ID, then the last uiRecentPlans ended ones, most recent first.
// It also records each host an active drain empties. Called with mu
// held.
func (u *uiHub) plansOf(now time.Time, plans []records.Plan, ins []uiInstance) []uiPlan {
	names := make(map[string]string, len(ins))
	for _, in := range ins {
		names[in.UUID] = in.Name
	}
	u.activePlans = map[int64]records.Plan{}
	u.drainOf = map[string]int64{}
	ended := map[int64]records.Plan{}
	for _, p := range u.endedPlans {
		ended[p.ID] = p
	}
	for _, p := range plans {
		if records.PlanTerminal(p.State) {
			ended[p.ID] = p
			continue
		}
		u.activePlans[p.ID] = p
		if p.Purpose == records.PlanDrain && p.State != records.PlanRecommended {
			for _, h := range p.Hosts {
				u.drainOf[h] = p.ID
			}
		}
	}
	u.endedPlans = u.endedPlans[:0]
	for _, p := range ended {
		u.endedPlans = append(u.endedPlans, p)
	}
	sort.Slice(u.endedPlans, func(i, j int) bool {
		a, b := u.endedPlans[i], u.endedPlans[j]
		if !a.FinishedAt.Equal(b.FinishedAt) {
			return a.FinishedAt.After(b.FinishedAt)
		}
		return a.ID > b.ID
	})
	if len(u.endedPlans) > uiRecentPlans {
		u.endedPlans = u.endedPlans[:uiRecentPlans]
	}
	out := make([]uiPlan, 0, len(u.activePlans)+len(u.endedPlans))
	for _, p := range u.activePlans {
		// A running move's copy as its migration last reported it (the
		// plan record catches up once per executor tick).
		p.Moves = slices.Clone(p.Moves)
		for i, mv := range p.Moves {
			if m, ok := u.active[mv.Migration]; ok && mv.State == records.MoveRunning && m.MemoryProcessedBytes > mv.BytesCopied {
				p.Moves[i].BytesCopied = m.MemoryProcessedBytes
			}
		}
		out = append(out, uiPlanOf(p, now, names))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	for _, p := range u.endedPlans {
		out = append(out, uiPlanOf(p, now, names))
	}
	return out
}

func uiPlanOf(p records.Plan, now time.Time, names map[string]string) uiPlan {
	up := uiPlan{ID: p.ID, Purpose: p.Purpose, State: string(p.State), Hosts: p.Hosts, Reason: p.Reason, Parallel: p.Options.Parallel,
		Progress: plan.Summarise(p, now), Created: p.CreatedAt, Started: p.StartedAt, Finished: p.FinishedAt}
	if up.Progress.ETA > 0 {
		eta := up.Progress.ETA.Seconds()
		up.ETASeconds = &eta
	}
	for _, mv := range p.Moves {
		if mv.State == records.MoveStarting || mv.State == records.MoveRunning {
			name := names[mv.Instance]
			if name == "" {
				name = mv.Instance
			}
			up.Running = append(up.Running, name)
		}
	}
	return up
}

// drainReason reads the plan ID out of a drain's disabled reason ("keel
// drain plan N", as the conductor's Drain writes it).
func drainReason(reason string) (int64, bool) {
	rest, ok := strings.CutPrefix(reason, "keel drain plan ")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	return id, err == nil && id > 0
}
