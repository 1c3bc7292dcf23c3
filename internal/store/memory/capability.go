package memory

import "keel/internal/compute"

// The audit lists a host's consumers without their allocations here.
var _ compute.ConsumerLister = (*Store)(nil)
