package migration

import "keel/internal/records"

// What an agent may ask of a migration record. The agents decide from
// these, never from the phase names, so the machine may rename or split
// its phases without an agent changing; what fences a late call is the
// record's version the call carries (compute.Manager), not its phase.

// SourceCopying reports whether m waits for its source host's copy: a
// live migration's memory copy, or a cold migration's or resize's disk
// copy (resize_instance). An evacuation has no copy.
func SourceCopying(m records.Migration) bool {
	switch m.Type {
	case records.MigrationTypeEvac:
		return false
	case records.MigrationTypeCold, records.MigrationTypeResize:
		return m.Phase == PhaseResizeSource && m.Status == records.MigrationMigrating
	}
	return m.Phase == PhaseCopy && m.Status == records.MigrationRunning
}

// LiveCopying reports whether m is a live migration in its memory copy,
// whatever its status says (an abort asked for during the copy leaves it
// there until the copy's end is reported).
func LiveCopying(m records.Migration) bool {
	return m.Phase == PhaseCopy
}

// Rebuilding reports whether m is an evacuation waiting for its
// destination's rebuild of the guest.
func Rebuilding(m records.Migration) bool {
	return m.Type == records.MigrationTypeEvac && m.Phase == PhaseRebuild
}

// RebuiltElsewhere reports whether m is an evacuation whose rebuild ended
// on its destination (status done): the guest its source still has is
// stale, and the source's agent destroys it when it comes back. Until
// then the evacuation may still revert to its source, keel's answer to a
// rebuild that fails (Nova's leaves the instance in ERROR on the
// destination, so its returning source destroys the guest from the start
// of the evacuation): the source keeps the guest, and the machine's
// cleanup-source removes it once rebuilt.
func RebuiltElsewhere(m records.Migration) bool {
	return m.Type == records.MigrationTypeEvac && m.Status == records.MigrationDone
}
