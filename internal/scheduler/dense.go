package scheduler

import "keel/internal/placement"

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
}

func (d *dense) resize(n int) {
	d.rows = make([]fitRow, n)
	d.nonZero = [numWeighers]int{}
	d.rank.built = false // rebuilt once every row is written
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
