// Package scheduler chooses hosts the way Nova's filter scheduler does —
// same filter and weigher names, option names, defaults and normalisation —
// from a host view that, by default, is exact at claim time.
//
// A decision runs a pipeline assembled once in New:
//
//	view.Refresh            pull the store's change stream into the host view
//	ResourceFilter          always first: does the request fit the host's
//	                        inventory given its allocations, and does its
//	                        provider have the traits the flavor's or image's
//	                        trait:NAME=required|forbidden ask for (as
//	                        Placement's allocation candidates)
//	enabled_filters         each a small predicate; cheap ones first
//	weighers                raw value per host, normalised to 0..1 over the
//	                        candidates ((v−min)/(max−min), min fixed at 0 for
//	                        RAM/CPU/Disk/IoOps), times *_weight_multiplier
//	                        (or the one the host's aggregates set)
//	selection               best first (ties in host-name order, or shuffled
//	                        with shuffle_best_same_weighed_hosts); pick at
//	                        random among the first host_subset_size; claim
//	claim                   the caller's write, checked by the store against
//	                        the provider generation the view holds; on a
//	                        conflict or capacity refusal, the next host, up to
//	                        max_attempts claims
//
// The view has two sources for what weighers read (Policy): allocations
// (claim, exact the moment a claim commits) or host records written by the
// resource trackers (legacy and dest-update; those two differ only in when
// the trackers write). Whether a host fits is always decided from
// allocations.
//
// The view also follows the compute host aggregates: their metadata feeds
// AvailabilityZoneFilter (availability_zone),
// AggregateInstanceExtraSpecsFilter and per-host weigher multipliers. TestNovaDifferential checks the
// filters and weighers against Nova 26's own code (python3-nova).
//
// Time and randomness come from outside (a clock.Clock and a *rand.Rand), so
// the simulator replays decisions exactly.
package scheduler
