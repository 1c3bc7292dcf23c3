package compute_test

import (
	"keel/internal/compute"
	"keel/internal/store/memory"
)

// The audit lists a host's consumers without their allocations from the
// in-memory store (compute.ConsumerLister). The assertion lives here, not
// in package memory: the store sits below compute and does not import it.
var _ compute.ConsumerLister = (*memory.Store)(nil)
