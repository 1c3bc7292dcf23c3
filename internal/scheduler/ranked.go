package scheduler

import (
	"math"
	"sort"

	"github.com/tidwall/btree"
)

// rankIndex keeps, for every host-only weigher the scheduler uses, the
// hosts ordered by raw value (ties by host index) in a B-tree, updated as
// hosts change. With it a decision need not look at every host: it walks
// the orders from their best end and stops once no unseen host can beat the
// k-th best found (Fagin's threshold algorithm), which gives the same
// hosts, in the same order, as weighing every candidate.
type rankIndex struct {
	enabled   [numRaw]bool
	trees     [numRaw]*btree.BTreeG[rankItem]
	negatives [numRaw]int // hosts whose raw value is below 0
	built     bool
}

type rankItem struct {
	v   float64
	idx int32
}

func rankLess(a, b rankItem) bool {
	if a.v != b.v {
		return a.v < b.v
	}
	return a.idx < b.idx
}

func (ri *rankIndex) rebuild(rows []fitRow) {
	for j := 0; j < numRaw; j++ {
		ri.trees[j], ri.negatives[j] = nil, 0
		for i := range rows {
			if rows[i].raw[j] < 0 {
				ri.negatives[j]++
			}
		}
		if !ri.enabled[j] {
			continue
		}
		items := make([]rankItem, len(rows))
		for i := range rows {
			items[i] = rankItem{rows[i].raw[j], int32(i)}
		}
		sort.Slice(items, func(a, b int) bool { return rankLess(items[a], items[b]) })
		t := btree.NewBTreeGOptions(rankLess, btree.Options{NoLocks: true, Degree: 64})
		for _, it := range items {
			t.Load(it)
		}
		ri.trees[j] = t
	}
	ri.built = true
}

// update moves host i in every order whose value changed (old holds its
// previous raw values; rows already holds the new ones).
func (ri *rankIndex) update(rows []fitRow, i int, old [numRaw]float64) {
	if !ri.built {
		return // rebuilt on the next snapshot
	}
	for j := 0; j < numRaw; j++ {
		v := rows[i].raw[j]
		if v == old[j] {
			continue
		}
		if (old[j] < 0) != (v < 0) {
			if v < 0 {
				ri.negatives[j]++
			} else {
				ri.negatives[j]--
			}
		}
		if t := ri.trees[j]; t != nil {
			t.Delete(rankItem{old[j], int32(i)})
			t.Set(rankItem{v, int32(i)})
		}
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
	ok := c.pass.check(int(i), c.steps) < 0
	c.ok[i] = ok
	return ok
}

// thresholdTop returns the k best candidates, best first, walking the
// rank orders instead of every host. It reports false when it cannot
// answer: a weigher without an order, or no candidate at all (the caller's
// full pass then counts rejections).
func (s *Scheduler) thresholdTop(check *candidateCheck, fast []boundWeigher, k int) ([]ranked, bool) {
	rows := s.view.dense.rows
	ri := &s.view.dense.rank
	n := len(rows)
	// Bounds over the candidates: the largest value is the first candidate
	// from the top of the order; the smallest, from the bottom, unless a
	// fixed-min weigher has no negative value anywhere (then it is 0).
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
		if w.fixedMin && ri.negatives[w.raw] == 0 {
			w.lo = 0
			continue
		}
		w.lo, _ = firstCandidate(t, check, false)
		if w.fixedMin {
			w.lo = math.Min(w.lo, 0)
		}
	}
	live, scale := liveWeighers(fast)
	if len(live) == 0 { // every candidate weighs the same: name order
		var top []ranked
		for i := 0; i < n && len(top) < k; i++ {
			if check.passes(int32(i)) {
				top = append(top, ranked{idx: int32(i)})
			}
		}
		return top, len(top) > 0
	}
	total := func(i int32) float64 {
		t := 0.0
		for j := range live {
			t += (rows[i].raw[live[j].raw] - live[j].lo) * scale[j]
		}
		return t
	}
	// Walk every live order from its best end, one depth at a time.
	iters := make([]btree.IterG[rankItem], len(live))
	for j := range live {
		iters[j] = ri.trees[live[j].raw].Iter()
		defer iters[j].Release()
	}
	var top []ranked
	seen := s.seenStamp(n)
	for d := 0; d < n; d++ {
		tau := 0.0
		for j := range live {
			var ok bool
			switch {
			case d == 0 && scale[j] > 0:
				ok = iters[j].Last()
			case d == 0:
				ok = iters[j].First()
			case scale[j] > 0:
				ok = iters[j].Prev()
			default:
				ok = iters[j].Next()
			}
			if !ok {
				return top, len(top) > 0
			}
			it := iters[j].Item()
			tau += (it.v - live[j].lo) * scale[j]
			if seen.stamp[it.idx] == seen.gen {
				continue
			}
			seen.stamp[it.idx] = seen.gen
			if check.passes(it.idx) {
				top = insertTop(top, ranked{idx: it.idx, weight: total(it.idx)}, k)
			}
		}
		if len(top) == k && tau < top[k-1].weight {
			break
		}
	}
	return top, len(top) > 0
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

// liveWeighers drops the weighers whose bounds are equal (they add 0) and
// returns the rest with their scale, multiplier ÷ (hi − lo).
func liveWeighers(fast []boundWeigher) ([]boundWeigher, [numRaw]float64) {
	var scale [numRaw]float64
	live := fast[:0:0]
	for _, w := range fast {
		if w.hi > w.lo {
			scale[len(live)] = w.mult / (w.hi - w.lo)
			live = append(live, w)
		}
	}
	return live, scale
}

type stamps struct {
	stamp []uint32
	gen   uint32
}

// seenStamp returns the "visited in this walk" marks, cleared in O(1).
func (s *Scheduler) seenStamp(n int) *stamps {
	st := &s.seen
	if len(st.stamp) != n {
		st.stamp, st.gen = make([]uint32, n), 0
	}
	st.gen++
	if st.gen == 0 {
		clear(st.stamp)
		st.gen = 1
	}
	return st
}
