package scheduler

import (
	"math"
	"slices"
	"sort"

	"github.com/tidwall/btree"
)

// rankIndex keeps the hosts in B-tree orders, updated as hosts change, so
// a decision need not weigh every host:
//
//   - per host-only weigher in use, an order by raw value (ties by host
//     index), from which the candidates' bounds (largest and smallest raw
//     value) are read by walking in from either end;
//   - one composite order by key(h) = Σ coef_j · max(raw_j(h) − base_j, 0)
//     over the weighers with a positive multiplier (RAM, CPU, Disk by
//     default, MetricsWeigher when it weighs); base_j is 0 for a fixed-min
//     weigher, whose values are clamped there, and for any other the
//     smallest value when the order was last keyed (any base keeps the
//     bound below; one at or under every value keeps it tight). A
//     candidate's total weight is at most
//     R · key(h) + C for constants R and C of the decision (see
//     thresholdTop), so walking the composite order from the top, the
//     decision stops as soon as that bound falls below the k-th best weight
//     found — the same hosts, in the same order, as weighing every
//     candidate (a threshold algorithm over one sorted access path).
//     Equal keys are walked in host order (compLess), so that in a run of
//     hosts alike in every raw value — a fleet of one shape, equally
//     loaded — the walk passes over those that can only tie the k-th best
//     after it (walkComposite).
//
// Each composite item carries its host's class (rawClasses): hosts alike
// in every indexed weigher's raw value share one, so the walk tells such a
// tie from the item alone, without reading the host's row.
type rankIndex struct {
	enabled  [numWeighers]bool
	inComp   [numWeighers]bool // part of the composite key
	fixedMin [numWeighers]bool
	mult     [numWeighers]float64
	coef     [numWeighers]float64
	base     [numWeighers]float64
	trees    [numWeighers]*btree.BTreeG[rankItem]
	// comp is the composite order, ascending (compLess), as a slice: re-keying it
	// after a change of coefficients is one pass plus an insertion sort of
	// an almost sorted slice, cheap enough to do whenever scales drift.
	comp []rankItem
	// keyOf and clsOf are, per host index, its item's key and class in
	// comp; a host's item is found by binary search on its key (find).
	// (A table of positions instead had every item a move passed over
	// written at random: a claimed host, moving down through the hosts
	// alike at the top, passed over thousands — half of a decision's
	// time at 100,000 hosts.)
	keyOf   []float64
	clsOf   []int32
	classes rawClasses
	built   bool
	// walked counts the hosts the walks have checked since the order was
	// last keyed (recoef).
	walked int
	// rowTies counts the hosts a walk passed over as ties by reading their
	// rows (sameWeight), their class not telling.
	rowTies int
}

type rankItem struct {
	v   float64
	idx int32
	// cls is the host's class in the composite order (rawClasses; -1:
	// alike no other); 0 and unused in the per-weigher orders.
	cls int32
}

func rankLess(a, b rankItem) bool {
	if a.v != b.v {
		return a.v < b.v
	}
	return a.idx < b.idx
}

// compLess is the composite order: by key, then by host index
// descending, so a walk from the top meets equal keys in host order.
func compLess(a, b rankItem) bool {
	if a.v != b.v {
		return a.v < b.v
	}
	return a.idx > b.idx
}

func newTree(items []rankItem) *btree.BTreeG[rankItem] {
	sort.Slice(items, func(a, b int) bool { return rankLess(items[a], items[b]) })
	t := btree.NewBTreeGOptions(rankLess, btree.Options{NoLocks: true, Degree: 64})
	for _, it := range items {
		t.Load(it)
	}
	return t
}

// key is a host's composite key.
func (ri *rankIndex) key(raw *[numWeighers]float64) float64 {
	k := 0.0
	for j := 0; j < numWeighers; j++ {
		if ri.inComp[j] && raw[j] > ri.base[j] {
			k += ri.coef[j] * (raw[j] - ri.base[j])
		}
	}
	return k
}

func (ri *rankIndex) rebuild(rows []fitRow) {
	for j := 0; j < numWeighers; j++ {
		ri.trees[j] = nil
		ri.base[j] = 0
		if !ri.fixedMin[j] && len(rows) > 0 {
			ri.base[j] = math.Inf(1)
			for i := range rows {
				ri.base[j] = math.Min(ri.base[j], rows[i].raw[j])
			}
		}
		top := ri.base[j] + 1
		for i := range rows {
			top = math.Max(top, rows[i].raw[j])
		}
		// Coefficients normalise each weigher by its range now, so the
		// composite key ranks hosts close to how a decision will (see
		// recoef for keeping them so).
		ri.coef[j] = math.Max(ri.mult[j], 0) / (top - ri.base[j])
		if !ri.enabled[j] {
			continue
		}
		items := make([]rankItem, len(rows))
		for i := range rows {
			items[i] = rankItem{v: rows[i].raw[j], idx: int32(i)}
		}
		ri.trees[j] = newTree(items)
	}
	ri.rebuildComposite(rows)
	ri.built = true
	ri.walked = 0
}

func (ri *rankIndex) rebuildComposite(rows []fitRow) {
	items := make([]rankItem, len(rows))
	ri.classes.reset()
	for i := range rows {
		items[i] = rankItem{v: ri.key(&rows[i].raw), idx: int32(i), cls: ri.classes.add(ri.classKey(&rows[i].raw))}
	}
	ri.keyOf, ri.clsOf = make([]float64, len(rows)), make([]int32, len(rows))
	for _, it := range items {
		ri.keyOf[it.idx], ri.clsOf[it.idx] = it.v, it.cls
	}
	sort.Slice(items, func(a, b int) bool { return compLess(items[a], items[b]) })
	ri.comp = items
}

// rekey recomputes every composite key with the current coefficients and
// restores the order: an insertion sort while the order is almost right,
// a full sort once it has moved more than a few times the host count.
func (ri *rankIndex) rekey(rows []fitRow) {
	c := ri.comp
	for p := range c {
		c[p].v = ri.key(&rows[c[p].idx].raw)
		ri.keyOf[c[p].idx] = c[p].v
	}
	budget := 8 * len(c)
	for p := 1; p < len(c) && budget > 0; p++ {
		it := c[p]
		q := p
		for q > 0 && compLess(it, c[q-1]) {
			c[q] = c[q-1]
			q--
			budget--
		}
		c[q] = it
	}
	if budget <= 0 {
		slices.SortFunc(c, func(a, b rankItem) int {
			switch {
			case compLess(a, b):
				return -1
			case compLess(b, a):
				return 1
			}
			return 0
		})
	}
}

// lowerBound is the first position in c whose item is not below it.
func lowerBound(c []rankItem, it rankItem) int {
	lo, hi := 0, len(c)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if compLess(c[m], it) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// find is host i's position in comp (by a scan where the search misses:
// a key that is NaN orders nowhere).
func (ri *rankIndex) find(i int) int {
	if p := lowerBound(ri.comp, rankItem{v: ri.keyOf[i], idx: int32(i)}); p < len(ri.comp) && ri.comp[p].idx == int32(i) {
		return p
	}
	return slices.IndexFunc(ri.comp, func(it rankItem) bool { return it.idx == int32(i) })
}

// moveComposite puts host i, at position p, at its new key's place: the
// items between shift by one (a memmove).
func (ri *rankIndex) moveComposite(i, p int, key float64) {
	c := ri.comp
	it := c[p]
	it.v = key
	ri.keyOf[i] = key
	switch {
	case p > 0 && compLess(it, c[p-1]):
		q := lowerBound(c[:p], it)
		copy(c[q+1:p+1], c[q:p])
		c[q] = it
	case p < len(c)-1 && compLess(c[p+1], it):
		q := p + lowerBound(c[p+1:], it)
		copy(c[p:q], c[p+1:q+1])
		c[q] = it
	default:
		c[p] = it
	}
}

// recoef re-keys the composite order with a decision's scales as its
// coefficients, when they have drifted from them by more than 0.2% (the
// bound R·key + C loosens by the ratio between the largest and smallest
// scale/coef) and the walks since the last keying have checked as many
// hosts as there are: re-keying costs about one pass over every host, so
// it is worth it once a looser bound may have cost as much. (Scales drift
// at nearly every decision on a large cloud — the largest free amount among
// the candidates moves with each claim — while the walks stay short.) It
// reports whether it re-keyed.
func (ri *rankIndex) recoef(rows []fitRow, live []boundWeigher, scale [numWeighers]float64) bool {
	if ri.walked < len(rows) {
		return false
	}
	lo, hi := math.Inf(1), 0.0
	for j, w := range live {
		if ri.inComp[w.raw] && scale[j] > 0 {
			r := scale[j] / ri.coef[w.raw]
			lo, hi = math.Min(lo, r), math.Max(hi, r)
		}
	}
	if hi == 0 || hi <= 1.002*lo {
		return false
	}
	for j, w := range live {
		if ri.inComp[w.raw] && scale[j] > 0 {
			ri.coef[w.raw] = scale[j]
		}
	}
	for j := range ri.base {
		if ri.inComp[j] && !ri.fixedMin[j] && ri.trees[j] != nil {
			if it, ok := ri.trees[j].Min(); ok {
				ri.base[j] = it.v
			}
		}
	}
	ri.rekey(rows)
	ri.walked = 0
	return true
}

// update moves host i in every order whose value changed (old holds its
// previous raw values; rows already holds the new ones).
func (ri *rankIndex) update(rows []fitRow, i int, old [numWeighers]float64) {
	if !ri.built {
		return // rebuilt on the next snapshot
	}
	for j := 0; j < numWeighers; j++ {
		v := rows[i].raw[j]
		if v == old[j] {
			continue
		}
		if t := ri.trees[j]; t != nil {
			t.Delete(rankItem{v: old[j], idx: int32(i)})
			t.Set(rankItem{v: v, idx: int32(i)})
		}
	}
	ok, nc := ri.classKey(&old), ri.classKey(&rows[i].raw)
	nk := ri.key(&rows[i].raw)
	if nc == ok && nk == ri.keyOf[i] {
		return
	}
	p := ri.find(i)
	if nc != ok {
		ri.classes.drop(ok, ri.clsOf[i])
		ri.clsOf[i] = ri.classes.add(nc)
		ri.comp[p].cls = ri.clsOf[i]
	}
	if nk != ri.keyOf[i] {
		ri.moveComposite(i, p, nk)
	}
}

// ranked is a candidate with its total weight.
type ranked struct {
	idx    int32
	weight float64
}

// better orders candidates as a stable sort by weight, descending, over
// hosts in name order would.
func better(a, b ranked) bool {
	if a.weight != b.weight {
		return a.weight > b.weight
	}
	return a.idx < b.idx
}

// insertTop keeps the k best in top, best first.
func insertTop(top []ranked, r ranked, k int) []ranked {
	if len(top) == k && !better(r, top[k-1]) {
		return top
	}
	j := len(top)
	if j < k {
		top = append(top, r)
	} else {
		j = k - 1
	}
	for j > 0 && better(r, top[j-1]) {
		top[j] = top[j-1]
		j--
	}
	top[j] = r
	return top
}

// candidateCheck answers "does host i pass this request's filters", once
// per host per decision.
type candidateCheck struct {
	pass  *filterPass
	steps []filterStep
	stamp []uint32
	ok    []bool
	gen   uint32
}

// newCheck readies the memo for one decision.
func (s *Scheduler) newCheck(p *filterPass, steps []filterStep) *candidateCheck {
	c := &s.checks
	n := len(p.hosts)
	if len(c.stamp) != n {
		c.stamp, c.ok, c.gen = make([]uint32, n), make([]bool, n), 0
	}
	c.gen++
	if c.gen == 0 {
		clear(c.stamp)
		c.gen = 1
	}
	c.pass, c.steps = p, steps
	return c
}

func (c *candidateCheck) passes(i int32) bool {
	if c.stamp[i] == c.gen {
		return c.ok[i]
	}
	c.stamp[i] = c.gen
	ok := c.pass.check(int(i), c.steps) == -1
	c.ok[i] = ok
	return ok
}

// thresholdTop returns the k best candidates, best first, walking the
// composite order instead of weighing every host. It reports false when it
// cannot answer cheaply — a weigher without an order, no candidate at all,
// or a walk that would visit more than a sixty-fourth of the hosts — and the caller then
// weighs every candidate.
func (s *Scheduler) thresholdTop(check *candidateCheck, fast []boundWeigher, k int) ([]ranked, bool) {
	rows := s.view.dense.rows
	ri := &s.view.dense.rank
	n := len(rows)
	// Bounds over the candidates: the largest value is the first candidate
	// from the top of the order; the smallest, from the bottom — or 0 for
	// a fixed-min weigher, whose values are clamped there.
	for j := range fast {
		w := &fast[j]
		t := ri.trees[w.raw]
		if t == nil {
			return nil, false
		}
		hi, ok := firstCandidate(t, check, true)
		if !ok {
			return nil, false
		}
		w.hi = hi
		if w.fixedMin { // values are clamped at 0, the range starts there
			w.lo = 0
			continue
		}
		w.lo, _ = firstCandidate(t, check, false)
	}
	live, scale := liveWeighers(s.live[:0], fast)
	s.live = live
	// A walk longer than this costs more than weighing every candidate
	// (a visit costs several times a host of the full pass): give up early.
	limit := max(n/4, 4*k+32)
	ri.recoef(rows, live, scale)
	top, ok := walkComposite(ri, rows, check, live, &scale, k, limit, s.top[:0])
	s.top = top[:0]
	return top, ok
}

// walkComposite walks the composite order from the top, weighing the
// candidates it meets, until no host further down can beat the k-th best
// found. A candidate's total is Σ_live (raw_j − lo_j)·scale_j. For a
// weigher in the composite key that is ≤ (scale_j/coef_j)·coef_j·
// max(raw_j − base_j, 0) − scale_j·(lo_j − base_j); for any other,
// ≤ max(multiplier, 0) (a normalised value is at most 1). Hence
// total ≤ R·key + C.
//
// A host whose live weighers' raw values are all those of the k-th best
// so far has its weight to the last bit (weightOf adds the same terms), so it is better
// only if it comes first in host order; met after it, as equal keys are
// (compLess), it is passed over without a filter check; so is a host of
// the class of one already found not better than the k-th best (same
// weight, later in host order, against a k-th best that only improves).
// Where the bound is loose, a run of alike hosts just below the k-th best
// was otherwise weighed host by host until the walk gave up (limit) and
// the decision weighed every host: at the simulator's 100,000 hosts, 54
// s of its day's 85 s of decisions. It reports false after limit hosts
// checked.
func walkComposite(ri *rankIndex, rows []fitRow, check *candidateCheck, live []boundWeigher, scale *[numWeighers]float64, k, limit int, top []ranked) ([]ranked, bool) {
	r, c := 0.0, 0.0
	for j, w := range live {
		if ri.inComp[w.raw] && scale[j] > 0 {
			r = math.Max(r, scale[j]/ri.coef[w.raw])
			c -= scale[j] * (w.lo - ri.base[w.raw])
		} else {
			c += math.Max(w.mult, 0)
		}
	}
	visited := 0
	// dominated is the class of the last candidate found not better than
	// the k-th best: the rest of its class follow it (equal keys, host
	// order) with its weight, so they are not better either — the k-th
	// best only improves.
	dominated := int32(-1)
	for p := len(ri.comp) - 1; p >= 0; p-- {
		it := ri.comp[p]
		if it.cls >= 0 && it.cls == dominated {
			continue
		}
		if len(top) == k {
			// A margin far above rounding error keeps the bound safe.
			bound := r*it.v + c
			if bound+1e-9*(math.Abs(bound)+1) < top[k-1].weight {
				break
			}
			if last := top[k-1].idx; it.idx > last && (it.cls >= 0 && it.cls == ri.clsOf[last] || ri.rowTie(&rows[it.idx], &rows[last], live)) {
				continue // ties the k-th best, after it in host order: not better
			}
		}
		if visited++; visited > limit {
			ri.walked += visited
			return nil, false
		}
		if check.passes(it.idx) {
			r := ranked{idx: it.idx, weight: weightOf(&rows[it.idx], live, scale)}
			if len(top) == k && !better(r, top[k-1]) {
				dominated = it.cls
				continue
			}
			top = insertTop(top, r, k)
		}
	}
	ri.walked += visited
	return top, len(top) > 0
}

// rawClasses numbers the distinct raw rows among the hosts, counting the
// hosts in each: hosts of one class are alike in every indexed weigher's
// value, so they weigh the same under any decision (a decision weighs only
// indexed weighers on the ranked walk). A run of hosts alike at the top of
// the composite order — a fleet of one shape, equally loaded: 30,000 at
// 100,000 generated hosts — is then passed over reading the order's items
// alone, in sequence, instead of each host's row at random (the
// simulator's 100,000-host day spent most of its decisions there).
type rawClasses struct {
	ids  map[[numWeighers]float64]int32
	refs []int32 // hosts per class
	free []int32 // class numbers no host has
}

func (rc *rawClasses) reset() {
	rc.ids = make(map[[numWeighers]float64]int32)
	rc.refs, rc.free = rc.refs[:0], rc.free[:0]
}

// classKey is the part of a host's raw row a class stands for: the indexed
// weighers' values (the others 0).
func (ri *rankIndex) classKey(raw *[numWeighers]float64) [numWeighers]float64 {
	var k [numWeighers]float64
	for j := range k {
		if ri.enabled[j] {
			k[j] = raw[j]
		}
	}
	return k
}

// add counts one more host of key and returns its class; -1 for a key with
// a NaN, which equals nothing, itself included (so no class).
func (rc *rawClasses) add(key [numWeighers]float64) int32 {
	for _, v := range key {
		if v != v {
			return -1
		}
	}
	if c, ok := rc.ids[key]; ok {
		rc.refs[c]++
		return c
	}
	var c int32
	if n := len(rc.free); n > 0 {
		c, rc.free = rc.free[n-1], rc.free[:n-1]
	} else {
		c = int32(len(rc.refs))
		rc.refs = append(rc.refs, 0)
	}
	rc.ids[key] = c
	rc.refs[c] = 1
	return c
}

// drop counts one host fewer in class c (of key).
func (rc *rawClasses) drop(key [numWeighers]float64, c int32) {
	if c < 0 {
		return
	}
	if rc.refs[c]--; rc.refs[c] == 0 {
		delete(rc.ids, key)
		rc.free = append(rc.free, c)
	}
}

// rowTie is sameWeight, counted.
func (ri *rankIndex) rowTie(a, b *fitRow, live []boundWeigher) bool {
	ri.rowTies++
	return sameWeight(a, b, live)
}

// sameWeight reports whether two hosts have the same raw value for every
// live weigher, and so the same weight to the last bit (weightOf reads
// nothing else).
func sameWeight(a, b *fitRow, live []boundWeigher) bool {
	for j := range live {
		if a.raw[live[j].raw] != b.raw[live[j].raw] {
			return false
		}
	}
	return true
}

// firstCandidate returns the value of the first candidate from the top
// (or bottom) of an order.
func firstCandidate(t *btree.BTreeG[rankItem], check *candidateCheck, fromTop bool) (float64, bool) {
	var v float64
	found := false
	visit := func(it rankItem) bool {
		if check.passes(it.idx) {
			v, found = it.v, true
			return false
		}
		return true
	}
	if fromTop {
		t.Reverse(visit)
	} else {
		t.Scan(visit)
	}
	return v, found
}

// weightOf is a host's total weight from its dense row: the same terms,
// added in the same order, on every path (so equal hosts tie exactly).
func weightOf(row *fitRow, live []boundWeigher, scale *[numWeighers]float64) float64 {
	t := 0.0
	for j := range live {
		t += (row.raw[live[j].raw] - live[j].lo) * scale[j]
	}
	return t
}

// liveWeighers drops the weighers whose bounds are equal (they add 0) and
// returns the rest with their scale, multiplier ÷ (hi − lo).
func liveWeighers(live, fast []boundWeigher) ([]boundWeigher, [numWeighers]float64) {
	var scale [numWeighers]float64
	live = live[:0]
	for _, w := range fast {
		if w.hi > w.lo {
			scale[len(live)] = w.mult / (w.hi - w.lo)
			live = append(live, w)
		}
	}
	return live, scale
}
