package novaplan

import (
	"context"
	"fmt"
	"maps"
	"time"

	"keel/internal/client"
	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// cloudSource is a Nova cloud as keel's scheduler view reads it: each
// host's provider with Placement's usage plus keel's claims not yet in
// Placement, its nova-compute service, and the aggregates. It has no
// change stream: a view is built on it for each decision.
type cloudSource struct {
	nc    *client.NovaCloud
	extra map[string]placement.Resources // host → claimed on top of Placement
	now   time.Time
}

func (s *cloudSource) ProviderSummaries(_ context.Context, uuids []string) ([]store.ProviderSummary, error) {
	var out []store.ProviderSummary
	for _, h := range s.nc.Hosts {
		if uuids != nil && !contains(uuids, h.ProviderUUID) {
			continue
		}
		used := maps.Clone(h.Used)
		if used == nil {
			used = placement.Resources{}
		}
		for rc, n := range s.extra[h.Name] {
			used[rc] += n
		}
		out = append(out, store.ProviderSummary{Provider: placement.Provider{UUID: h.ProviderUUID, Name: h.Name,
			Generation: h.Generation, Inventories: h.Inventories, Traits: h.Traits}, Usage: used})
	}
	return out, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func (s *cloudSource) ListHostRecords(context.Context) ([]records.HostRecord, error) { return nil, nil }

func (s *cloudSource) GetHostRecord(_ context.Context, host string) (records.HostRecord, error) {
	return records.HostRecord{}, fmt.Errorf("host record %s: %w", host, store.ErrNotFound)
}

func (s *cloudSource) service(h client.NovaHost) records.Service {
	svc := records.Service{Host: h.Name, Binary: "nova-compute", Disabled: h.Disabled, ForcedDown: h.ForcedDown, Zone: h.Zone, UpdatedAt: s.now}
	if h.Up {
		svc.LastSeenUp = s.now
	}
	return svc
}

func (s *cloudSource) ListServices(context.Context) ([]records.Service, error) {
	var out []records.Service
	for _, h := range s.nc.Hosts {
		out = append(out, s.service(h))
	}
	return out, nil
}

func (s *cloudSource) GetService(_ context.Context, host string) (records.Service, error) {
	if h, ok := s.nc.Host(host); ok {
		return s.service(*h), nil
	}
	return records.Service{}, fmt.Errorf("service %s: %w", host, store.ErrNotFound)
}

func (s *cloudSource) Changes(context.Context, int64, int) ([]store.Change, error) { return nil, nil }
func (s *cloudSource) LastChange(context.Context) (int64, error)                   { return 0, nil }
func (s *cloudSource) ListAggregates(context.Context) ([]records.Aggregate, error) {
	return s.nc.Aggregates, nil
}

// request is the scheduling request for moving server sv: its flavor, its
// server group with the other members' hosts, never onto a host in
// ignore.
func request(nc *client.NovaCloud, sv client.NovaServer, ignore []string) *scheduler.Request {
	req := &scheduler.Request{InstanceUUID: sv.UUID, Resources: sv.Flavor.Resources(), ExtraSpecs: sv.Flavor.ExtraSpecs,
		IgnoreHosts: ignore}
	for _, g := range nc.Groups {
		if !contains(g.Members, sv.UUID) {
			continue
		}
		sg := &scheduler.Group{Policy: g.Policy, MaxServerPerHost: g.MaxServerPerHost, Members: map[string]int{}}
		for _, m := range g.Members {
			if m == sv.UUID {
				continue
			}
			if o, ok := nc.Server(m); ok && o.Host != "" {
				sg.Members[o.Host]++
			}
		}
		req.Group = sg
	}
	return req
}
