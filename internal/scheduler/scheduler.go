package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"keel/internal/clock"
	"keel/internal/placement"
)

// Candidate is a host offered to the caller's claim function, with the
// provider generation the view holds (the claim names it so that the store
// refuses it if the host changed meanwhile).
type Candidate struct {
	Host         string
	ProviderUUID string
	Generation   int64
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
}

// NoValidHostError says no host could take the request, and why.
type NoValidHostError struct {
	Hosts int
	// Rejected counts hosts per rejecting filter (or "ignored", "claim").
	Rejected map[string]int
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
	msg := fmt.Sprintf("No valid host was found. %d hosts considered", e.Hosts)
	if len(parts) > 0 {
		msg += ", rejected: " + strings.Join(parts, ", ")
	}
	return msg + " (run `keel schedule explain` for every host's reason)"
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
	filters  []Filter
	weighers []weigherEntry

	// scratch buffers reused across decisions (guarded by view.mu)
	cands          []*HostState
	cands2         []*HostState
	activeWeighers []weigherEntry
	raw            []float64
	norm           []float64
	totals         []float64
}

// New assembles the pipeline. The resource check comes first because it
// rejects the most hosts and is cheap; then the configured filters in the
// operator's order (as Nova runs them).
func New(cfg Config, view *View, clk clock.Clock, rnd *rand.Rand) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	s := &Scheduler{cfg: cfg, view: view, clock: clk, rnd: rnd}
	s.filters = append(s.filters, resourceFilter{})
	for _, name := range cfg.EnabledFilters {
		if name == "ResourceFilter" {
			continue
		}
		s.filters = append(s.filters, newFilter(name, cfg))
	}
	for _, name := range cfg.Weighers {
		w, m := newWeigher(name, cfg)
		s.weighers = append(s.weighers, weigherEntry{w: w, multiplier: m})
	}
	return s, nil
}

// View returns the scheduler's host view.
func (s *Scheduler) View() *View { return s.view }

// Select refreshes the view, filters and weighs every host, and claims the
// chosen one through claim, moving on to the next host on a conflict, up to
// max_attempts claims.
func (s *Scheduler) Select(ctx context.Context, req *Request, claim ClaimFunc) (Selection, error) {
	v := s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.refreshLocked(ctx); err != nil {
		return Selection{}, err
	}
	hosts := v.snapshot()
	req.prepare(s.clock.Now())
	active := s.activeFilters(req)
	cands, rejected := s.filter(hosts, req, active)
	if len(cands) == 0 {
		return Selection{}, &NoValidHostError{Hosts: len(hosts), Rejected: rejected}
	}
	s.weigh(cands, req, nil)
	order := s.order(cands)

	sel := Selection{}
	for i, idx := range order {
		h := cands[idx]
		if sel.Claims >= s.cfg.MaxAttempts {
			break
		}
		// A host may have changed under an earlier refresh in this loop.
		if i > 0 && !s.passes(h, req, active) {
			continue
		}
		viewUsed, allocUsed := h.WeigherUsed(), h.Used()
		sel.Claims++
		gen, err := claim(ctx, Candidate{Host: h.Name, ProviderUUID: h.ProviderUUID, Generation: h.Generation})
		if err == nil {
			h.consume(req, gen, v.readsRecords)
			sel.Host, sel.ProviderUUID, sel.Weight = h.Name, h.ProviderUUID, s.totals[idx]
			sel.ViewUsed, sel.AllocUsed = viewUsed, allocUsed
			for _, alt := range order[i+1:] {
				if len(sel.Alternates) >= s.cfg.MaxAttempts-1 {
					break
				}
				sel.Alternates = append(sel.Alternates, cands[alt].Name)
			}
			return sel, nil
		}
		if !placement.IsConflict(err) && !placement.IsCapacity(err) {
			return sel, fmt.Errorf("claiming host %s: %w", h.Name, err)
		}
		sel.Conflicts++
		if err := v.refreshLocked(ctx); err != nil {
			return sel, err
		}
	}
	rejected["claim refused"] += sel.Claims
	return sel, &NoValidHostError{Hosts: len(hosts), Rejected: rejected}
}

func (s *Scheduler) activeFilters(req *Request) []Filter {
	out := make([]Filter, 0, len(s.filters))
	for _, f := range s.filters {
		if f.Active(req) {
			out = append(out, f)
		}
	}
	return out
}

func (s *Scheduler) passes(h *HostState, req *Request, active []Filter) bool {
	for _, f := range active {
		if !f.Fits(h, req) {
			return false
		}
	}
	return true
}

// parallelMin is the host count from which a decision splits its filter
// and weigher passes across two goroutines.
const parallelMin = 2048

// filter returns the hosts that pass every active filter, in name order,
// and the count of rejections per filter.
func (s *Scheduler) filter(hosts []*HostState, req *Request, active []Filter) ([]*HostState, map[string]int) {
	rejected := map[string]int{}
	if len(hosts) < parallelMin {
		s.cands = filterRange(hosts, req, active, s.cands[:0], rejected)
		return s.cands, rejected
	}
	half := len(hosts) / 2
	rej2 := map[string]int{}
	var second []*HostState
	done := make(chan struct{})
	go func() {
		second = filterRange(hosts[half:], req, active, s.cands2[:0], rej2)
		close(done)
	}()
	first := filterRange(hosts[:half], req, active, s.cands[:0], rejected)
	<-done
	s.cands2 = second
	s.cands = append(first, second...)
	for k, n := range rej2 {
		rejected[k] += n
	}
	return s.cands, rejected
}

func filterRange(hosts []*HostState, req *Request, active []Filter, out []*HostState, rejected map[string]int) []*HostState {
	for _, h := range hosts {
		if req.ignored(h.Name) {
			rejected["ignored"]++
			continue
		}
		if req.Force && req.RequestedHost == h.Name {
			out = append(out, h)
			continue
		}
		ok := true
		for _, f := range active {
			if !f.Fits(h, req) {
				rejected[f.Name()]++
				ok = false
				break
			}
		}
		if ok {
			out = append(out, h)
		}
	}
	return out
}

// weigh sets s.totals[i] to candidate i's total weight. If rec is not nil
// it receives every weigher's raw and normalised value per candidate.
func (s *Scheduler) weigh(cands []*HostState, req *Request, rec func(i int, w string, raw, norm, mult float64)) {
	n := len(cands)
	s.norm = grow(s.norm, n)
	s.totals = grow(s.totals, n)
	for i := range s.totals {
		s.totals[i] = 0
	}
	if n <= 1 { // Nova does not weigh a single host
		return
	}
	ws := s.activeWeighers[:0]
	for _, we := range s.weighers {
		if (we.multiplier != 0 && we.w.Active(req)) || rec != nil {
			ws = append(ws, we)
		}
	}
	s.activeWeighers = ws
	// Raw values for every weigher in one pass over the hosts (each host's
	// state is read once), then normalise and sum per weigher.
	s.raw = grow(s.raw, n*len(ws))
	rawRange := func(lo, hi int) {
		for j, we := range ws {
			we.w.RawAll(cands[lo:hi], req, s.raw[j*n+lo:j*n+hi])
		}
	}
	if n < parallelMin {
		rawRange(0, n)
	} else {
		done := make(chan struct{})
		go func() { rawRange(n/2, n); close(done) }()
		rawRange(0, n/2)
		<-done
	}
	for j, we := range ws {
		raw := s.raw[j*n : (j+1)*n]
		normalize(raw, s.norm, we.w.FixedMin())
		for i := range cands {
			s.totals[i] += we.multiplier * s.norm[i]
			if rec != nil {
				rec(i, we.w.Name(), raw[i], s.norm[i], we.multiplier)
			}
		}
	}
}

func grow(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}

// order returns the hosts to try, first the one picked at random among the
// best host_subset_size, then the rest best first. Only as many as can be
// tried are ranked (a partial selection, not a full sort). Candidates are
// in name order, so equal weights keep name order unless
// shuffle_best_same_weighed_hosts is set.
func (s *Scheduler) order(cands []*HostState) []int {
	k := s.cfg.HostSubsetSize + s.cfg.MaxAttempts
	w := s.totals[:len(cands)]
	top := topK(w, k)

	if s.cfg.ShuffleBestSameWeighedHosts && len(top) > 0 {
		best := w[top[0]]
		var ties []int
		for i, x := range w {
			if x == best {
				ties = append(ties, i)
			}
		}
		s.rnd.Shuffle(len(ties), func(i, j int) { ties[i], ties[j] = ties[j], ties[i] })
		if len(ties) >= k {
			top = ties[:k]
		} else {
			top = append(ties, top[len(ties):]...)
		}
	}
	subset := min(s.cfg.HostSubsetSize, len(top))
	pick := 0
	if subset > 1 {
		pick = s.rnd.IntN(subset)
	}
	out := make([]int, 0, len(top))
	out = append(out, top[pick])
	for i, idx := range top {
		if i != pick {
			out = append(out, idx)
		}
	}
	return out
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
