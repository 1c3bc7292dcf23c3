package rebalance

import (
	"fmt"
	"math"
	"slices"

	"github.com/tidwall/btree"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
)

// Move is one live migration of a plan.
type Move struct {
	Instance    string `json:"instance"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
	// RAMMB is what the copy moves.
	RAMMB int64 `json:"ram_mb"`
	// Before and After are the CV before and after this move (After <
	// Before); Gain is their difference.
	Before float64 `json:"cv_before"`
	After  float64 `json:"cv_after"`
	Gain   float64 `json:"gain"`
	// Load is the two hosts' values before and after the move, under
	// MetricMeasured (nil under the claims' metrics, whose usage the plan
	// table shows).
	Load *MoveLoad `json:"load,omitempty"`
}

// MoveLoad is a move's source and destination measured use before and
// after it, the instance's measured use moved with it: the share of their
// CPUs measured busy, and of their memory resident in guests. The plan
// balances the larger of the two on each host.
type MoveLoad struct {
	SourceBefore       float64 `json:"source_before"`
	SourceAfter        float64 `json:"source_after"`
	DestBefore         float64 `json:"dest_before"`
	DestAfter          float64 `json:"dest_after"`
	SourceMemoryBefore float64 `json:"source_memory_before"`
	SourceMemoryAfter  float64 `json:"source_memory_after"`
	DestMemoryBefore   float64 `json:"dest_memory_before"`
	DestMemoryAfter    float64 `json:"dest_memory_after"`
}

// share is the host's usage of dimension k over its capacity (0 without
// capacity).
func (h *host) share(k int) float64 {
	if h.cap[k] <= 0 {
		return 0
	}
	return h.used[k] / h.cap[k]
}

// Plan is the planner's answer.
type Plan struct {
	Metric Metric `json:"metric"`
	// Before and After are the CV before the first and after the last move.
	Before float64 `json:"cv_before"`
	After  float64 `json:"cv_after"`
	// Hosts is how many hosts the CV is over (enabled, not excluded, with
	// capacity of the metric's class).
	Hosts int    `json:"hosts"`
	Moves []Move `json:"moves"`
	// Stopped says why planning ended.
	Stopped string `json:"stopped"`
}

// Planner plans rebalances under one set of options.
type Planner struct {
	opts    Options
	filters *scheduler.Filters
	exclude map[string]bool
}

// New checks the options and builds the scheduler's filter pipeline they
// name.
func New(opts Options) (*Planner, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("rebalance options: %w", err)
	}
	f, err := scheduler.NewFilters(o.Scheduler)
	if err != nil {
		return nil, fmt.Errorf("rebalance options: %w", err)
	}
	p := &Planner{opts: o, filters: f, exclude: map[string]bool{}}
	for _, h := range o.Exclude {
		p.exclude[h] = true
	}
	return p, nil
}

// How far each step looks: the most loaded sources (more if none of them
// has a move), and per instance the least loaded destinations that pass
// the filters, scanning at most destScan hosts for them.
const (
	sourcesPerStep = 6
	destsPerMove   = 6
	destScan       = 512
)

// Plan plans the moves for c.
func (p *Planner) Plan(c Cloud) (Plan, error) {
	st, err := p.load(c)
	if err != nil {
		return Plan{}, err
	}
	o := p.opts
	cv := st.cv()
	plan := Plan{Metric: o.Metric, Before: cv, After: cv, Hosts: st.n, Moves: []Move{}}
	if cv <= o.Threshold {
		plan.Stopped = fmt.Sprintf("CV %.4f is not above the threshold %.4f: nothing to do", cv, o.Threshold)
		return plan, nil
	}
	for {
		if cv < o.Threshold/2 {
			plan.Stopped = fmt.Sprintf("balanced: CV %.4f is below half the threshold (%.4f)", cv, o.Threshold/2)
			break
		}
		if o.MaxMoves > 0 && len(plan.Moves) >= o.MaxMoves {
			plan.Stopped = fmt.Sprintf("max moves (%d) reached at CV %.4f", o.MaxMoves, cv)
			break
		}
		m, ok := st.best(p)
		if !ok {
			plan.Stopped = fmt.Sprintf("no move lowers the CV %.4f by at least %.2g", cv, st.minGain)
			break
		}
		src, dst := &st.hosts[m.from], &st.hosts[m.to]
		load := MoveLoad{SourceBefore: src.share(dimMeasured), DestBefore: dst.share(dimMeasured),
			SourceMemoryBefore: src.share(dimMeasuredMem), DestMemoryBefore: dst.share(dimMeasuredMem)}
		st.apply(m)
		load.SourceAfter, load.DestAfter = src.share(dimMeasured), dst.share(dimMeasured)
		load.SourceMemoryAfter, load.DestMemoryAfter = src.share(dimMeasuredMem), dst.share(dimMeasuredMem)
		if len(plan.Moves)%256 == 255 {
			st.resum() // keep rounding from accumulating
		}
		after := st.cv()
		if !(after < cv) { // never worse, whatever the rounding said
			st.undo(m)
			plan.Stopped = fmt.Sprintf("no move lowers the CV %.4f", cv)
			break
		}
		in := &st.insts[m.inst]
		mv := Move{Instance: in.uuid, Source: st.hosts[m.from].name, Destination: st.hosts[m.to].name,
			RAMMB: in.ram, Before: cv, After: after, Gain: cv - after}
		if o.Metric == MetricMeasured {
			mv.Load = &load
		}
		plan.Moves = append(plan.Moves, mv)
		cv = after
	}
	plan.After = cv
	return plan, nil
}

// Imbalance is the CV of c's normalised usage of metric over its enabled
// hosts not in exclude, and how many hosts that is.
func Imbalance(c Cloud, metric Metric, exclude []string) (float64, int, error) {
	p, err := New(Options{Metric: metric, Exclude: exclude})
	if err != nil {
		return 0, 0, err
	}
	st, err := p.load(c)
	if err != nil {
		return 0, 0, err
	}
	return st.cv(), st.n, nil
}

// state is the planner's what-if picture, changed move by move.
type state struct {
	metric Metric
	hosts  []host
	insts  []inst
	byName map[string]int32
	byUUID map[string]int32
	groups map[string]*group
	// n, sum and sq are the count, sum and sum of squares of the counted
	// hosts' values; order holds the counted hosts by value.
	n       int
	sum, sq float64
	order   *btree.BTreeG[key]
	cands   []cand // scratch
	seed    uint64
	minGain float64
	check   func(in *inst) *scheduler.FilterCheck
}

// The dimensions of a host's capacity and usage and an instance's amount:
// the three classes (classes' order), then measured CPU (dimMeasured) and
// measured memory (dimMeasuredMem: the host's as its kernel reports it,
// else its guests' resident memory; an instance's, its resident memory).
const (
	dims           = 5
	dimMeasured    = 3
	dimMeasuredMem = 4
)

type host struct {
	name    string
	hs      *scheduler.HostState
	cap     [dims]float64
	used    [dims]float64
	counted bool
	v       float64
	insts   []int32 // movable instances, by UUID
}

type inst struct {
	uuid  string
	in    *Instance
	host  int32
	res   placement.Resources
	amt   [dims]float64
	ram   int64
	moved bool
	shape shape
}

// shape groups instances whose moves are the same to the filters and the
// CV: same resources and flavor, same zone, no group, no hints (unique
// otherwise).
type shape struct {
	flavor string
	zone   string
	amt    [dims]float64
	uuid   string // set when the instance is unlike any other
}

type group struct {
	policy  string
	max     int
	members map[string]int // host name → members there
}

type key struct {
	v   float64
	idx int32
}

func keyLess(a, b key) bool {
	if a.v != b.v {
		return a.v < b.v
	}
	return a.idx < b.idx
}

var classes = [3]placement.ResourceClass{placement.VCPU, placement.MemoryMB, placement.DiskGB}

// load builds the state from the cloud.
func (p *Planner) load(c Cloud) (*state, error) {
	o := p.opts
	st := &state{metric: o.Metric, byName: make(map[string]int32, len(c.Hosts)), byUUID: make(map[string]int32, len(c.Instances)),
		groups: map[string]*group{}, seed: o.Seed, minGain: o.MinGain,
		order: btree.NewBTreeGOptions(keyLess, btree.Options{NoLocks: true, Degree: 64})}
	// Hosts in name order, whatever the input's: the order ties fall in.
	hosts := make([]*Host, len(c.Hosts))
	for i := range c.Hosts {
		hosts[i] = &c.Hosts[i]
	}
	slices.SortFunc(hosts, func(a, b *Host) int { return compareStr(a.Name, b.Name) })
	st.hosts = make([]host, len(hosts))
	for i, h := range hosts {
		if _, dup := st.byName[h.Name]; dup {
			return nil, fmt.Errorf("host %s listed twice", h.Name)
		}
		st.byName[h.Name] = int32(i)
		st.hosts[i].name = h.Name
	}
	for _, g := range c.Groups {
		if g.Policy == "affinity" || g.Policy == "anti-affinity" {
			st.groups[g.UUID] = &group{policy: g.Policy, max: g.MaxServerPerHost, members: map[string]int{}}
		}
	}
	st.insts = make([]inst, len(c.Instances))
	sumUsed := make([]placement.Resources, len(hosts))
	for i := range c.Instances {
		in := &c.Instances[i]
		hi, ok := st.byName[in.Host]
		if !ok {
			return nil, fmt.Errorf("instance %s is on host %q, which the cloud does not list", in.UUID, in.Host)
		}
		if _, dup := st.byUUID[in.UUID]; dup {
			return nil, fmt.Errorf("instance %s listed twice", in.UUID)
		}
		st.byUUID[in.UUID] = int32(i)
		res := in.Flavor.Resources()
		x := &st.insts[i]
		*x = inst{uuid: in.UUID, in: in, host: hi, res: res, ram: in.Flavor.RAMMB}
		for k, rc := range classes {
			x.amt[k] = float64(res[rc])
		}
		x.amt[dimMeasured] = in.BusyCPUs
		x.amt[dimMeasuredMem] = float64(in.ResidentMB)
		x.shape = shape{flavor: in.Flavor.ID + "/" + in.Flavor.Name, zone: in.Zone, amt: x.amt}
		if in.Group != "" || in.SameHost != nil || in.DifferentHost != nil || len(in.Flavor.ExtraSpecs) > 0 {
			x.shape.uuid = in.UUID
		}
		if g := st.groups[in.Group]; g != nil {
			g.members[in.Host]++
		}
		if sumUsed[hi] == nil {
			sumUsed[hi] = placement.Resources{}
		}
		sumUsed[hi].Add(res)
		cool := false
		if t, ok := o.MovedAt[in.UUID]; ok && o.Cooldown > 0 && o.Now.Sub(t) < o.Cooldown {
			cool = true
		}
		unmeasured := o.Metric == MetricMeasured && !in.HasBusy // what moving it would change is unknown
		if !in.Pinned && !cool && !unmeasured {
			st.hosts[hi].insts = append(st.hosts[hi].insts, int32(i))
		}
	}
	for i, h := range hosts {
		x := &st.hosts[i]
		used := h.Used
		if used == nil {
			used = sumUsed[i]
		}
		seen := h.LastSeenUp
		if seen.IsZero() {
			seen = o.Now
		}
		zone := h.Zone
		if zone == "" {
			zone = "nova"
		}
		x.hs = scheduler.NewHostState(scheduler.HostInput{Name: h.Name, ProviderUUID: h.ProviderUUID, Inventories: h.Inventories,
			Used: used, Traits: h.Traits, Aggregates: h.Aggregates, Record: h.Record,
			Service: &records.Service{Host: h.Name, Disabled: h.Disabled, ForcedDown: h.ForcedDown, LastSeenUp: seen, Zone: zone}})
		for k, rc := range classes {
			if inv, ok := h.Inventories[rc]; ok {
				x.cap[k] = float64(inv.Capacity())
			}
			x.used[k] = float64(used[rc])
		}
		if m := h.Measured; m != nil && (o.MaxAge == 0 || o.Now.Sub(m.At) <= o.MaxAge) {
			x.cap[dimMeasured] = float64(h.Inventories[placement.VCPU].Total)
			x.used[dimMeasured] = m.CPUPercent * x.cap[dimMeasured]
			x.cap[dimMeasuredMem] = float64(h.Inventories[placement.MemoryMB].Total)
			if m.MemoryTotalMB > 0 {
				x.cap[dimMeasuredMem] = float64(m.MemoryTotalMB)
			}
			x.used[dimMeasuredMem] = float64(m.MemoryMB)
		}
		x.counted = !h.Disabled && !h.ForcedDown && !p.exclude[h.Name] && st.hasCapacity(x)
		slices.SortFunc(x.insts, func(a, b int32) int { return compareStr(st.insts[a].uuid, st.insts[b].uuid) })
		if x.counted {
			x.v = st.value(x, &x.used)
			st.n++
			st.order.Load(key{x.v, int32(i)})
		}
	}
	st.resum()
	if st.minGain == 0 && st.n > 0 {
		st.minGain = o.Threshold / (20 * float64(st.n))
	}
	// An instance of a shared shape asks what any of its shape asks (the
	// source is skipped by the caller, not by the request): one check per
	// shape for the whole plan. The others' requests read the group's
	// and hints' current hosts, so they are built per step.
	filters, now := p.filters, o.Now
	shared := map[shape]*scheduler.FilterCheck{}
	st.check = func(x *inst) *scheduler.FilterCheck {
		if x.shape.uuid != "" {
			return filters.For(st.request(x), now)
		}
		c, ok := shared[x.shape]
		if !ok {
			c = filters.For(st.request(x), now)
			shared[x.shape] = c
		}
		return c
	}
	return st, nil
}

func (st *state) hasCapacity(h *host) bool {
	switch st.metric {
	case MetricVCPU:
		return h.cap[0] > 0
	case MetricRAM:
		return h.cap[1] > 0
	case MetricDisk:
		return h.cap[2] > 0
	case MetricMeasured:
		return h.cap[dimMeasured] > 0
	}
	return h.cap[0] > 0 || h.cap[1] > 0 || h.cap[2] > 0
}

// value is a host's normalised usage of the metric with usage used.
func (st *state) value(h *host, used *[dims]float64) float64 {
	switch st.metric {
	case MetricMeasured:
		v := used[dimMeasured] / h.cap[dimMeasured]
		if h.cap[dimMeasuredMem] > 0 {
			v = max(v, used[dimMeasuredMem]/h.cap[dimMeasuredMem])
		}
		return v
	case MetricVCPU:
		return used[0] / h.cap[0]
	case MetricRAM:
		return used[1] / h.cap[1]
	case MetricDisk:
		return used[2] / h.cap[2]
	}
	v := 0.0
	for k := range classes {
		if h.cap[k] > 0 {
			v = max(v, used[k]/h.cap[k])
		}
	}
	return v
}

// resum recomputes the sums from the hosts' values.
func (st *state) resum() {
	st.sum, st.sq = 0, 0
	for i := range st.hosts {
		if h := &st.hosts[i]; h.counted {
			st.sum += h.v
			st.sq += h.v * h.v
		}
	}
}

func cvOf(n int, sum, sq float64) float64 {
	if n == 0 {
		return 0
	}
	mean := sum / float64(n)
	if mean <= 0 {
		return 0
	}
	variance := sq/float64(n) - mean*mean
	if variance <= 0 {
		return 0
	}
	return math.Sqrt(variance) / mean
}

func (st *state) cv() float64 { return cvOf(st.n, st.sum, st.sq) }

// request is the scheduler request for moving x now: its flavor and zone,
// its group with where the other members are, its hints' hosts. Its own
// host is skipped by the caller.
func (st *state) request(x *inst) *scheduler.Request {
	in := x.in
	src := st.hosts[x.host].name
	r := &scheduler.Request{InstanceUUID: in.UUID, Resources: x.res, ExtraSpecs: in.Flavor.ExtraSpecs, Zone: in.Zone}
	if g := st.groups[in.Group]; g != nil {
		members := make(map[string]int, len(g.members))
		for h, n := range g.members {
			members[h] = n
		}
		if members[src]--; members[src] <= 0 {
			delete(members, src)
		}
		r.Group = &scheduler.Group{Policy: g.policy, MaxServerPerHost: g.max, Members: members}
	}
	r.SameHost = st.hostsOf(in.SameHost)
	if in.DifferentHost != nil {
		r.DifferentHost = st.hostsOf(in.DifferentHost)
	}
	return r
}

// hostsOf returns the hosts of the named instances (nil for nil, as the
// conductor: a hint naming only unknown instances passes no host).
func (st *state) hostsOf(uuids []string) []string {
	if uuids == nil {
		return nil
	}
	out := []string{}
	for _, u := range uuids {
		if i, ok := st.byUUID[u]; ok {
			if h := st.hosts[st.insts[i].host].name; !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out
}

// cand is one move considered.
type cand struct {
	inst     int32
	from, to int32
	gain     float64
}

// best finds the step's move: among the moves from the most loaded hosts
// to the least loaded ones that pass the filters, those within half of
// the best gain, the one copying the least RAM.
func (st *state) best(p *Planner) (cand, bool) {
	cv := st.cv()
	cands := st.cands[:0]
	defer func() { st.cands = cands[:0] }()
	examined := 0
	st.order.Reverse(func(k key) bool {
		if examined >= sourcesPerStep && len(cands) > 0 {
			return false
		}
		examined++
		cands = st.fromSource(k.idx, cv, cands)
		return true
	})
	if len(cands) == 0 {
		return cand{}, false
	}
	bestGain := 0.0
	for _, c := range cands {
		bestGain = max(bestGain, c.gain)
	}
	var pick cand
	found := false
	for _, c := range cands {
		if c.gain < bestGain/2 {
			continue
		}
		if !found || st.better(c, pick) {
			pick, found = c, true
		}
	}
	return pick, found
}

// better orders candidates of the final choice: less RAM, then more gain,
// then the seed's order.
func (st *state) better(a, b cand) bool {
	ra, rb := st.insts[a.inst].ram, st.insts[b.inst].ram
	if ra != rb {
		return ra < rb
	}
	if a.gain != b.gain {
		return a.gain > b.gain
	}
	return st.tie(a) < st.tie(b)
}

// tie is a's place among equally good moves: a hash of the seed, the
// instance and the destination.
func (st *state) tie(a cand) uint64 {
	h := st.seed ^ 0x9e3779b97f4a7c15
	for _, s := range [2]string{st.insts[a.inst].uuid, st.hosts[a.to].name} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 0x100000001b3
		}
		h ^= h >> 29
	}
	return h
}

// fromSource adds the improving moves of source si's instances (one per
// shape) to the least loaded hosts that take them.
func (st *state) fromSource(si int32, cv float64, out []cand) []cand {
	src := &st.hosts[si]
	var shapes []shape
	for _, ii := range src.insts {
		x := &st.insts[ii]
		if x.moved || slices.Contains(shapes, x.shape) {
			continue
		}
		shapes = append(shapes, x.shape)
		var nsrc [dims]float64
		for k := range nsrc {
			nsrc[k] = src.used[k] - x.amt[k]
		}
		vs := st.value(src, &nsrc)
		var check *scheduler.FilterCheck
		passed, scanned := 0, 0
		st.order.Scan(func(k key) bool {
			if k.v >= src.v || passed >= destsPerMove || scanned >= destScan {
				return false
			}
			scanned++
			if k.idx == si {
				return true
			}
			dst := &st.hosts[k.idx]
			if check == nil {
				check = st.check(x)
			}
			if !check.Passes(dst.hs) {
				return true
			}
			passed++
			var ndst [dims]float64
			for j := range ndst {
				ndst[j] = dst.used[j] + x.amt[j]
			}
			vd := st.value(dst, &ndst)
			sum := st.sum - src.v - dst.v + vs + vd
			sq := st.sq - src.v*src.v - dst.v*dst.v + vs*vs + vd*vd
			if gain := cv - cvOf(st.n, sum, sq); gain >= st.minGain {
				out = append(out, cand{inst: ii, from: si, to: k.idx, gain: gain})
			}
			return true
		})
	}
	return out
}

// apply performs a move on the state.
func (st *state) apply(c cand) { st.shift(c, c.from, c.to, true) }

// undo reverts apply.
func (st *state) undo(c cand) { st.shift(c, c.to, c.from, false) }

func (st *state) shift(c cand, from, to int32, moved bool) {
	x := &st.insts[c.inst]
	a, b := &st.hosts[from], &st.hosts[to]
	for k := range x.amt {
		a.used[k] -= x.amt[k]
		b.used[k] += x.amt[k]
	}
	a.hs.RemoveInstance(x.res)
	b.hs.AddInstance(x.res)
	st.revalue(from)
	st.revalue(to)
	if g := st.groups[x.in.Group]; g != nil {
		if g.members[a.name]--; g.members[a.name] <= 0 {
			delete(g.members, a.name)
		}
		g.members[b.name]++
	}
	x.host, x.moved = to, moved
}

func (st *state) revalue(i int32) {
	h := &st.hosts[i]
	if !h.counted {
		return
	}
	st.order.Delete(key{h.v, i})
	st.sum -= h.v
	st.sq -= h.v * h.v
	h.v = st.value(h, &h.used)
	st.sum += h.v
	st.sq += h.v * h.v
	st.order.Set(key{h.v, i})
}
