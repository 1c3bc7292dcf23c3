package conductor

import (
	"context"
	"fmt"

	"keel/internal/migration"
	"keel/internal/records"
	"keel/internal/store"
)

// Recover resumes every migration a restart of the server left active:
// the migration record is the source of truth. Before the memory copy a
// migration is rolled back (the destination claim returned, anything the
// destination prepared removed) and ends in error; during the copy it
// waits for the source agent's report; after it, the interrupted step is
// repeated (every step is idempotent), so the migration completes. It
// returns how many migrations it resumed.
//
// Run it once at start, before serving; with several servers, each one
// resuming the same migration is safe but redundant (steps are idempotent,
// and the record's version arbitrates between them).
func (c *Conductor) Recover(ctx context.Context) (int, error) {
	ms, err := c.store.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err != nil {
		return 0, fmt.Errorf("recovering migrations: %w", err)
	}
	n := 0
	for _, m := range ms {
		if m.Phase == "" || records.MigrationTerminal(m.Status) {
			continue
		}
		c.log.Info("resuming migration after restart", "migration", m.ID, "instance", m.InstanceUUID, "phase", m.Phase, "status", m.Status)
		if err := c.Handle(ctx, m.ID, migration.Event{Kind: migration.Resume}); err != nil {
			c.log.Error("resuming migration", "migration", m.ID, "err", err)
			continue
		}
		n++
	}
	return n, nil
}
