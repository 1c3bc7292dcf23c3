package scheduler

import (
	"fmt"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
)

// Filters is the decision's filter pipeline on its own: the same stages,
// built by the same constructors in the same order as New assembles them
// (pipeline), for a caller that keeps its own picture of the hosts and asks
// whether one host passes for one request — the rebalance planner, which
// checks every move it considers on the state the earlier moves leave.
// There is one filter implementation: a host Filters passes is one
// Select's filter pass keeps on a flat cloud. HostStates built by
// NewHostState are single providers: ResourceFilter checks them as flat
// hosts (the candidate search over provider trees and sharing providers
// needs a View).
type Filters struct {
	stages []stage
}

// NewFilters builds the pipeline of cfg's filters (ResourceFilter first,
// then cfg.EnabledFilters in order).
func NewFilters(cfg Config) (*Filters, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	return &Filters{stages: pipeline(cfg.Clone())}, nil
}

// pipeline is the filter stages for cfg, in the order decisions run them:
// the filters that always run (the resource check, which rejects the most
// hosts and is cheap) first, then the configured ones in the operator's
// order (as Nova runs them).
func pipeline(cfg Config) []stage {
	var out []stage
	for i := range filterTable {
		if f := &filterTable[i]; f.Always {
			out = append(out, stage{f.New(cfg), f})
		}
	}
	for _, name := range cfg.EnabledFilters {
		if f := filterSpec(name); !f.Always {
			out = append(out, stage{f.New(cfg), f})
		}
	}
	return out
}

// FilterCheck is the pipeline prepared for one request at one time: the
// filters that have something to check for it.
type FilterCheck struct {
	req    *Request
	active []stage
}

// For prepares req (as a decision does at its start, with now as the
// decision's time: ComputeFilter's heartbeat age) and returns the check.
// req must not change while the check is in use.
func (f *Filters) For(req *Request, now time.Time) *FilterCheck {
	req.prepare(now)
	c := &FilterCheck{req: req, active: make([]stage, 0, len(f.stages))}
	for _, s := range f.stages {
		if s.Active(req) {
			c.active = append(c.active, s)
		}
	}
	return c
}

// Passes reports whether h is a candidate for the request: not ignored by
// it (IgnoreHosts, RequestedHost) and accepted by every active filter.
func (c *FilterCheck) Passes(h *HostState) bool {
	if c.req.ignored(h.Name) {
		return false
	}
	for _, s := range c.active {
		if !s.Fits(h, c.req) {
			return false
		}
	}
	return true
}

// Rejects names the first filter that refuses h and why ("", "" when h
// passes), as Explain reports it.
func (c *FilterCheck) Rejects(h *HostState) (filter, reason string) {
	if c.req.ignored(h.Name) {
		return "ignored", "the request ignores this host"
	}
	for _, s := range c.active {
		if !s.Fits(h, c.req) {
			return s.Name(), s.Why(h, c.req)
		}
	}
	return "", ""
}

// HostInput describes a host for a HostState built outside a View.
type HostInput struct {
	Name         string
	ProviderUUID string
	Generation   int64
	Inventories  placement.Inventories
	// Used is the host's usage from allocations.
	Used   placement.Resources
	Traits []string
	// Service is the host's compute service (nil: none, which
	// ComputeFilter refuses). Its Zone, when set, is the host's zone.
	Service *records.Service
	// Record is the host record (nil: none); NumInstancesFilter and
	// IoOpsFilter read it.
	Record *records.HostRecord
	// Aggregates are the metadata of each aggregate the host is in.
	Aggregates []map[string]string
	// Capabilities feed ComputeCapabilitiesFilter and
	// ImagePropertiesFilter.
	Capabilities map[string]string
}

// NewHostState builds a host's state as a View would hold it under
// PolicyClaim (its weigher fields read its allocations).
func NewHostState(in HostInput) *HostState {
	h := &HostState{Name: in.Name, Zone: "nova", idx: -1, Capabilities: in.Capabilities}
	h.setProvider(placement.Provider{UUID: in.ProviderUUID, Name: in.Name, Generation: in.Generation,
		Inventories: in.Inventories, Traits: in.Traits}, in.Used)
	if in.Record != nil {
		h.Record, h.HasRecord = *in.Record, true
	}
	if in.Service != nil {
		h.setService(*in.Service)
	}
	h.setAggregates(in.Aggregates)
	h.derive(false)
	return h
}

// AddInstance counts one more instance of resources r on a HostState built
// by NewHostState (its usage, and its record's instance count when it has
// a record). It is for a caller's own what-if state; a View's hosts change
// only through the store.
func (h *HostState) AddInstance(r placement.Resources) { h.shift(r, 1) }

// RemoveInstance undoes AddInstance.
func (h *HostState) RemoveInstance(r placement.Resources) { h.shift(r, -1) }

func (h *HostState) shift(r placement.Resources, sign int64) {
	for rc, n := range r {
		if i := stdIndex(rc); i >= 0 {
			h.used[i] += sign * n
			continue
		}
		if h.other == nil {
			h.other = placement.Resources{}
		}
		h.other[rc] += sign * n
	}
	h.NumInstances += sign
	if h.HasRecord {
		h.Record.RunningVMs += sign
	}
	h.derive(false)
}

// Config returns a copy of the configuration the scheduler runs with.
func (s *Scheduler) Config() Config { return s.cfg.Clone() }
