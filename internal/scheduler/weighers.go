package scheduler

// Weigher gives each candidate host a raw value; the scheduler normalises
// the values over the candidates and multiplies by the weigher's
// multiplier, in one place (weigh).
type Weigher interface {
	Name() string
	Raw(h *HostState, r *Request) float64
	// FixedMin reports whether the normalisation's minimum starts at 0
	// (Nova's minval = 0) instead of the smallest raw value.
	FixedMin() bool
	// Active is false when every host's raw value is 0 for this request.
	Active(r *Request) bool
}

type weigherEntry struct {
	w          Weigher
	multiplier float64
	// raw is the weigher's index in the dense arrays, or -1 if its values
	// depend on the request (computed per decision with Raw).
	raw int
	// option is the multiplier's nova.conf name, which a host's
	// aggregates may set for that host (negate: the weigher uses the
	// value negated, as BuildFailureWeigher does).
	option string
	negate bool
}

// weigherOptions are the multiplier options, by weigher.
var weigherOptions = map[string]string{
	"RAMWeigher": "ram_weight_multiplier", "CPUWeigher": "cpu_weight_multiplier",
	"DiskWeigher": "disk_weight_multiplier", "IoOpsWeigher": "io_ops_weight_multiplier",
	"BuildFailureWeigher": "build_failure_weight_multiplier", "NumInstancesWeigher": "num_instances_weight_multiplier",
	"ServerGroupSoftAffinityWeigher":     "soft_affinity_weight_multiplier",
	"ServerGroupSoftAntiAffinityWeigher": "soft_anti_affinity_weight_multiplier",
}

// multiplierFor is the weigher's multiplier for host h: the one its
// aggregates set, or the configured one.
func (we *weigherEntry) multiplierFor(h *HostState) float64 {
	if m, ok := h.multipliers[we.option]; ok {
		if we.negate {
			return -m
		}
		return m
	}
	return we.multiplier
}

// denseIndex maps the host-only weighers to their precomputed arrays.
var denseIndex = map[string]int{
	"RAMWeigher": rawRAM, "CPUWeigher": rawCPU, "DiskWeigher": rawDisk, "IoOpsWeigher": rawIOOps,
	"BuildFailureWeigher": rawBuildFailure, "NumInstancesWeigher": rawNumInstances,
}

func newWeigher(name string, cfg Config) (Weigher, float64) {
	switch name {
	case "RAMWeigher":
		return ramWeigher{}, cfg.RAMWeightMultiplier
	case "CPUWeigher":
		return cpuWeigher{}, cfg.CPUWeightMultiplier
	case "DiskWeigher":
		return diskWeigher{}, cfg.DiskWeightMultiplier
	case "IoOpsWeigher":
		return ioOpsWeigher{}, cfg.IOOpsWeightMultiplier
	case "BuildFailureWeigher":
		// Nova weighs the failure count itself and negates the
		// multiplier, so the best host's term is 0 and the others'
		// negative (negating the count instead shifts every weight by the
		// multiplier).
		return buildFailureWeigher{}, -cfg.BuildFailureWeightMultiplier
	case "NumInstancesWeigher":
		return numInstancesWeigher{}, cfg.NumInstancesWeightMultiplier
	case "ServerGroupSoftAffinityWeigher":
		return softAffinityWeigher{}, cfg.SoftAffinityWeightMultiplier
	case "ServerGroupSoftAntiAffinityWeigher":
		return softAntiAffinityWeigher{}, cfg.SoftAntiAffinityWeightMultiplier
	}
	return nil, 0
}

type ramWeigher struct{}

func (ramWeigher) Name() string                         { return "RAMWeigher" }
func (ramWeigher) Active(*Request) bool                 { return true }
func (ramWeigher) FixedMin() bool                       { return true }
func (ramWeigher) Raw(h *HostState, _ *Request) float64 { return float64(h.FreeRAMMB) }

type cpuWeigher struct{}

func (cpuWeigher) Name() string         { return "CPUWeigher" }
func (cpuWeigher) Active(*Request) bool { return true }
func (cpuWeigher) FixedMin() bool       { return true }
func (cpuWeigher) Raw(h *HostState, _ *Request) float64 {
	return float64(h.VCPUsTotal)*h.CPUAllocationRatio - float64(h.VCPUsUsed)
}

type diskWeigher struct{}

func (diskWeigher) Name() string                         { return "DiskWeigher" }
func (diskWeigher) Active(*Request) bool                 { return true }
func (diskWeigher) FixedMin() bool                       { return true }
func (diskWeigher) Raw(h *HostState, _ *Request) float64 { return float64(h.FreeDiskMB) }

type ioOpsWeigher struct{}

func (ioOpsWeigher) Name() string                         { return "IoOpsWeigher" }
func (ioOpsWeigher) Active(*Request) bool                 { return true }
func (ioOpsWeigher) FixedMin() bool                       { return true }
func (ioOpsWeigher) Raw(h *HostState, _ *Request) float64 { return float64(h.NumIOOps) }

type buildFailureWeigher struct{}

func (buildFailureWeigher) Name() string         { return "BuildFailureWeigher" }
func (buildFailureWeigher) Active(*Request) bool { return true }
func (buildFailureWeigher) FixedMin() bool       { return false }
func (buildFailureWeigher) Raw(h *HostState, _ *Request) float64 {
	return float64(h.FailedBuilds)
}

type numInstancesWeigher struct{}

func (numInstancesWeigher) Name() string         { return "NumInstancesWeigher" }
func (numInstancesWeigher) Active(*Request) bool { return true }
func (numInstancesWeigher) FixedMin() bool       { return false }
func (numInstancesWeigher) Raw(h *HostState, _ *Request) float64 {
	return float64(h.NumInstances)
}

type softAffinityWeigher struct{}

func (softAffinityWeigher) Name() string { return "ServerGroupSoftAffinityWeigher" }
func (softAffinityWeigher) Active(r *Request) bool {
	return r.Group != nil && r.Group.Policy == "soft-affinity"
}
func (softAffinityWeigher) FixedMin() bool { return false }
func (softAffinityWeigher) Raw(h *HostState, r *Request) float64 {
	if r.Group == nil || r.Group.Policy != "soft-affinity" {
		return 0
	}
	return float64(r.Group.Members[h.Name])
}

type softAntiAffinityWeigher struct{}

func (softAntiAffinityWeigher) Name() string { return "ServerGroupSoftAntiAffinityWeigher" }
func (softAntiAffinityWeigher) Active(r *Request) bool {
	return r.Group != nil && r.Group.Policy == "soft-anti-affinity"
}
func (softAntiAffinityWeigher) FixedMin() bool { return false }
func (softAntiAffinityWeigher) Raw(h *HostState, r *Request) float64 {
	if r.Group == nil || r.Group.Policy != "soft-anti-affinity" {
		return 0
	}
	return -float64(r.Group.Members[h.Name])
}

// bounds returns Nova's normalisation range. A fixed-min weigher (Nova's
// minval = 0: RAM, CPU, Disk, IoOps) first clamps every raw value at 0 —
// in place, as Nova's weigh_objects does, so a host with negative free RAM
// weighs like one with none — and its range is 0 … largest. Any other
// weigher ranges from its smallest to its largest value.
func bounds(raw []float64, fixedMin bool) (lo, hi float64) {
	if len(raw) == 0 {
		return 0, 0
	}
	if fixedMin {
		for i, v := range raw {
			if v < 0 {
				raw[i] = 0
			}
		}
	}
	lo, hi = raw[0], raw[0]
	if fixedMin {
		lo = 0
	}
	for _, v := range raw {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

// normalize maps raw values to 0..1 as Nova does: (v − lo)/(hi − lo) over
// bounds; all-equal gives 0. It writes into out.
func normalize(raw, out []float64, fixedMin bool) {
	lo, hi := bounds(raw, fixedMin)
	for i, v := range raw {
		if lo == hi {
			out[i] = 0
		} else {
			out[i] = (v - lo) / (hi - lo)
		}
	}
}
