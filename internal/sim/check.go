package sim

import (
	"context"

	"keel/internal/audit"
)

// checkConsistency runs keel's store audit at the end of a run: no host
// over capacity, every ACTIVE instance holding exactly its flavor on its
// host, no leaked migration or orphan allocation.
func (w *world) checkConsistency(ctx context.Context) ([]string, error) {
	return audit.Check(ctx, w.store)
}
