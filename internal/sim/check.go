package sim

import (
	"context"
	"fmt"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// checkConsistency compares the store's allocations with the instances at
// the end of a run: every ACTIVE instance holds exactly its flavor on its
// host's provider, no other consumer holds anything once no migration is
// active, and no provider is over capacity. It returns one line per
// problem.
func (w *world) checkConsistency(ctx context.Context) ([]string, error) {
	var problems []string
	sums, err := w.store.ProviderSummaries(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, s := range sums {
		for rc, used := range s.Usage {
			if inv, ok := s.Inventories[rc]; !ok || used > inv.Capacity() {
				problems = append(problems, fmt.Sprintf("host %s over capacity: %d %s used of %d", s.Name, used, rc, inv.Capacity()))
			}
		}
	}
	insts, err := w.store.ListInstances(ctx, "")
	if err != nil {
		return nil, err
	}
	expected := map[string]bool{}
	for _, in := range insts {
		if in.VMState != records.VMActive || in.TaskState != records.TaskNone {
			continue
		}
		expected[in.UUID] = true
		c, err := w.store.GetConsumer(ctx, in.UUID)
		if err != nil {
			problems = append(problems, fmt.Sprintf("instance %s on %s has no allocation", in.UUID, in.Host))
			continue
		}
		want := map[string]placement.Resources{"rp-" + in.Host: in.Flavor.Resources()}
		if len(c.Allocations) != 1 || !c.Allocations["rp-"+in.Host].Equal(want["rp-"+in.Host]) {
			problems = append(problems, fmt.Sprintf("instance %s on %s holds %v", in.UUID, in.Host, c.Allocations))
		}
	}
	active, err := w.store.ListMigrations(ctx, storeActive)
	if err != nil {
		return nil, err
	}
	if len(active) == 0 {
		for _, s := range sums {
			cs, err := w.store.ConsumersOn(ctx, s.UUID)
			if err != nil {
				return nil, err
			}
			for _, c := range cs {
				if !expected[c.UUID] {
					problems = append(problems, fmt.Sprintf("consumer %s (%s) still holds %v on %s", c.UUID, c.Type, c.Allocations[s.UUID], s.Name))
				}
			}
		}
	}
	return problems, nil
}

var storeActive = store.MigrationFilter{ActiveOnly: true}
