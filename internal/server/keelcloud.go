package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"keel/internal/api/computeapi"
	"keel/internal/records"
	"keel/internal/scheduler"
	"keel/internal/sim/scenario"
	"keel/internal/store"
)

// cloud answers GET /keel/v1/cloud: the whole cloud as `keel sim export`
// turns it into a scenario file — every compute host's inventories, usage,
// traits and service state, every instance on a host with its flavor and
// group, the server groups, the aggregates, and the scheduler's and
// compute options in force.
func (k *keelAPI) cloud(w http.ResponseWriter, r *http.Request) {
	snap, err := cloudSnapshot(r.Context(), k.st, k.sched.Config(), k.computeOpts)
	if err != nil {
		computeapi.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	snap.TakenAt = k.now().UTC()
	writeJSON(w, http.StatusOK, snap)
}

// snapshotStore is what a cloud snapshot reads: providers with their
// usage, services, instances, aggregates and server groups.
type snapshotStore interface {
	store.Providers
	store.Hosts
	store.Instances
	store.Groups
}

// cloudSnapshot reads the cloud from the store.
func cloudSnapshot(ctx context.Context, st snapshotStore, sc scheduler.Config, cp scenario.SnapshotCompute) (scenario.Snapshot, error) {
	snap := scenario.Snapshot{Compute: cp, Scheduler: scenario.SchedulerSnapshot(sc)}
	sums, err := st.ProviderSummaries(ctx, nil)
	if err != nil {
		return snap, fmt.Errorf("reading resource providers: %w", err)
	}
	svcs, err := st.ListServices(ctx)
	if err != nil {
		return snap, fmt.Errorf("reading services: %w", err)
	}
	byHost := map[string]records.Service{}
	for _, s := range svcs {
		if s.Binary != records.ServerBinary {
			byHost[s.Host] = s
		}
	}
	for _, p := range sums {
		svc, ok := byHost[p.Name]
		if !ok {
			continue // not a compute host (no compute service)
		}
		snap.Hosts = append(snap.Hosts, scenario.SnapshotHost{Name: p.Name, Inventories: p.Inventories, Used: p.Usage,
			Traits: p.Traits, Zone: svc.Zone, Disabled: svc.Disabled, ForcedDown: svc.ForcedDown})
	}
	slices.SortFunc(snap.Hosts, func(a, b scenario.SnapshotHost) int { return strings.Compare(a.Name, b.Name) })
	insts, err := st.ListInstances(ctx, "")
	if err != nil {
		return snap, fmt.Errorf("reading instances: %w", err)
	}
	for _, in := range insts { // in the store's order: creation order
		if in.Host == "" {
			continue
		}
		si := scenario.SnapshotInstance{UUID: in.UUID, Name: in.Name, Host: in.Host, Flavor: in.Flavor,
			RequestedZone: in.RequestedZone, VMState: string(in.VMState)}
		if in.Hints != nil {
			si.Group = in.Hints.Group
		}
		snap.Instances = append(snap.Instances, si)
	}
	if snap.ServerGroups, err = st.ListServerGroups(ctx); err != nil {
		return snap, fmt.Errorf("reading server groups: %w", err)
	}
	if snap.Aggregates, err = st.ListAggregates(ctx); err != nil {
		return snap, fmt.Errorf("reading aggregates: %w", err)
	}
	return snap, nil
}
