// Package audit checks the whole store's invariants — the guarantees keel
// makes about placement, whatever crashed meanwhile:
//
//   - no resource provider is over capacity;
//   - every ACTIVE instance with no task in progress holds exactly its
//     flavor, on its host's provider only;
//   - every migration consumer belongs to a migration still in progress;
//   - no instance holds allocations on two providers unless it is being
//     live-migrated;
//   - every allocation belongs to an instance or an in-progress migration.
//
// `keel audit` prints the violations; the simulator and the tests run it
// after every scenario.
package audit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// Reader is what the audit reads.
type Reader interface {
	ProviderSummaries(ctx context.Context, uuids []string) ([]store.ProviderSummary, error)
	ConsumersOn(ctx context.Context, providerUUID string) ([]placement.Consumer, error)
	ListInstances(ctx context.Context, host string) ([]records.Instance, error)
	ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error)
}

// Check returns one line per violation, sorted; none means the store is
// consistent.
func Check(ctx context.Context, st Reader) ([]string, error) {
	sums, err := st.ProviderSummaries(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("audit: reading providers: %w", err)
	}
	insts, err := st.ListInstances(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("audit: reading instances: %w", err)
	}
	active, err := st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return nil, fmt.Errorf("audit: reading migrations: %w", err)
	}
	var v []string
	rpOf := map[string]string{}   // host name → provider UUID
	nameOf := map[string]string{} // provider UUID → host name
	for _, s := range sums {
		rpOf[s.Name], nameOf[s.UUID] = s.UUID, s.Name
		for _, rc := range slices.Sorted(maps.Keys(s.Usage)) {
			inv, ok := s.Inventories[rc]
			if used := s.Usage[rc]; !ok || used > inv.Capacity() {
				v = append(v, fmt.Sprintf("host %s is over capacity: %d %s used of %d", s.Name, used, rc, inv.Capacity()))
			}
		}
	}
	moving := map[string]bool{}    // instances being live-migrated
	migrating := map[string]bool{} // active migration consumers
	for _, m := range active {
		moving[m.InstanceUUID], migrating[m.UUID] = true, true
	}
	byUUID := map[string]records.Instance{}
	for _, in := range insts {
		byUUID[in.UUID] = in
	}
	held := map[string]map[string]placement.Resources{} // consumer → provider → resources
	types := map[string]placement.ConsumerType{}
	for _, s := range sums {
		cs, err := st.ConsumersOn(ctx, s.UUID)
		if err != nil {
			return nil, fmt.Errorf("audit: reading allocations on %s: %w", s.Name, err)
		}
		for _, c := range cs {
			if held[c.UUID] == nil {
				held[c.UUID] = map[string]placement.Resources{}
			}
			held[c.UUID][s.UUID] = c.Allocations[s.UUID]
			types[c.UUID] = c.Type
		}
	}
	for _, c := range slices.Sorted(maps.Keys(held)) {
		allocs := held[c]
		switch in, isInstance := byUUID[c]; {
		case types[c] == placement.ConsumerMigration:
			if !migrating[c] {
				v = append(v, fmt.Sprintf("migration consumer %s holds %s but its migration is not in progress", c, describe(allocs, nameOf)))
			}
		case !isInstance:
			v = append(v, fmt.Sprintf("consumer %s holds %s but no instance or migration has that id", c, describe(allocs, nameOf)))
		case len(allocs) > 1 && !moving[c]:
			v = append(v, fmt.Sprintf("instance %s holds allocations on %d hosts (%s) and is not being migrated", c, len(allocs), describe(allocs, nameOf)))
		case in.VMState == records.VMError || in.VMState == records.VMDeleted:
			v = append(v, fmt.Sprintf("instance %s is %s but still holds %s", c, in.VMState, describe(allocs, nameOf)))
		}
	}
	for _, in := range insts {
		if in.VMState != records.VMActive || in.TaskState != records.TaskNone {
			continue
		}
		want := in.Flavor.Resources()
		allocs := held[in.UUID]
		rp, known := rpOf[in.Host]
		switch {
		case !known:
			v = append(v, fmt.Sprintf("instance %s runs on %q, which has no resource provider", in.UUID, in.Host))
		case len(allocs) == 0:
			v = append(v, fmt.Sprintf("instance %s on %s holds no allocation (want %s)", in.UUID, in.Host, want))
		case len(allocs) != 1 || !allocs[rp].Equal(want):
			v = append(v, fmt.Sprintf("instance %s on %s holds %s, want %s on %s only", in.UUID, in.Host, describe(allocs, nameOf), want, in.Host))
		}
	}
	sort.Strings(v)
	return v, nil
}

func describe(allocs map[string]placement.Resources, nameOf map[string]string) string {
	out := ""
	for i, p := range slices.Sorted(maps.Keys(allocs)) {
		if i > 0 {
			out += "; "
		}
		out += fmt.Sprintf("%s on %s", allocs[p], nameOf[p])
	}
	return out
}
