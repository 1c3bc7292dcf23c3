package scheduler

// Indexes of the weighers whose raw values depend on the host alone and are
// kept precomputed in the dense arrays.
const (
	rawRAM = iota
	rawCPU
	rawDisk
	rawIOOps
	rawBuildFailure
	rawNumInstances
	numRaw
)

// fitRow is one host's resource and liveness data for the filter pass,
// packed so one host is read from one or two cache lines.
type fitRow struct {
	free     [numStd]int64 // capacity − used (may be negative)
	maxUnit  [numStd]int64
	minUnit  [numStd]int32
	step     [numStd]int32
	lastSeen int64 // service's last heartbeat, Unix nanoseconds
	hasInv   [numStd]bool
	eligible bool // ComputeFilter's static part: has a service, enabled, not forced down
	// raw holds the host-only weighers' raw values, so the pass that
	// filters a host also gathers its weights from the same cache lines.
	raw [numRaw]float64
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
	nonZero [numRaw]int
}

func (d *dense) resize(n int) {
	d.rows = make([]fitRow, n)
	d.nonZero = [numRaw]int{}
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
		r.minUnit[c] = int32(min(inv.MinUnit, 1<<30))
		r.step[c] = int32(max(min(inv.StepSize, 1<<30), 1))
	}
	old := r.raw
	// The fixed-min weighers' values are clamped at 0, as Nova clamps them
	// at their minval before normalising.
	var raw [numRaw]float64
	raw[rawRAM] = max(float64(h.FreeRAMMB), 0)
	raw[rawCPU] = max(float64(h.VCPUsTotal)*h.CPUAllocationRatio-float64(h.VCPUsUsed), 0)
	raw[rawDisk] = max(float64(h.FreeDiskMB), 0)
	raw[rawIOOps] = max(float64(h.NumIOOps), 0)
	raw[rawBuildFailure] = float64(h.FailedBuilds)
	raw[rawNumInstances] = float64(h.NumInstances)
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

// fits is ResourceFilter on the dense rows for the standard classes.
func (r *fitRow) fits(req *Request) bool {
	for c := 0; c < numStd; c++ {
		if !req.hasStd[c] {
			continue
		}
		n := req.std[c]
		if !r.hasInv[c] || n > r.free[c] || n > r.maxUnit[c] || n < int64(r.minUnit[c]) {
			return false
		}
		if st := int64(r.step[c]); st > 1 && n%st != 0 {
			return false
		}
	}
	return true
}
