package client

import (
	"context"
	"fmt"

	"keel/internal/sim/scenario"
)

// CloudSnapshot reads the whole cloud (GET /keel/v1/cloud, admin): hosts with
// inventories, usage and service state, instances with flavors and hosts,
// server groups, aggregates, and the scheduler's and compute options in
// force — what keel sim export writes as a scenario file.
func (c *Client) CloudSnapshot(ctx context.Context) (scenario.Snapshot, error) {
	var snap scenario.Snapshot
	if _, err := c.keel.Get(ctx, c.keel.ServiceURL("cloud"), &snap, nil); err != nil {
		return scenario.Snapshot{}, fmt.Errorf("reading the cloud: %w", describe(err))
	}
	return snap, nil
}
