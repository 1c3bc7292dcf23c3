package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"keel/internal/clock"
	"keel/internal/placement"
	"keel/internal/store"
)

// Candidate is a host offered to the caller's claim function, with the
// provider generation the view holds (the claim names it so that the store
// refuses it if the host changed meanwhile).
type Candidate struct {
	Host         string
	ProviderUUID string
	Generation   int64
	// Allocations is what to claim, provider UUID → resources: the
	// request's resources on the host's provider, or, when placement's
	// candidate search placed it (granular groups, provider trees,
	// sharing providers), the first candidate of the host's tree, which
	// may name its children and sharing providers. Generations holds
	// the generations the view saw for them (the host's provider, when
	// the claim allocates on it).
	Allocations map[string]placement.Resources
	Generations map[string]int64
}

// ClaimFunc writes the claim for a candidate and returns the provider's new
// generation. A *placement.ConflictError or *placement.CapacityError makes
// the scheduler refresh and move on to the next host; any other error ends
// the decision.
type ClaimFunc func(ctx context.Context, c Candidate) (newGeneration int64, err error)

// Selection is the outcome of a decision.
type Selection struct {
	Host         string
	ProviderUUID string
	Weight       float64
	// Alternates are the next hosts in order, for a caller that wants
	// Nova's alternates.
	Alternates []string
	// Claims counts the claims tried (1 when the first one committed);
	// Conflicts those refused by the store.
	Claims    int
	Conflicts int
	// ViewUsed is the chosen host's usage as the weighers saw it, and
	// AllocUsed its usage from allocations in the view, both before this
	// claim: they differ when the decision was made on a stale record.
	ViewUsed  placement.Resources
	AllocUsed placement.Resources
	// Duration is the decision's time on the scheduler's clock, claims
	// included.
	Duration time.Duration
	// PickSeed is the seed of the host_subset_size pick (0 when there was
	// nothing to pick among): Explain, given it as Request.PickSeed on the
	// same view, names the same host (Explanation.Picked).
	PickSeed uint64
}

// NoValidHostError says no host could take the request, and why.
type NoValidHostError struct {
	Hosts int
	// Rejected counts hosts per rejecting filter (or "ignored", "claim").
	Rejected map[string]int
	// Reason, when set, is why no host was asked (a flavor whose request
	// groups Placement would refuse).
	Reason string
	// Flavor and RequestedHost are the request's (Request.Flavor,
	// Request.RequestedHost): the message names the host and the
	// `keel schedule explain` command that says why, filled in.
	Flavor, RequestedHost string
}

func (e *NoValidHostError) Error() string {
	names := make([]string, 0, len(e.Rejected))
	for n := range e.Rejected {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%d by %s", e.Rejected[n], n))
	}
	if e.Reason != "" {
		return "No valid host was found. " + e.Reason
	}
	msg := fmt.Sprintf("No valid host was found. %d hosts considered", e.Hosts)
	if len(parts) > 0 {
		msg += ", rejected: " + strings.Join(parts, ", ")
	}
	explain := "keel schedule explain"
	if e.Flavor != "" {
		explain += " --flavor " + e.Flavor
	}
	if e.RequestedHost == "" {
		return msg + " (run `" + explain + "` for every host's reason)"
	}
	if e.Rejected[unknownHost] > 0 {
		return fmt.Sprintf("No valid host was found: the requested host %s is no compute host (keel host list shows them)", e.RequestedHost)
	}
	var by []string
	for _, n := range names {
		if n != "ignored" {
			by = append(by, n)
		}
	}
	if len(by) == 0 {
		by = []string{"ignored (it is the instance's own host, or one already tried)"}
	}
	return fmt.Sprintf("%s; the requested host %s was rejected by %s (run `%s --host %s` for why)",
		msg, e.RequestedHost, strings.Join(by, ", "), explain, e.RequestedHost)
}

// unknownHost counts a requested host the view does not know.
const unknownHost = "requested host unknown"

// noValidHost is the error for a request no host passed.
func noValidHost(req *Request, hosts int, rejected map[string]int) *NoValidHostError {
	return &NoValidHostError{Hosts: hosts, Rejected: rejected, Flavor: req.Flavor, RequestedHost: req.RequestedHost}
}

// IsNoValidHost reports whether err is a NoValidHostError.
func IsNoValidHost(err error) bool {
	var e *NoValidHostError
	return errors.As(err, &e)
}

// Scheduler makes decisions on a View. It is safe for concurrent use;
// decisions are serialised (one process decides one request at a time, and
// the store's generations arbitrate between processes).
type Scheduler struct {
	cfg      Config
	view     *View
	clock    clock.Clock
	rnd      *rand.Rand
	filters  []stage
	weighers []weigherEntry

	// scratch buffers reused across decisions (guarded by view.mu)
	cands   []int32
	cands2  []int32
	fast    []boundWeigher
	fast2   []boundWeigher
	ignored []bool
	checks  candidateCheck
	// A decision on the ranked walk allocates nothing of its own past
	// these (the claim's store write and the Selection aside): an
	// allocating decision pays the collector's assists while a
	// collection marks the view (hundreds of MB at 100,000 hosts).
	active []stage
	steps  []filterStep
	pass   filterPass
	marked []int
	live   []boundWeigher
	top    []ranked
	picked []ranked
	chosen []*HostState
	// walks counts the decisions the ranked walk answered (tests check
	// which path a decision took).
	walks   int
	scratch []float64
	totals  []float64
	// onPhase is OnPhase's function (nil: none).
	onPhase func(Phase)
}

// Phase is a part of a decision, as OnPhase reports them.
type Phase uint8

const (
	// PhaseRefresh: the view has caught up with the store's changes.
	PhaseRefresh Phase = iota
	// PhaseRank: the filters, the weighers (the ranked walk, or the full
	// pass) and the host_subset_size pick are done.
	PhaseRank
	// PhaseClaim: one call of the ClaimFunc (the store's write) returned.
	PhaseClaim
	// PhaseApply: the committed claim is in the view (the host's usage,
	// its dense row and its place in the orders, the assumed load).
	PhaseApply
)

// OnPhase has f called as each part of a decision ends, the view's lock
// held, so that a benchmark can time the parts — the refresh, the
// ranking, each claim, its application — on its own clock: the scheduler
// reads none for it. f must not call the scheduler. nil (the default)
// calls nothing.
func (s *Scheduler) OnPhase(f func(Phase)) {
	s.view.mu.Lock()
	defer s.view.mu.Unlock()
	s.onPhase = f
}

// phase reports the end of part p to OnPhase's function.
func (s *Scheduler) phase(p Phase) {
	if s.onPhase != nil {
		s.onPhase(p)
	}
}

// stage is a filter of the pipeline with its registry entry.
type stage struct {
	Filter
	spec *FilterSpec
}

// weigherEntry is a configured weigher.
type weigherEntry struct {
	spec *WeigherSpec
	// slot is the weigher's row in weigherTable: its slot in the dense
	// rows when it reads the host alone (spec.Host), else -1.
	slot int
	// multiplier is the configured one, with the weigher's sign applied.
	multiplier float64
	// pos is the entry's place in the configured order.
	pos int
}

// multiplierFor is the weigher's multiplier for host h: the one its
// aggregates set (with the weigher's sign), or the configured one.
func (we *weigherEntry) multiplierFor(h *HostState) float64 {
	if m, ok := h.multipliers[we.spec.Multiplier.aggregateKey()]; ok {
		if we.spec.Negated {
			return -m
		}
		return m
	}
	return we.multiplier
}

// New assembles the pipeline from the registry: the filters (pipeline:
// the resource check, which rejects the most hosts and is cheap, first;
// then the configured filters in the operator's order, as Nova runs them),
// then the weighers in the configured order.
func New(cfg Config, view *View, clk clock.Clock, rnd *rand.Rand) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	cfg = cfg.Clone()
	s := &Scheduler{cfg: cfg, view: view, clock: clk, rnd: rnd, filters: pipeline(cfg)}
	var metricsMult *float64
	for _, name := range cfg.Weighers {
		if name == metricsWeigherName && len(cfg.Metrics.WeightSetting) == 0 {
			continue // weighs nothing (Nova's default weight_setting)
		}
		k := weigherSlot(name)
		w := &weigherTable[k]
		m := cfg.Option(w.Multiplier.Name)
		if w.Negated {
			m = -m
		}
		slot := k
		switch {
		case k == metricsSlot:
			// A host's value, kept in the dense rows as of the decision's
			// time (dense.metrics).
			metricsMult = &m
		case w.Host == nil:
			slot = -1
		}
		s.weighers = append(s.weighers, weigherEntry{spec: w, slot: slot, multiplier: m, pos: len(s.weighers)})
		if slot >= 0 && m != 0 {
			view.indexWeigher(slot, m, w.FixedMin)
		}
	}
	view.setMetrics(cfg.Metrics, metricsMult)
	return s, nil
}

// prepareMetrics gives the request MetricsWeigher's settings when the
// weigher is configured.
func (s *Scheduler) prepareMetrics(req *Request) {
	req.metrics, req.metricsMult = nil, 0
	for _, we := range s.weighers {
		if we.spec.Name == metricsWeigherName {
			req.metrics, req.metricsMult = &s.cfg.Metrics, we.multiplier
		}
	}
}

// metricsMissing reports whether the decision weighs MetricsWeigher with
// [metrics] required while some host lacks a weighed metric: the
// candidates must then be looked at one by one, as a weighed one fails
// the decision.
func (s *Scheduler) metricsMissing(req *Request) bool {
	m := s.view.dense.metrics
	if m == nil || m.missing == 0 || !metricsWeigher.active(req) {
		return false
	}
	for _, we := range s.weighers {
		if we.slot == metricsSlot {
			return we.multiplier != 0 || s.view.overrides(metricsAggregateKey)
		}
	}
	return false
}

// View returns the scheduler's host view.
func (s *Scheduler) View() *View { return s.view }

// Select refreshes the view, filters and weighs every host, and claims the
// chosen one through claim. A claim the store refuses (a stale generation,
// or a host another scheduler filled: the view was behind) refreshes the
// view and moves on to the next ranked host, as Nova's scheduler moves down
// its weighed list, through all host_subset_size + max_attempts of them. A
// stale view is not the user's failure while a ranked host still fits:
// with several replicas deciding at once, stopping after max_attempts
// refusals ended boots in No valid host with the cloud half empty.
func (s *Scheduler) Select(ctx context.Context, req *Request, claim ClaimFunc) (sel Selection, err error) {
	start := s.clock.Now()
	defer func() { sel.Duration = s.clock.Now().Sub(start) }()
	v := s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.refreshLocked(ctx); err != nil {
		return Selection{}, err
	}
	s.phase(PhaseRefresh)
	hosts := v.snapshot()
	s.prepareMetrics(req)
	req.prepare(s.clock.Now())
	v.dense.refreshMetrics(hosts, req.now)
	if req.queryErr != nil {
		return Selection{}, &NoValidHostError{Hosts: len(hosts), Rejected: map[string]int{"flavor request groups": len(hosts)}, Reason: req.queryErr.Error()}
	}
	s.prepareTree(req)
	active := s.activeFiltersInto(s.active[:0], req)
	s.active = active
	top, rejected := s.rank(hosts, req, active)
	if req.metricErr != nil {
		return Selection{}, req.metricErr
	}
	if len(top) == 0 {
		return Selection{}, noValidHost(req, len(hosts), rejected)
	}
	order, seed := s.pick(top, req.PickSeed)
	sel.PickSeed = seed
	// Hold the hosts themselves: a refresh after a refused claim may
	// reorder or shrink the view's host list.
	chosen := s.chosen[:0]
	for _, r := range order {
		chosen = append(chosen, hosts[r.idx])
	}
	s.chosen = chosen
	s.phase(PhaseRank)

	for i, r := range order {
		h := chosen[i]
		// A host may have changed under an earlier refresh in this loop.
		if i > 0 && !s.passes(h, req, active) {
			continue
		}
		viewUsed, allocUsed := h.WeigherUsed(), h.Used()
		sel.Claims++
		cand := s.candidate(h, req)
		gen, err := claim(ctx, cand)
		s.phase(PhaseClaim)
		if err == nil {
			if req.tree {
				v.consumeTree(h, cand.Allocations, gen)
			} else {
				h.consume(req, gen, v.readsRecords)
				v.dense.sync(h)
			}
			if !v.readsRecords {
				v.assumeLoad(h, req, s.clock.Now())
			}
			sel.Host, sel.ProviderUUID, sel.Weight = h.Name, h.ProviderUUID, r.weight
			sel.ViewUsed, sel.AllocUsed = viewUsed, allocUsed
			for _, alt := range chosen[i+1:] {
				if len(sel.Alternates) >= s.cfg.MaxAttempts-1 {
					break
				}
				sel.Alternates = append(sel.Alternates, alt.Name)
			}
			s.phase(PhaseApply)
			return sel, nil
		}
		// A conflict, a full host or a provider deleted meanwhile: refresh
		// and move on to the next host.
		if !placement.IsConflict(err) && !placement.IsCapacity(err) && !errors.Is(err, store.ErrNotFound) {
			return sel, fmt.Errorf("claiming host %s: %w", h.Name, err)
		}
		sel.Conflicts++
		if err := v.refreshLocked(ctx); err != nil {
			return sel, err
		}
		s.phase(PhaseRefresh)
		if req.tree {
			// Every host's candidate again, on the refreshed usage.
			s.prepareTree(req)
		}
	}
	if rejected == nil {
		rejected = map[string]int{}
	}
	rejected["claim refused"] += sel.Claims
	return sel, noValidHost(req, len(hosts), rejected)
}

// prepareTree decides whether the request goes through placement's
// candidate search — it has granular groups, or some provider is a child
// or shares — and if so finds each host's candidate.
func (s *Scheduler) prepareTree(req *Request) {
	_, flat := req.query.Unnamed()
	req.tree = !flat || s.view.special > 0
	if req.tree {
		req.allocs = s.view.treeAllocations(req.query)
	}
}

// candidate is what the claim of host h for req writes.
func (s *Scheduler) candidate(h *HostState, req *Request) Candidate {
	c := Candidate{Host: h.Name, ProviderUUID: h.ProviderUUID, Generation: h.Generation}
	if req.tree {
		c.Allocations = req.allocs[h]
	} else {
		c.Allocations = map[string]placement.Resources{h.ProviderUUID: req.unnamed.Clone()}
	}
	if _, onHost := c.Allocations[h.ProviderUUID]; onHost {
		c.Generations = map[string]int64{h.ProviderUUID: h.Generation}
	}
	return c
}

func (s *Scheduler) activeFilters(req *Request) []stage {
	return s.activeFiltersInto(make([]stage, 0, len(s.filters)), req)
}

// activeFiltersInto appends the filters active for req to out.
func (s *Scheduler) activeFiltersInto(out []stage, req *Request) []stage {
	for _, f := range s.filters {
		if f.Active(req) {
			out = append(out, f)
		}
	}
	return out
}

func (s *Scheduler) passes(h *HostState, req *Request, active []stage) bool {
	for _, f := range active {
		if !f.Fits(h, req) {
			return false
		}
	}
	return true
}

// boundWeigher is an active weigher whose raw values live in the dense
// rows (raw is its slot); the filter pass gathers its bounds over the
// candidates.
type boundWeigher struct {
	raw      int
	pos      int // weigherEntry.pos
	mult     float64
	fixedMin bool
	lo, hi   float64
}

// weighPlan splits the weighers that contribute to this request into those
// read from the dense rows and the rest.
func (s *Scheduler) weighPlan(req *Request) (fast []boundWeigher, slow []weigherEntry) {
	d := &s.view.dense
	fast = s.fast[:0]
	for _, we := range s.weighers {
		perHost := s.view.overrides(we.spec.Multiplier.aggregateKey())
		switch {
		case (we.multiplier == 0 && !perHost) || !we.spec.active(req):
			// contributes 0 to every host
		case we.slot >= 0 && !perHost:
			if d.nonZero[we.slot] == 0 {
				continue // 0 on every host: lo == hi, contributes 0
			}
			lo := math.Inf(1)
			if we.spec.FixedMin {
				lo = 0
			}
			fast = append(fast, boundWeigher{raw: we.slot, pos: we.pos, mult: we.multiplier, fixedMin: we.spec.FixedMin, lo: lo, hi: math.Inf(-1)})
		default:
			slow = append(slow, we)
		}
	}
	s.fast = fast
	return fast, slow
}

// parallelMin is the host count from which a decision splits its filter
// pass across two goroutines.
const parallelMin = 4096

// filter returns the indexes (into hosts) of the hosts that pass every
// active filter, in name order, and the count of rejections per filter;
// it also narrows each fast weigher's bounds to the candidates' values.
// A filter with a row form (FilterSpec.row: ResourceFilter, ComputeFilter)
// reads the view's dense rows; any other is asked host by host.
func (s *Scheduler) filter(hosts []*HostState, req *Request, active []stage, fast []boundWeigher) ([]int32, map[string]int) {
	rejected := map[string]int{}
	n := len(hosts)
	lo, hi := 0, n
	if req.RequestedHost != "" {
		h := s.view.byName[req.RequestedHost]
		if h == nil {
			rejected[unknownHost] = 1
			return nil, rejected
		}
		lo, hi = h.idx, h.idx+1
		rejected["ignored"] = n - 1
	}
	p, steps := s.prepareFilters(hosts, req, active)
	defer s.clearIgnored()

	var cands []int32
	var rej []int
	var ignored int
	if hi-lo < parallelMin {
		cands, rej, ignored = p.run(lo, hi, steps, fast, s.cands[:0])
	} else {
		mid := lo + (hi-lo)/2
		fast2 := append(s.fast2[:0], fast...)
		steps2 := append([]filterStep(nil), steps...)
		var cands2 []int32
		var rej2 []int
		var ign2 int
		done := make(chan struct{})
		go func() {
			cands2, rej2, ign2 = p.run(mid, hi, steps2, fast2, s.cands2[:0])
			close(done)
		}()
		cands, rej, ignored = p.run(lo, mid, steps, fast, s.cands[:0])
		<-done
		s.cands2, s.fast2 = cands2, fast2
		cands = append(cands, cands2...)
		for k := range rej {
			rej[k] += rej2[k]
		}
		ignored += ign2
		for j := range fast {
			fast[j].lo = math.Min(fast[j].lo, fast2[j].lo)
			fast[j].hi = math.Max(fast[j].hi, fast2[j].hi)
		}
	}
	for k, st := range steps {
		if rej[k] > 0 {
			rejected[st.f.Name()] += rej[k]
		}
	}
	if ignored > 0 {
		rejected["ignored"] += ignored
	}
	s.cands = cands
	return cands, rejected
}

// prepareFilters sets up one decision's filter pass: the ignored hosts
// marked, the active filters as steps. clearIgnored clears the marks.
func (s *Scheduler) prepareFilters(hosts []*HostState, req *Request, active []stage) (*filterPass, []filterStep) {
	n := len(hosts)
	if cap(s.ignored) < n {
		s.ignored = make([]bool, n)
	}
	ign := s.ignored[:n]
	marked := s.marked[:0]
	for _, name := range req.IgnoreHosts {
		if h := s.view.byName[name]; h != nil && h.idx >= 0 && h.idx < n && !ign[h.idx] {
			ign[h.idx] = true
			marked = append(marked, h.idx)
		}
	}
	s.marked = marked
	steps := s.steps[:0]
	for _, f := range active {
		steps = append(steps, filterStep{f: f.Filter, row: f.spec.row, down: int64(s.cfg.ServiceDownTime)})
	}
	s.steps = steps
	s.pass = filterPass{s: s, hosts: hosts, req: req, ign: ign, now: req.now.UnixNano()}
	return &s.pass, steps
}

// clearIgnored clears the marks prepareFilters set.
func (s *Scheduler) clearIgnored() {
	for _, i := range s.marked {
		s.ignored[i] = false
	}
	s.marked = s.marked[:0]
}

// filterStep is one active filter in the hot loop: how it reads a row,
// and service_down_time for rowService.
type filterStep struct {
	f    Filter
	row  rowForm
	down int64
}

// filterPass is one decision's filter pass over a range of hosts.
type filterPass struct {
	s     *Scheduler
	hosts []*HostState
	req   *Request
	ign   []bool
	now   int64
}

// check returns -1 if host i passes, -2 if the request ignores it, or the
// index of the step that rejected it.
func (p *filterPass) check(i int, steps []filterStep) int {
	if p.ign[i] {
		return -2
	}
	if p.req.Force {
		return -1
	}
	row := &p.s.view.dense.rows[i]
	req := p.req
	for k := range steps {
		st := &steps[k]
		var ok bool
		switch st.row {
		case rowService:
			ok = row.eligible && heardFrom(p.now-row.lastSeen, st.down)
		case rowResources:
			if req.tree {
				ok = req.allocs[p.hosts[i]] != nil
			} else {
				ok = row.fits(req) && ((req.other == nil && req.traits.Empty()) || st.f.Fits(p.hosts[i], req))
			}
		default:
			ok = st.f.Fits(p.hosts[i], req)
		}
		if !ok {
			return k
		}
	}
	return -1
}

func (p *filterPass) run(lo, hi int, steps []filterStep, fast []boundWeigher, cands []int32) ([]int32, []int, int) {
	rows := p.s.view.dense.rows
	rej := make([]int, len(steps))
	ignored := 0
	// Bounds in locals (not the slice) so the hot loop keeps them close.
	var idx [numWeighers]int
	var blo, bhi [numWeighers]float64
	nf := len(fast)
	for j := range fast {
		idx[j], blo[j], bhi[j] = fast[j].raw, fast[j].lo, fast[j].hi
	}
	for i := lo; i < hi; i++ {
		switch k := p.check(i, steps); k {
		case -1:
		case -2:
			ignored++
			continue
		default:
			rej[k]++
			continue
		}
		row := &rows[i]
		cands = append(cands, int32(i))
		for j := 0; j < nf; j++ {
			v := row.raw[idx[j]]
			if v < blo[j] {
				blo[j] = v
			}
			if v > bhi[j] {
				bhi[j] = v
			}
		}
	}
	for j := range fast {
		fast[j].lo, fast[j].hi = blo[j], bhi[j]
	}
	return cands, rej, ignored
}

// resetTotals sizes s.totals for n candidates, all 0, and reports whether
// they are to be weighed at all (Nova does not weigh a single host).
func (s *Scheduler) resetTotals(n int) bool {
	s.totals = grow(s.totals, n)
	clear(s.totals)
	return n > 1
}

// total sets s.totals[k] to candidate k's total weight: the fast weighers
// from the dense rows with the bounds the filter pass gathered, then the
// request-dependent ones.
func (s *Scheduler) total(hosts []*HostState, cands []int32, req *Request, fast []boundWeigher, slow []weigherEntry) {
	if !s.resetTotals(len(cands)) {
		return
	}
	live, scale := liveWeighers(nil, fast)
	rows := s.view.dense.rows
	if len(slow) == 0 {
		for k, i := range cands {
			s.totals[k] = weightOf(&rows[i], live, &scale)
		}
		return
	}
	// Both kinds: every term in the configured order, as Explain adds
	// them, so that both paths give the same sums to the last bit.
	li, si := 0, 0
	for pos := range s.weighers {
		switch {
		case li < len(live) && live[li].pos == pos:
			w, sc := live[li], scale[li]
			for k, i := range cands {
				s.totals[k] += (rows[i].raw[w.raw] - w.lo) * sc
			}
			li++
		case si < len(slow) && slow[si].pos == pos:
			s.addWeigher(hosts, cands, req, slow[si], false, nil)
			si++
		}
	}
}

// weigh sets s.totals[k] to candidate k's total weight, weigher by
// weigher, every raw value read from the HostState through the registry
// (Explain's path, the reference: rec receives every raw and normalised
// value).
func (s *Scheduler) weigh(hosts []*HostState, cands []int32, req *Request, rec func(k int, w string, raw, norm, mult float64)) {
	if !s.resetTotals(len(cands)) {
		return
	}
	for _, we := range s.weighers {
		if ((we.multiplier == 0 && !s.view.overrides(we.spec.Multiplier.aggregateKey())) || !we.spec.active(req)) && rec == nil {
			continue // contributes 0 to every host
		}
		s.addWeigher(hosts, cands, req, we, true, rec)
	}
}

// addWeigher adds one weigher's normalised, multiplied values to s.totals.
// The raw values come from the dense rows for a host-only weigher, unless
// reference is set (Explain), which reads every one from the HostState.
func (s *Scheduler) addWeigher(hosts []*HostState, cands []int32, req *Request, we weigherEntry, reference bool, rec func(k int, w string, raw, norm, mult float64)) {
	s.scratch = grow(s.scratch, len(cands))
	raw := s.scratch
	rows := s.view.dense.rows
	for k, i := range cands {
		if we.slot >= 0 && !reference {
			raw[k] = rows[i].raw[we.slot]
		} else {
			raw[k] = we.spec.raw(hosts[i], req)
		}
	}
	lo, hi := bounds(raw, we.spec.FixedMin)
	perHost := s.view.overrides(we.spec.Multiplier.aggregateKey())
	scale := 0.0
	if hi > lo {
		scale = we.multiplier / (hi - lo) // as in total, so both paths add the same terms
	}
	for k, i := range cands {
		mult, norm := we.multiplier, 0.0
		if perHost {
			// Some host's aggregates set this multiplier: Nova multiplies
			// each host's normalised value by that host's multiplier.
			mult = we.multiplierFor(hosts[i])
			norm = normalized(raw[k], lo, hi)
			if hi > lo {
				s.totals[k] += mult * norm
			}
		} else if hi > lo {
			norm = normalized(raw[k], lo, hi)
			s.totals[k] += (raw[k] - lo) * scale
		}
		if rec != nil {
			rec(k, we.spec.Name, raw[k], norm, mult)
		}
	}
}

func grow(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}

// rankedMin is the host count from which a decision walks the rank lists
// (thresholdTop) instead of weighing every candidate.
const rankedMin = 512

// rank returns the hosts to try, best first: as many as host_subset_size
// plus max_attempts. Equal weights keep name order unless
// shuffle_best_same_weighed_hosts is set. When it finds none it also says
// how many hosts each filter rejected.
func (s *Scheduler) rank(hosts []*HostState, req *Request, active []stage) ([]ranked, map[string]int) {
	k := s.cfg.HostSubsetSize + s.cfg.MaxAttempts
	fast, slow := s.weighPlan(req)
	missing := s.metricsMissing(req)
	if len(hosts) >= rankedMin && req.RequestedHost == "" && !req.Force && len(slow) == 0 && !missing && !s.cfg.ShuffleBestSameWeighedHosts {
		p, steps := s.prepareFilters(hosts, req, active)
		check := s.newCheck(p, steps)
		top, ok := s.thresholdTop(check, fast, k)
		s.clearIgnored()
		if ok {
			s.walks++
			return top, nil
		}
		fast, _ = s.weighPlan(req) // bounds were narrowed: start again
	}
	cands, rejected := s.filter(hosts, req, active, fast)
	if len(cands) == 0 {
		return nil, rejected
	}
	if missing && len(cands) > 1 { // Nova weighs no single host
		rows, m := s.view.dense.rows, s.view.dense.metrics
		for _, i := range cands {
			if rows[i].metricMissing {
				_, name := metricsValue(hosts[i], &m.cfg, m.mult, m.asOf)
				req.metricErr = metricMissingError(hosts[i].Name, name)
				return nil, rejected
			}
		}
	}
	s.total(hosts, cands, req, fast, slow)
	w := s.totals[:len(cands)]
	idx := topK(w, k)
	if s.cfg.ShuffleBestSameWeighedHosts {
		best := w[idx[0]]
		var ties []int
		for i, x := range w {
			if x == best {
				ties = append(ties, i)
			}
		}
		s.rnd.Shuffle(len(ties), func(i, j int) { ties[i], ties[j] = ties[j], ties[i] })
		if len(ties) >= k {
			idx = ties[:k]
		} else {
			idx = append(ties, idx[len(ties):]...)
		}
	}
	top := make([]ranked, len(idx))
	for i, c := range idx {
		top[i] = ranked{idx: cands[c], weight: w[c]}
	}
	return top, rejected
}

// pick moves the host chosen at random among the first host_subset_size
// to the front; the others keep their order. The choice is pickIndex of
// the request's seed, or of one drawn from the scheduler's source when the
// request has none; it returns the seed (0 when there was no choice).
func (s *Scheduler) pick(top []ranked, seed uint64) ([]ranked, uint64) {
	subset := min(s.cfg.HostSubsetSize, len(top))
	p := 0
	if subset > 1 {
		if seed == 0 {
			seed = s.rnd.Uint64()
		}
		p = pickIndex(seed, subset)
	} else {
		seed = 0
	}
	out := append(s.picked[:0], top[p])
	out = append(out, top[:p]...)
	out = append(out, top[p+1:]...)
	s.picked = out
	return out, seed
}

// pickIndex is the host_subset_size pick: the position, among the first
// subset candidates, that seed chooses. It is what math/rand/v2's
// IntN(subset) returns when the source's next value is seed (but for
// IntN's rejection of a few values, with a chance below subset/2⁶⁴), so
// drawing the seed from the scheduler's source makes the picks it always
// made, and the simulator's figures stay put.
func pickIndex(seed uint64, subset int) int {
	n := uint64(subset)
	if n&(n-1) == 0 {
		return int(seed & (n - 1))
	}
	hi, _ := bits.Mul64(seed, n)
	return int(hi)
}

// topK returns the indexes of the k largest values, largest first, lower
// index first among equals.
func topK(w []float64, k int) []int {
	if k > len(w) {
		k = len(w)
	}
	top := make([]int, 0, k+1)
	for i, x := range w {
		if len(top) == k && x <= w[top[k-1]] {
			continue
		}
		// insert after every element with a weight ≥ x (keeps index order on ties)
		j := len(top)
		for j > 0 && w[top[j-1]] < x {
			j--
		}
		top = append(top, 0)
		copy(top[j+1:], top[j:])
		top[j] = i
		if len(top) > k {
			top = top[:k]
		}
	}
	return top
}
