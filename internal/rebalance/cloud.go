package rebalance

import (
	"context"
	"fmt"
	"slices"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Host is one hypervisor as the planner sees it.
type Host struct {
	Name         string
	ProviderUUID string
	// Inventories are the host's resource provider inventories.
	Inventories placement.Inventories
	// Used is the host's usage from allocations, everything included
	// (instances that may not move, migrations in flight); nil means the
	// sum of the flavors of the instances on the host.
	Used placement.Resources
	// Disabled and ForcedDown are its compute service's state: such a host
	// is neither counted in the imbalance nor a destination.
	Disabled   bool
	ForcedDown bool
	// LastSeenUp is its service's last heartbeat (ComputeFilter); zero
	// means heard from at Options.Now.
	LastSeenUp time.Time
	// Zone is its service's availability zone ("" means "nova").
	Zone   string
	Traits []string
	// Aggregates are the metadata of each aggregate the host is in (their
	// availability_zone, the keys AggregateInstanceExtraSpecsFilter reads).
	Aggregates []map[string]string
	// Record is the host record, when there is one (NumInstancesFilter and
	// IoOpsFilter read it).
	Record *records.HostRecord
	// Measured is the host's last measured CPU (MetricMeasured); nil when
	// it reported none.
	Measured *Measured
}

// Measured is a host's measured CPU and memory.
type Measured struct {
	// CPUPercent is the share of the host's CPUs busy (cpu.percent, a
	// fraction), everything on the host included.
	CPUPercent float64
	// MemoryMB is the host's memory in use, of MemoryTotalMB: as its
	// kernel reports it (keel.memory.total − keel.memory.available:
	// everything on the host, its own use and the guests' overhead
	// included, as cpu.percent counts the CPU) when the host reports it;
	// else (MemoryTotalMB 0) the memory its guests were measured resident
	// in, the sum over the instances its report measured, a share of the
	// MEMORY_MB inventory's total. Either way a move changes it by the
	// instance's resident memory.
	MemoryMB      int64
	MemoryTotalMB int64
	// At is when it was measured.
	At time.Time
	// Assumed says CPUPercent and MemoryMB include instances that moved
	// since At (FromStore: counted on their new host, no longer on the
	// one that measured them), as the scheduler assumes a claim's load.
	Assumed bool
}

// Instance is one instance.
type Instance struct {
	UUID string
	Host string
	// Flavor gives the instance's resources and the extra specs the
	// filters read.
	Flavor records.Flavor
	// Zone is the availability zone the instance asked for ("" for any).
	Zone string
	// Group is the UUID of its server group ("" for none).
	Group string
	// SameHost and DifferentHost are the instances its scheduler hints
	// name.
	SameHost      []string
	DifferentHost []string
	// Pinned instances count on their host but are never moved (not
	// ACTIVE, a task in flight).
	Pinned bool
	// BusyCPUs is the CPU the instance was last measured using, in CPUs
	// busy, and ResidentMB its resident memory, when HasBusy (its host's
	// last report measured it).
	BusyCPUs   float64
	ResidentMB int64
	HasBusy    bool
}

// Group is a server group.
type Group struct {
	UUID   string
	Policy string
	// MaxServerPerHost is anti-affinity's max_server_per_host (0 means 1).
	MaxServerPerHost int
}

// Cloud is the planner's input.
type Cloud struct {
	Hosts     []Host
	Instances []Instance
	Groups    []Group
}

// Source is what FromStore reads (a store.Store has every method).
type Source interface {
	ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
	ListServices(ctx context.Context) ([]records.Service, error)
	ListHostRecords(ctx context.Context) ([]records.HostRecord, error)
	ListAggregates(ctx context.Context) ([]records.Aggregate, error)
	ListInstances(ctx context.Context, host string) ([]records.Instance, error)
	ListServerGroups(ctx context.Context) ([]records.ServerGroup, error)
}

var _ Source = store.Store(nil)

// FromStore reads the cloud from the store: every resource provider with
// its usage (the host's), its compute service, host record (and the
// measured CPU its last report carried) and aggregates; every instance on
// a host, pinned unless it is ACTIVE with no task in flight, with its
// measured usage from its host's last report — or, for an instance that
// moved since, from its previous host's, its usage then counted on its
// new host and no longer on the previous one (assumeMove); every server
// group with a policy.
func FromStore(ctx context.Context, src Source) (Cloud, error) {
	sums, err := src.ProviderSummaries(ctx, nil)
	if err != nil {
		return Cloud{}, fmt.Errorf("reading resource providers: %w", err)
	}
	svcs, err := src.ListServices(ctx)
	if err != nil {
		return Cloud{}, fmt.Errorf("reading services: %w", err)
	}
	recs, err := src.ListHostRecords(ctx)
	if err != nil {
		return Cloud{}, fmt.Errorf("reading host records: %w", err)
	}
	aggs, err := src.ListAggregates(ctx)
	if err != nil {
		return Cloud{}, fmt.Errorf("reading aggregates: %w", err)
	}
	insts, err := src.ListInstances(ctx, "")
	if err != nil {
		return Cloud{}, fmt.Errorf("reading instances: %w", err)
	}
	groups, err := src.ListServerGroups(ctx)
	if err != nil {
		return Cloud{}, fmt.Errorf("reading server groups: %w", err)
	}
	svcBy := map[string]records.Service{}
	for _, s := range svcs {
		if s.Binary == "" || s.Binary == "nova-compute" {
			svcBy[s.Host] = s
		}
	}
	recBy := map[string]records.HostRecord{}
	// measuredOn: each instance's usage, by the hosts whose last report
	// measured it (two while a move's source and destination both list
	// it).
	measuredOn := map[string]map[string]records.InstanceUsage{}
	for _, r := range recs {
		recBy[r.Host] = r
		for _, u := range r.InstanceUsage {
			if measuredOn[u.UUID] == nil {
				measuredOn[u.UUID] = map[string]records.InstanceUsage{}
			}
			measuredOn[u.UUID][r.Host] = u
		}
	}
	aggBy := map[string][]map[string]string{}
	for _, a := range aggs {
		for _, h := range a.Hosts {
			aggBy[h] = append(aggBy[h], a.Metadata)
		}
	}
	var c Cloud
	for _, s := range sums {
		h := Host{Name: s.Name, ProviderUUID: s.UUID, Inventories: s.Inventories, Used: s.Usage, Traits: s.Traits, Aggregates: aggBy[s.Name]}
		if h.Used == nil {
			h.Used = placement.Resources{}
		}
		if svc, ok := svcBy[s.Name]; ok {
			h.Disabled, h.ForcedDown, h.LastSeenUp, h.Zone = svc.Disabled, svc.ForcedDown, svc.LastSeenUp, svc.Zone
			if h.LastSeenUp.IsZero() {
				h.LastSeenUp = time.Unix(0, 1) // a service that never reported is down, not "now"
			}
		} else {
			h.Disabled = true // no compute service: ComputeFilter refuses it
		}
		if r, ok := recBy[s.Name]; ok {
			h.Record = &r
			if m, ok := r.Metric(records.MetricCPUPercent); ok {
				h.Measured = &Measured{CPUPercent: m.Value, At: m.Timestamp}
				total, ok1 := r.Metric(records.MetricMemoryTotal)
				avail, ok2 := r.Metric(records.MetricMemoryAvailable)
				if ok1 && ok2 && total.Value > 0 && total.Timestamp.Equal(m.Timestamp) && avail.Timestamp.Equal(m.Timestamp) {
					h.Measured.MemoryTotalMB = int64(total.Value)
					h.Measured.MemoryMB = int64(total.Value - avail.Value)
				} else {
					for _, u := range r.InstanceUsage {
						h.Measured.MemoryMB += u.MemoryMB
					}
				}
			}
		}
		c.Hosts = append(c.Hosts, h)
	}
	slices.SortFunc(c.Hosts, func(a, b Host) int { return compareStr(a.Name, b.Name) })
	hostBy := make(map[string]*Host, len(c.Hosts))
	for i := range c.Hosts {
		hostBy[c.Hosts[i].Name] = &c.Hosts[i]
	}
	for _, in := range insts {
		if in.Host == "" {
			continue
		}
		i := Instance{UUID: in.UUID, Host: in.Host, Flavor: in.Flavor, Zone: in.RequestedZone,
			Pinned: in.VMState != records.VMActive || in.TaskState != records.TaskNone}
		on := measuredOn[in.UUID]
		if u, ok := on[in.Host]; ok {
			i.BusyCPUs, i.ResidentMB, i.HasBusy = u.VCPUsBusy, u.MemoryMB, true
		} else if u, ok := latest(on); ok {
			// Moved here since this host's last report.
			i.BusyCPUs, i.ResidentMB, i.HasBusy = u.VCPUsBusy, u.MemoryMB, true
			assumeLoad(hostBy[in.Host], u, 1)
		}
		for h, u := range on {
			if h != in.Host { // moved away since that host's last report
				assumeLoad(hostBy[h], u, -1)
			}
		}
		if in.Hints != nil {
			i.Group, i.SameHost, i.DifferentHost = in.Hints.Group, in.Hints.SameHost, in.Hints.DifferentHost
		}
		c.Instances = append(c.Instances, i)
	}
	slices.SortFunc(c.Instances, func(a, b Instance) int { return compareStr(a.UUID, b.UUID) })
	for _, g := range groups {
		c.Groups = append(c.Groups, Group{UUID: g.UUID, Policy: g.Policy, MaxServerPerHost: g.MaxServerPerHost})
	}
	return c, nil
}

// latest is an instance's most recent measured usage on any host (the
// earliest host name among equals).
func latest(on map[string]records.InstanceUsage) (records.InstanceUsage, bool) {
	var from string
	var last records.InstanceUsage
	for h, u := range on {
		if from == "" || u.Timestamp.After(last.Timestamp) || (u.Timestamp.Equal(last.Timestamp) && h < from) {
			from, last = h, u
		}
	}
	return last, from != ""
}

// assumeLoad is the scheduler's claim-time rule on the planner's view,
// for an instance that moved since the last reports (a guest runs on one
// host at a time, and the drivers measure every guest that runs): its
// measured usage u counts at once on its new host (sign 1) and no longer
// on a host whose report still lists it (sign −1), until the next
// reports say so themselves. A host without a measurement stays without
// one.
func assumeLoad(h *Host, u records.InstanceUsage, sign int64) {
	if h == nil || h.Measured == nil {
		return
	}
	m := h.Measured
	if cpus := float64(h.Inventories[placement.VCPU].Total); cpus > 0 {
		m.CPUPercent = min(max(m.CPUPercent+float64(sign)*u.VCPUsBusy/cpus, 0), 1)
	}
	m.MemoryMB = max(m.MemoryMB+sign*u.MemoryMB, 0)
	m.Assumed = true
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
