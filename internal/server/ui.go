package server

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"keel/internal/api/compute"
	computepkg "keel/internal/compute"
	"keel/internal/conductor"
	"keel/internal/identity"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

//go:embed ui
var uiFiles embed.FS

// The web view's timings.
const (
	// uiTick is how often the hub checks the change stream while a page
	// is open: a claim shows within about this long.
	uiTick = 200 * time.Millisecond
	// uiResync re-reads instances and migrations this often even when
	// nothing announced a change (an instance stopped through the API
	// changes no claim).
	uiResync = 5 * time.Second
	// uiFinishedFor is how long a finished move stays on the page.
	uiFinishedFor = 2 * time.Second
	// uiHeartbeat keeps idle streams open through proxies.
	uiHeartbeat = 15 * time.Second
)

// uiHub feeds the web view (/keel/ui/): it follows the store's change
// stream (the host view) and the conductor's events, builds the cloud's
// state when something changed, and pushes it to every open page over
// server-sent events (/keel/v1/ui/events). While no page is open it does
// nothing; /metrics refreshes the host view itself.
type uiHub struct {
	st       store.Store
	view     *hostView
	log      *slog.Logger
	now      func() time.Time
	downTime time.Duration

	mu       sync.Mutex
	subs     int
	poked    bool
	state    *uiState
	version  uint64
	changed  chan struct{} // closed when state changes
	lastFull time.Time
	// moves seen in flight (by migration ID) and the first progress
	// sample of each (for the ETA); finished moves with their end time.
	active   map[int64]records.Migration
	samples  map[int64]progressSample
	finished map[int64]finishedMove

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

func newUIHub(st store.Store, view *hostView, downTime time.Duration, log *slog.Logger) *uiHub {
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
		if subs == 0 {
			continue
		}
		if err := u.build(ctx); err != nil {
			u.log.Warn("web view: building the cloud's state", "err", err)
		}
	}
}

// close ends every stream (http.Server.Shutdown waits for none of them).
func (u *uiHub) close() { u.once.Do(func() { close(u.done) }) }

// poke marks the state stale: the next tick rebuilds it.
func (u *uiHub) poke() {
	u.mu.Lock()
	u.poked = true
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
func (u *uiHub) reporter(r computepkg.Reporter) computepkg.Reporter { return &uiReporter{r, u} }

type uiReporter struct {
	computepkg.Reporter
	u *uiHub
}

func (r *uiReporter) CopyProgress(ctx context.Context, migID int64, total, processed, remaining int64) {
	r.Reporter.CopyProgress(ctx, migID, total, processed, remaining)
	r.u.poke()
}

func (r *uiReporter) CopyDone(ctx context.Context, migID int64, copyErr error) error {
	defer r.u.poke()
	return r.Reporter.CopyDone(ctx, migID, copyErr)
}

// uiState is the whole cloud as an admin sees it.
type uiState struct {
	Time      time.Time    `json:"time"`
	Admin     bool         `json:"admin"`
	User      string       `json:"user,omitempty"`
	Project   string       `json:"project,omitempty"`
	Hosts     []uiHost     `json:"hosts,omitempty"`
	Moves     []uiMove     `json:"moves"`
	Instances []uiInstance `json:"instances"`
	Imbalance *uiImbalance `json:"imbalance,omitempty"`
}

type uiHost struct {
	Name           string                                 `json:"name"`
	Zone           string                                 `json:"zone"`
	Enabled        bool                                   `json:"enabled"`
	Up             bool                                   `json:"up"`
	DisabledReason string                                 `json:"disabled_reason,omitempty"`
	Draining       bool                                   `json:"draining"`
	Fill           float64                                `json:"fill"`
	FillClass      placement.ResourceClass                `json:"fill_class"`
	Resources      map[placement.ResourceClass]uiResource `json:"resources"`
	RunningVMs     int64                                  `json:"running_vms"`
	Instances      []string                               `json:"instances"` // UUIDs, largest first
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
	projectID      string
}

type uiImbalance struct {
	CV            map[placement.ResourceClass]float64 `json:"cv"`
	EnabledHosts  int                                 `json:"enabled_hosts"`
	EmptyHosts    int                                 `json:"empty_hosts"`
	MostLoaded    *uiLoad                             `json:"most_loaded,omitempty"`
	LeastLoaded   *uiLoad                             `json:"least_loaded,omitempty"`
	LargestFlavor string                              `json:"largest_free_flavor"`
	FitsOn        int                                 `json:"largest_free_flavor_hosts"`
}

type uiLoad struct {
	Host  string                  `json:"host"`
	Fill  float64                 `json:"fill"`
	Class placement.ResourceClass `json:"class"`
}

// build reads what changed and, if the state differs, publishes it.
func (u *uiHub) build(ctx context.Context) error {
	hostsChanged, err := u.view.refresh(ctx)
	if err != nil {
		return err
	}
	now := u.now()
	u.mu.Lock()
	need := hostsChanged || u.poked || u.state == nil || len(u.active) > 0 || len(u.finished) > 0 || now.Sub(u.lastFull) >= uiResync
	u.poked = false
	u.mu.Unlock()
	if !need {
		return nil
	}
	ins, err := u.st.ListInstances(ctx, "")
	if err != nil {
		return fmt.Errorf("listing instances: %w", err)
	}
	migs, err := u.st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return fmt.Errorf("listing migrations in flight: %w", err)
	}
	flavors, err := u.st.ListFlavors(ctx)
	if err != nil {
		return fmt.Errorf("listing flavors: %w", err)
	}
	u.mu.Lock()
	prevActive := u.active
	u.mu.Unlock()
	nowActive := make(map[int64]records.Migration, len(migs))
	for _, m := range migs {
		nowActive[m.ID] = m
	}
	var ended []finishedMove
	for id := range prevActive {
		if _, ok := nowActive[id]; ok {
			continue
		}
		m, err := u.st.GetMigration(ctx, id)
		if err != nil {
			m = prevActive[id]
			m.Status = records.MigrationError
		}
		ended = append(ended, finishedMove{m: m, at: now})
	}

	u.mu.Lock()
	defer u.mu.Unlock()
	u.lastFull = now
	u.active = nowActive
	for _, f := range ended {
		u.finished[f.m.ID] = f
		delete(u.samples, f.m.ID)
	}
	for id, f := range u.finished {
		if now.Sub(f.at) > uiFinishedFor {
			delete(u.finished, id)
		}
	}
	st := u.assemble(now, u.view.hosts(), ins, migs, flavors)
	if u.state != nil && sameState(u.state, st) {
		return nil
	}
	u.state = st
	u.version++
	close(u.changed)
	u.changed = make(chan struct{})
	return nil
}

// sameState compares two states but for their time.
func sameState(a, b *uiState) bool {
	x, y := *a, *b
	x.Time, y.Time = time.Time{}, time.Time{}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

// assemble builds the admin's state; called with mu held.
func (u *uiHub) assemble(now time.Time, vhs []viewHost, ins []records.Instance, migs []records.Migration, flavors []records.Flavor) *uiState {
	st := &uiState{Time: now, Admin: true, Moves: []uiMove{}, Instances: []uiInstance{}}
	byHost := map[string]viewHost{}
	for _, h := range vhs {
		byHost[h.Name] = h
	}
	names := map[string]records.Instance{}
	onHost := map[string][]uiInstance{}
	for _, in := range ins {
		names[in.UUID] = in
		ui := uiInstance{
			UUID: in.UUID, Name: in.Name, ProjectID: in.ProjectID, Host: in.Host,
			Status: uiStatus(in), TaskState: in.TaskState, Flavor: in.Flavor.Name,
			VCPUs: in.Flavor.VCPUs, RAMMB: in.Flavor.RAMMB, DiskGB: in.Flavor.DiskGB,
		}
		if h, ok := byHost[in.Host]; ok {
			for rc, n := range in.Flavor.Resources() {
				if inv, ok := h.Provider.Inventories[rc]; ok && inv.Capacity() > 0 {
					ui.Share = max(ui.Share, float64(n)/float64(inv.Capacity()))
				}
			}
		}
		st.Instances = append(st.Instances, ui)
		onHost[in.Host] = append(onHost[in.Host], ui)
	}
	outgoing := map[string]int{}
	for _, m := range migs {
		outgoing[m.SourceHost]++
		st.Moves = append(st.Moves, u.move(now, m, names[m.InstanceUUID], false, time.Time{}))
	}
	for _, f := range u.finished {
		st.Moves = append(st.Moves, u.move(now, f.m, names[f.m.InstanceUUID], true, f.at))
	}
	sort.Slice(st.Moves, func(i, j int) bool { return st.Moves[i].ID < st.Moves[j].ID })

	var enabled []viewHost
	imb := &uiImbalance{}
	for _, h := range vhs {
		uh := uiHost{Name: h.Name, Zone: h.Zone, Enabled: h.HasService && !h.Service.Disabled, Up: up(h, now, u.downTime),
			DisabledReason: h.Service.DisabledReason, RunningVMs: h.Record.RunningVMs,
			Resources: map[placement.ResourceClass]uiResource{}, Instances: []string{}}
		uh.Draining = !uh.Enabled && outgoing[h.Name] > 0
		for rc, inv := range h.Provider.Inventories {
			uh.Resources[rc] = uiResource{Total: inv.Total, Reserved: inv.Reserved, AllocationRatio: inv.AllocationRatio,
				Capacity: inv.Capacity(), Used: h.Provider.Usage[rc]}
		}
		for _, rc := range stdClasses {
			if f, ok := fill(h, rc); ok && (f > uh.Fill || uh.FillClass == "") {
				uh.Fill, uh.FillClass = f, rc
			}
		}
		list := onHost[h.Name]
		sort.SliceStable(list, func(i, j int) bool { return list[i].Share > list[j].Share })
		for _, in := range list {
			uh.Instances = append(uh.Instances, in.UUID)
		}
		st.Hosts = append(st.Hosts, uh)
		if uh.Enabled {
			enabled = append(enabled, h)
			imb.EnabledHosts++
			if usageZero(h.Provider.Usage) {
				imb.EmptyHosts++
			}
			if imb.MostLoaded == nil || uh.Fill > imb.MostLoaded.Fill {
				imb.MostLoaded = &uiLoad{Host: uh.Name, Fill: uh.Fill, Class: uh.FillClass}
			}
			if imb.LeastLoaded == nil || uh.Fill < imb.LeastLoaded.Fill {
				imb.LeastLoaded = &uiLoad{Host: uh.Name, Fill: uh.Fill, Class: uh.FillClass}
			}
		}
	}
	imb.CV = imbalance(enabled)
	// The largest flavor that still fits on an enabled, up host.
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
	for _, f := range fl {
		n := 0
		for _, h := range enabled {
			if up(h, now, u.downTime) && fits(h, f.Resources()) {
				n++
			}
		}
		if n > 0 {
			imb.LargestFlavor, imb.FitsOn = f.Name, n
			break
		}
	}
	st.Imbalance = imb
	return st
}

func (u *uiHub) move(now time.Time, m records.Migration, in records.Instance, finished bool, at time.Time) uiMove {
	mv := uiMove{
		ID: m.ID, Kind: m.Type, InstanceUUID: m.InstanceUUID, InstanceName: in.Name, Source: m.SourceHost, Dest: m.DestHost,
		Status: m.Status, Phase: m.Phase, MemoryTotal: m.MemoryTotalBytes, MemoryCopied: m.MemoryProcessedBytes,
		MemoryLeft: m.MemoryRemainingBytes, Started: m.CreatedAt, Finished: finished, Error: m.Error, projectID: in.ProjectID,
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

// forPrincipal is what p may see: everything for an admin; for anyone
// else their project's instances and moves, without host names (as the
// compute API's policy hides OS-EXT-SRV-ATTR:host and the hypervisors
// from non-admins).
func (s *uiState) forPrincipal(p identity.Principal) *uiState {
	out := &uiState{Time: s.Time, Admin: p.IsAdmin(), User: p.UserName, Project: p.ProjectName}
	if p.IsAdmin() {
		out.Hosts, out.Moves, out.Instances, out.Imbalance = s.Hosts, s.Moves, s.Instances, s.Imbalance
		return out
	}
	out.Moves, out.Instances = []uiMove{}, []uiInstance{}
	for _, in := range s.Instances {
		if in.ProjectID == p.ProjectID {
			in.Host, in.Share = "", 0
			out.Instances = append(out.Instances, in)
		}
	}
	for _, m := range s.Moves {
		if m.projectID == p.ProjectID {
			m.Source, m.Dest = "", ""
			out.Moves = append(out.Moves, m)
		}
	}
	return out
}

// current returns the state, its version and the channel closed when it
// changes.
func (u *uiHub) current() (*uiState, uint64, <-chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state, u.version, u.changed
}

func (u *uiHub) subscribe() {
	u.mu.Lock()
	u.subs++
	u.poked = true
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

// serveState answers the current state once (what the stream's first
// event carries).
func (u *uiHub) serveState(w http.ResponseWriter, r *http.Request) {
	p, ok := identity.PrincipalFrom(r.Context())
	if !ok {
		compute.WriteError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	u.subscribe()
	defer u.unsubscribe()
	if err := u.build(r.Context()); err != nil {
		compute.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	st, _, _ := u.current()
	writeJSON(w, http.StatusOK, st.forPrincipal(p))
}

// serveEvents streams the state as server-sent events: an event "state"
// whenever what the caller may see changes, a comment as heartbeat, and
// an event "expired" when the token expires.
func (u *uiHub) serveEvents(w http.ResponseWriter, r *http.Request) {
	p, ok := identity.PrincipalFrom(r.Context())
	if !ok {
		compute.WriteError(w, http.StatusUnauthorized, "The request you have made requires authentication.")
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
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
	var (
		sent    uint64
		lastOut []byte
	)
	for {
		st, ver, ch := u.current()
		if st != nil && ver != sent {
			sent = ver
			view := st.forPrincipal(p)
			cmp := *view
			cmp.Time = time.Time{}
			key, _ := json.Marshal(cmp)
			if !bytes.Equal(key, lastOut) {
				lastOut = key
				data, _ := json.Marshal(view)
				if _, err := fmt.Fprintf(w, "event: state\nid: %d\ndata: %s\n\n", ver, data); err != nil {
					return
				}
				if err := rc.Flush(); err != nil {
					return
				}
			}
		}
		select {
		case <-ch:
		case <-hb.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		case <-expiry:
			fmt.Fprint(w, "event: expired\ndata: {}\n\n")
			_ = rc.Flush()
			return
		case <-r.Context().Done():
			return
		case <-u.done:
			return
		}
	}
}

// uiStatus is the compute API's server status for an instance.
func uiStatus(in records.Instance) string {
	switch in.VMState {
	case records.VMBuilding:
		return "BUILD"
	case records.VMError:
		return "ERROR"
	case records.VMDeleted:
		return "DELETED"
	}
	if in.TaskState == records.TaskMigrating {
		return "MIGRATING"
	}
	return "ACTIVE"
}

func usageZero(r placement.Resources) bool {
	for _, n := range r {
		if n != 0 {
			return false
		}
	}
	return true
}
