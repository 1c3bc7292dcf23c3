package compute

import (
	"context"
	"fmt"
	"log/slog"

	"keel/internal/migration"
	"keel/internal/records"
	"keel/internal/store"
)

// MigrationLister is what DestroyEvacuated reads: the migrations in
// flight on a host (the store, or rpc.Store over the bus).
type MigrationLister interface {
	ListMigrations(ctx context.Context, f store.MigrationFilter) ([]records.Migration, error)
}

// GuestDestroyer is what DestroyEvacuated asks of the driver.
type GuestDestroyer interface {
	Destroy(ctx context.Context, uuid string) error
}

// DestroyEvacuated is what an agent does first when it starts, before it
// serves anything (Nova's _destroy_evacuated_instances): it removes the
// guests of the instances evacuated from host while it was down whose
// rebuild ended on their destination (migration.RebuiltElsewhere), so an
// instance never runs on two hosts once rebuilt. An evacuation whose
// rebuild has not ended keeps its guest here: it may still revert to this
// host, and once rebuilt its machine removes the guest (cleanup-source),
// or the audit does (a stray). It returns the evacuations whose guest it
// destroyed.
func DestroyEvacuated(ctx context.Context, st MigrationLister, drv GuestDestroyer, host string, log *slog.Logger) ([]records.Migration, error) {
	ms, err := st.ListMigrations(ctx, store.MigrationFilter{Host: host, ActiveOnly: true})
	if err != nil {
		return nil, fmt.Errorf("agent %s: reading the evacuations from this host: %w", host, err)
	}
	var destroyed []records.Migration
	for _, m := range ms {
		if m.SourceHost != host || !migration.RebuiltElsewhere(m) {
			continue
		}
		log.Info("destroying the guest of an instance evacuated while this host was down", "instance", m.InstanceUUID, "migration", m.ID, "to", m.DestHost)
		if err := drv.Destroy(ctx, m.InstanceUUID); err != nil {
			return destroyed, fmt.Errorf("agent %s: destroying the evacuated guest %s: %w", host, m.InstanceUUID, err)
		}
		destroyed = append(destroyed, m)
	}
	return destroyed, nil
}
