package scheduler

import (
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// Policy says what the weighers read.
type Policy string

// The host-view policies.
const (
	// PolicyClaim: weighers read usage from allocations, exact at claim
	// time (keel's default).
	PolicyClaim Policy = "claim"
	// PolicyDestUpdate: weighers read host records, and the destination's
	// tracker writes its record as soon as a migration lands.
	PolicyDestUpdate Policy = "dest-update"
	// PolicyLegacy: weighers read host records, and the destination's record
	// is refreshed only by a spawn or the periodic audit (Nova today).
	PolicyLegacy Policy = "legacy"
)

// Policies lists every policy, in the order reports show them.
var Policies = []Policy{PolicyLegacy, PolicyDestUpdate, PolicyClaim}

// ParsePolicy checks a policy name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	return "", &placement.InvalidError{Msg: "unknown policy " + s + " (legacy, dest-update, claim)"}
}

// ReadsRecords reports whether weighers read host records under p.
func (p Policy) ReadsRecords() bool { return p != PolicyClaim }

// std indexes the three standard classes in fixed-size arrays, so the hot
// loop does no map look-ups.
const (
	iVCPU = iota
	iMem
	iDisk
	numStd
)

var stdClasses = [numStd]placement.ResourceClass{placement.VCPU, placement.MemoryMB, placement.DiskGB}

// HostState is the scheduler's view of one host. Fit is always decided from
// Inv and Used (allocations); the weigher fields come from allocations or
// from the host record according to the policy.
type HostState struct {
	// Hot fields first: the decision loop reads only these, so they share
	// a few cache lines.
	hasInv     [numStd]bool
	HasService bool
	Disabled   bool
	ForcedDown bool
	capacity   [numStd]int64
	used       [numStd]int64
	inv        [numStd]placement.Inventory
	LastSeenUp time.Time

	// What the weighers read (Nova's HostState names).
	FreeRAMMB          int64
	FreeDiskMB         int64
	VCPUsTotal         int64
	VCPUsUsed          int64
	CPUAllocationRatio float64
	NumIOOps           int64
	NumInstances       int64
	FailedBuilds       int64

	idx int // row in the view's dense arrays

	Name         string
	ProviderUUID string
	Generation   int64
	// Traits are the provider's placement traits, sorted (what a
	// flavor's or image's trait:NAME=required|forbidden asks about).
	Traits []string
	Zone   string

	otherInv placement.Inventories // non-standard classes
	other    placement.Resources   // their usage

	Record    records.HostRecord
	HasRecord bool

	// Capabilities feed ComputeCapabilitiesFilter and ImagePropertiesFilter
	// (e.g. hypervisor_type, cpu_info.arch).
	Capabilities map[string]string
	// AggregateMetadata feeds AggregateInstanceExtraSpecsFilter: key → values
	// over the host's aggregates.
	AggregateMetadata map[string][]string
	// multipliers are the weigher multipliers the host's aggregates set
	// (option name → value), overriding the configured ones for this host.
	multipliers map[string]float64
	// assumed are the loads claims added to (or took from) the host's
	// measured CPU since its last measurement (MeasuredMetric).
	assumed []assumedLoad
}

// Used returns the host's usage from allocations.
func (h *HostState) Used() placement.Resources {
	r := h.other.Clone()
	for i, rc := range stdClasses {
		if h.used[i] != 0 {
			r[rc] = h.used[i]
		}
	}
	return r
}

// Inventories returns the host's inventories.
func (h *HostState) Inventories() placement.Inventories {
	out := h.otherInv.Clone()
	for i, rc := range stdClasses {
		if h.hasInv[i] {
			out[rc] = h.inv[i]
		}
	}
	return out
}

// WeigherUsed returns the usage the weighers see (reserved amounts
// excluded), to compare with Used: a decision is stale when they differ.
func (h *HostState) WeigherUsed() placement.Resources {
	mem := h.inv[iMem]
	disk := h.inv[iDisk]
	return placement.Resources{
		placement.VCPU:     h.VCPUsUsed,
		placement.MemoryMB: mem.Total - mem.Reserved - h.FreeRAMMB,
		placement.DiskGB:   disk.Total - disk.Reserved - h.FreeDiskMB/1024,
	}
}

// setProvider loads inventories and usage from a provider summary.
func (h *HostState) setProvider(p placement.Provider, usage placement.Resources) {
	h.ProviderUUID = p.UUID
	h.Generation = p.Generation
	h.Traits = p.Traits
	h.otherInv, h.other = nil, nil
	for i := range stdClasses {
		h.hasInv[i], h.inv[i], h.capacity[i], h.used[i] = false, placement.Inventory{}, 0, 0
	}
	for rc, inv := range p.Inventories {
		if i := stdIndex(rc); i >= 0 {
			h.hasInv[i], h.inv[i], h.capacity[i] = true, inv, inv.Capacity()
			continue
		}
		if h.otherInv == nil {
			h.otherInv = placement.Inventories{}
		}
		h.otherInv[rc] = inv
	}
	for rc, n := range usage {
		if i := stdIndex(rc); i >= 0 {
			h.used[i] = n
			continue
		}
		if h.other == nil {
			h.other = placement.Resources{}
		}
		h.other[rc] = n
	}
}

// addChild adds the inventories and usage of a provider of the host's
// tree below its own (a NUMA cell, a physical GPU) to the host's totals:
// the weighers and the flat checks read the tree's sums, and placement's
// candidate search decides where each class comes from.
func (h *HostState) addChild(invs placement.Inventories, usage placement.Resources) {
	for rc, inv := range invs {
		if i := stdIndex(rc); i >= 0 {
			if !h.hasInv[i] {
				h.hasInv[i], h.inv[i], h.capacity[i] = true, inv, inv.Capacity()
				continue
			}
			sum := &h.inv[i]
			sum.Total = placement.AddAmounts(sum.Total, inv.Total)
			sum.Reserved = placement.AddAmounts(sum.Reserved, inv.Reserved)
			sum.MaxUnit = max(sum.MaxUnit, inv.MaxUnit)
			sum.MinUnit = min(sum.MinUnit, inv.MinUnit)
			h.capacity[i] = placement.AddAmounts(h.capacity[i], inv.Capacity())
			continue
		}
		if h.otherInv == nil {
			h.otherInv = placement.Inventories{}
		}
		if cur, ok := h.otherInv[rc]; ok {
			inv.Total += cur.Total
			inv.Reserved += cur.Reserved
			inv.MaxUnit = max(inv.MaxUnit, cur.MaxUnit)
		}
		h.otherInv[rc] = inv
	}
	for rc, n := range usage {
		if i := stdIndex(rc); i >= 0 {
			h.used[i] += n
			continue
		}
		if h.other == nil {
			h.other = placement.Resources{}
		}
		h.other[rc] += n
	}
}

func stdIndex(rc placement.ResourceClass) int {
	switch rc {
	case placement.VCPU:
		return iVCPU
	case placement.MemoryMB:
		return iMem
	case placement.DiskGB:
		return iDisk
	}
	return -1
}

// derive recomputes the weigher fields for the policy.
func (h *HostState) derive(readsRecords bool) {
	if readsRecords && h.HasRecord {
		r := h.Record
		h.FreeRAMMB = r.FreeRAMMB
		h.FreeDiskMB = r.FreeDiskGB * 1024
		h.VCPUsTotal = r.VCPUs
		h.VCPUsUsed = r.VCPUsUsed
		h.CPUAllocationRatio = r.CPUAllocationRatio
	} else {
		mem, disk, cpu := h.inv[iMem], h.inv[iDisk], h.inv[iVCPU]
		h.FreeRAMMB = mem.Total - mem.Reserved - h.used[iMem]
		h.FreeDiskMB = (disk.Total - disk.Reserved - h.used[iDisk]) * 1024
		h.VCPUsTotal = cpu.Total
		h.VCPUsUsed = h.used[iVCPU]
		h.CPUAllocationRatio = cpu.AllocationRatio
	}
	if h.HasRecord {
		h.NumIOOps = h.Record.NumIOOps
		h.NumInstances = h.Record.RunningVMs
		h.FailedBuilds = h.Record.FailedBuilds
	}
}

// consume adds a claimed request to the host's usage (the scheduler
// "assumes" its own claim until the change stream confirms it).
func (h *HostState) consume(r *Request, newGen int64, readsRecords bool) {
	for rc, n := range r.unnamed {
		if i := stdIndex(rc); i >= 0 {
			h.used[i] += n
			continue
		}
		if h.other == nil {
			h.other = placement.Resources{}
		}
		h.other[rc] += n
	}
	if newGen > h.Generation {
		h.Generation = newGen
	}
	h.derive(readsRecords)
}
