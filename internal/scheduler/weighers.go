package scheduler

// The weighers, one WeigherSpec each (their rows are in registry.go).

var ramWeigher = WeigherSpec{
	Name: "RAMWeigher",
	Multiplier: Option{Name: "ram_weight_multiplier", Default: 1.0,
		Help: "RAMWeigher's multiplier: positive spreads instances to the hosts with the most free RAM, negative stacks them on the hosts with the least."},
	Host:     func(h *HostState) float64 { return float64(h.FreeRAMMB) },
	FixedMin: true,
	Reads:    "free RAM",
}

var cpuWeigher = WeigherSpec{
	Name: "CPUWeigher",
	Multiplier: Option{Name: "cpu_weight_multiplier", Default: 1.0,
		Help: "CPUWeigher's multiplier: positive spreads instances to the hosts with the most free vCPUs, negative stacks them."},
	Host: func(h *HostState) float64 {
		return float64(h.VCPUsTotal)*h.CPUAllocationRatio - float64(h.VCPUsUsed)
	},
	FixedMin: true,
	Reads:    "free vCPUs (total × cpu_allocation_ratio − used)",
}

var diskWeigher = WeigherSpec{
	Name: "DiskWeigher",
	Multiplier: Option{Name: "disk_weight_multiplier", Default: 1.0,
		Help: "DiskWeigher's multiplier: positive spreads instances to the hosts with the most free disk, negative stacks them."},
	Host:     func(h *HostState) float64 { return float64(h.FreeDiskMB) },
	FixedMin: true,
	Reads:    "free disk",
}

var ioOpsWeigher = WeigherSpec{
	Name: "IoOpsWeigher",
	Multiplier: Option{Name: "io_ops_weight_multiplier", Default: -1.0,
		Help: "IoOpsWeigher's multiplier: negative prefers hosts with fewer I/O-heavy operations in flight (builds, resizes, migrations), positive more."},
	Host:     func(h *HostState) float64 { return float64(h.NumIOOps) },
	FixedMin: true,
	Reads:    "I/O-heavy operations in flight (host record)",
}

var buildFailureWeigher = WeigherSpec{
	Name: "BuildFailureWeigher",
	Multiplier: Option{Name: "build_failure_weight_multiplier", Default: 1000000.0,
		Help: "BuildFailureWeigher's multiplier: how strongly hosts with recent build failures are avoided. The large default outweighs every other weigher."},
	Host: func(h *HostState) float64 { return float64(h.FailedBuilds) },
	// Nova weighs the failure count itself and negates the multiplier, so
	// the best host's term is 0 and the others' negative (negating the
	// count instead shifts every weight by the multiplier).
	Negated: true,
	Reads:   "recent failed builds (host record)",
}

var numInstancesWeigher = WeigherSpec{
	Name: "NumInstancesWeigher",
	Multiplier: Option{Name: "num_instances_weight_multiplier", Default: 0.0,
		Help: "NumInstancesWeigher's multiplier: positive prefers hosts with more instances, negative fewer; 0.0 turns it off."},
	Host:  func(h *HostState) float64 { return float64(h.NumInstances) },
	Reads: "instances on the host (host record)",
}

var softAffinityWeigher = WeigherSpec{
	Name: "ServerGroupSoftAffinityWeigher",
	Multiplier: Option{Name: "soft_affinity_weight_multiplier", Default: 1.0, HasMin: true,
		Help: "ServerGroupSoftAffinityWeigher's multiplier: how strongly a soft-affinity group's members are placed together."},
	Active: func(r *Request) bool { return r.Group != nil && r.Group.Policy == "soft-affinity" },
	Request: func(h *HostState, r *Request) float64 {
		if r.Group == nil || r.Group.Policy != "soft-affinity" {
			return 0
		}
		return float64(r.Group.Members[h.Name])
	},
	Reads: "the request's soft-affinity group members on the host",
}

var softAntiAffinityWeigher = WeigherSpec{
	Name: "ServerGroupSoftAntiAffinityWeigher",
	Multiplier: Option{Name: "soft_anti_affinity_weight_multiplier", Default: 1.0, HasMin: true,
		Help: "ServerGroupSoftAntiAffinityWeigher's multiplier: how strongly a soft-anti-affinity group's members are kept apart."},
	Active: func(r *Request) bool { return r.Group != nil && r.Group.Policy == "soft-anti-affinity" },
	Request: func(h *HostState, r *Request) float64 {
		if r.Group == nil || r.Group.Policy != "soft-anti-affinity" {
			return 0
		}
		return -float64(r.Group.Members[h.Name])
	},
	Reads: "minus the request's soft-anti-affinity group members on the host",
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

// normalized is Nova's normalised value of v over the range lo … hi:
// (v − lo)/(hi − lo), and 0 when the range is empty.
func normalized(v, lo, hi float64) float64 {
	if hi > lo {
		return (v - lo) / (hi - lo)
	}
	return 0
}
