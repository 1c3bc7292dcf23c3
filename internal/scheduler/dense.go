package scheduler

import (
	"container/heap"
	"time"

	"keel/internal/placement"
)

// fitRow is one host's resource and liveness data for the filter pass,
// packed so one host is read from one or two cache lines.
type fitRow struct {
	free     [numStd]int64 // capacity − used (may be negative)
	maxUnit  [numStd]int64
	minUnit  [numStd]int64
	step     [numStd]int64 // ≥ 1
	lastSeen int64         // service's last heartbeat, Unix nanoseconds
	hasInv   [numStd]bool
	eligible bool // ComputeFilter's static part: has a service, enabled, not forced down
	// metricMissing: MetricsWeigher with [metrics] required lacks one of
	// the host's metrics (a decision that weighs the host fails).
	metricMissing bool
	// raw holds the host-only weighers' raw values (WeigherSpec.Host,
	// clamped at 0 for a fixed-min weigher), each in its weigherTable
	// slot, so the pass that filters a host also gathers its weights from
	// the same cache lines. A per-request weigher's slot stays 0.
	raw [numWeighers]float64
}

// dense holds, for every host in name order, what the default pipeline
// reads, in flat arrays: a decision over 10,000 hosts is then a few
// sequential passes over memory instead of a pointer chase per host. It is
// a cache of the HostStates, rewritten row by row (sync) whenever a host
// changes, and rebuilt whenever the host list changes.
type dense struct {
	rows []fitRow
	rank rankIndex
	// nonZero counts, per raw weigher, the hosts whose value is not 0: a
	// weigher that is 0 everywhere contributes nothing and is skipped.
	nonZero [numWeighers]int
	// metrics is MetricsWeigher's setting when it weighs (nil
	// otherwise): its raw value is a host's too, kept in the rows like
	// the others' — it changes when the host's record or the loads its
	// claims assumed change (sync), and when a measurement passes
	// [metrics] max_age, which refreshMetrics catches up with at each
	// decision.
	metrics *metricsSetting
}

// metricsSetting is MetricsWeigher's configuration as the rows read it,
// the time they are current at, and when each host's value next ages.
type metricsSetting struct {
	cfg  MetricsConfig
	mult float64
	// asOf is the time the rows' values are computed at (the last
	// decision's); zero until the first.
	asOf time.Time
	// expiry is, per host, when its value next changes by age alone
	// (metricsExpiry; 0 never), and due those times in a heap (entries
	// whose host has since moved on are skipped when they come up).
	expiry  []int64
	due     expiryHeap
	missing int // rows with metricMissing
}

func (d *dense) resize(n int) {
	d.rows = make([]fitRow, n)
	d.nonZero = [numWeighers]int{}
	d.rank.built = false // rebuilt once every row is written
	if m := d.metrics; m != nil {
		m.expiry, m.due, m.missing = make([]int64, n), nil, 0
	}
}

// sync writes host h's row.
func (d *dense) sync(h *HostState) {
	i := h.idx
	if i < 0 || i >= len(d.rows) {
		return
	}
	r := &d.rows[i]
	r.eligible = h.HasService && !h.Disabled && !h.ForcedDown
	r.lastSeen = h.LastSeenUp.UnixNano()
	for c := 0; c < numStd; c++ {
		inv := h.inv[c]
		r.hasInv[c] = h.hasInv[c]
		r.free[c] = h.capacity[c] - h.used[c]
		r.maxUnit[c] = inv.MaxUnit
		r.minUnit[c] = inv.MinUnit
		r.step[c] = max(inv.StepSize, 1)
	}
	old := r.raw
	// The fixed-min weighers' values are clamped at 0, as Nova clamps them
	// at their minval before normalising.
	var raw [numWeighers]float64
	for k := range weigherTable {
		w := &weigherTable[k]
		if k == metricsSlot && d.metrics != nil {
			raw[k] = d.syncMetrics(h, r)
			continue
		}
		if w.Host == nil {
			continue
		}
		v := w.Host(h)
		if w.FixedMin {
			v = max(v, 0)
		}
		raw[k] = v
	}
	for k := range raw {
		if (r.raw[k] != 0) != (raw[k] != 0) {
			if raw[k] != 0 {
				d.nonZero[k]++
			} else {
				d.nonZero[k]--
			}
		}
	}
	r.raw = raw
	d.rank.update(d.rows, i, old)
}

// fits is ResourceFilter on the dense rows for the standard classes:
// placement's rule on the packed amounts.
func (r *fitRow) fits(req *Request) bool {
	for c := 0; c < numStd; c++ {
		if req.hasStd[c] && !(r.hasInv[c] && placement.Admits(req.std[c], r.free[c], r.minUnit[c], r.maxUnit[c], r.step[c])) {
			return false
		}
	}
	return true
}

// metricsSlot is MetricsWeigher's row in weigherTable (and slot in the
// dense rows).
var metricsSlot = weigherSlot(metricsWeigherName)

// syncMetrics returns host h's MetricsWeigher value as of the rows' time,
// marks the row when a required metric is missing, and files when the
// value next ages.
func (d *dense) syncMetrics(h *HostState, r *fitRow) float64 {
	m := d.metrics
	v, missing := metricsValue(h, &m.cfg, m.mult, m.asOf)
	if miss := missing != ""; miss != r.metricMissing {
		r.metricMissing = miss
		if miss {
			m.missing++
		} else {
			m.missing--
		}
	}
	if len(m.expiry) != len(d.rows) {
		return v // a resize is pending: the snapshot syncs every row again
	}
	e := metricsExpiry(h, &m.cfg, m.asOf)
	if e != m.expiry[h.idx] {
		m.expiry[h.idx] = e
		if e != 0 {
			if len(m.due) > 4*len(m.expiry)+64 {
				m.compact()
			}
			heap.Push(&m.due, expiryItem{at: e, idx: int32(h.idx)})
		}
	}
	return v
}

// compact rebuilds the heap from the hosts' current expiries, dropping the
// entries they have moved on from.
func (m *metricsSetting) compact() {
	m.due = m.due[:0]
	for i, e := range m.expiry {
		if e != 0 {
			m.due = append(m.due, expiryItem{at: e, idx: int32(i)})
		}
	}
	heap.Init(&m.due)
}

// refreshMetrics brings MetricsWeigher's values to now: the hosts one of
// whose measurements has passed max_age since the rows' time are synced
// again (all of them the first time, or if the clock went back).
func (d *dense) refreshMetrics(hosts []*HostState, now time.Time) {
	m := d.metrics
	if m == nil {
		return
	}
	if m.asOf.IsZero() || now.Before(m.asOf) {
		m.asOf = now
		for _, h := range hosts {
			d.sync(h)
		}
		return
	}
	m.asOf = now
	t := now.UnixNano()
	for len(m.due) > 0 && m.due[0].at < t {
		it := heap.Pop(&m.due).(expiryItem)
		if i := int(it.idx); i < len(hosts) && m.expiry[i] == it.at {
			m.expiry[i] = 0 // aged: sync files the next expiry, if any
			d.sync(hosts[i])
		}
	}
}

// expiryItem is one host's value ageing at at (Unix nanoseconds).
type expiryItem struct {
	at  int64
	idx int32
}

// expiryHeap is a min-heap of expiries (container/heap).
type expiryHeap []expiryItem

func (q expiryHeap) Len() int           { return len(q) }
func (q expiryHeap) Less(i, j int) bool { return q[i].at < q[j].at }
func (q expiryHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *expiryHeap) Push(x any)        { *q = append(*q, x.(expiryItem)) }
func (q *expiryHeap) Pop() any          { o := *q; it := o[len(o)-1]; *q = o[:len(o)-1]; return it }
