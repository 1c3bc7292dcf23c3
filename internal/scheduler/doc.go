// Package scheduler chooses hosts the way Nova's filter scheduler does —
// same filter and weigher names, option names, defaults and normalisation —
// from a host view that, by default, is exact at claim time.
//
// # The registry
//
// Every filter and weigher is one row of the tables in registry.go: a
// FilterSpec or WeigherSpec with its name, its [filter_scheduler] options
// and their defaults, how it reads a host (a weigher's Host function, or
// its per-request part; a filter's Fits, and for the resource and service
// checks a form that reads the dense rows), its sign and range. The
// decision's fast path, Explain, Config's defaults and checks, the
// configuration file's options (internal/config), the simulator's
// scenario keys (internal/sim/scenario) and docs/configuration.md's table (WriteTable)
// are all derived from those rows: adding a weigher is its spec and one
// row.
//
// # A decision
//
// A decision runs a pipeline assembled once in New:
//
//	view.Refresh            pull the store's change stream into the host view
//	ResourceFilter          always first: does the request fit the host's
//	                        inventory given its allocations (placement's
//	                        rule, placement.Admits), and does its provider
//	                        have the traits the flavor's or image's
//	                        trait:NAME=required|forbidden ask for (as
//	                        Placement's allocation candidates)
//	enabled_filters         each a small predicate, in the operator's order
//	weighers                raw value per host, normalised to 0..1 over the
//	                        candidates ((v−min)/(max−min), min fixed at 0 for
//	                        RAM/CPU/Disk/IoOps), times *_weight_multiplier
//	                        (or the one the host's aggregates set)
//	selection               best first (ties in host-name order, or shuffled
//	                        with shuffle_best_same_weighed_hosts); pick
//	                        among the first host_subset_size with a seed per
//	                        request (Selection.PickSeed); claim
//	claim                   the caller's write, checked by the store against
//	                        the provider generation the view holds; on a
//	                        conflict or capacity refusal, the next host, up to
//	                        max_attempts claims
//
// # Explain is the reference
//
// Explain is the reference semantics: every filter asked on every host's
// HostState, every weigher's raw value read through its spec and
// normalised on its own, a stable sort. Select's fast path — dense rows
// per host, bounds gathered while filtering, a ranked walk over B-tree
// orders (ranked.go), a two-way split of large passes — is an
// optimisation held to give the same hosts in the same order
// (TestSelectRanksLikeExplain on random clouds, TestFastPathAgreesWithExplain
// for every registry row). Given a past decision's Selection.PickSeed as
// Request.PickSeed, Explain names the host that decision picked.
//
// # Views
//
// The view has two sources for what weighers read (Policy): allocations
// (claim, exact the moment a claim commits) or host records written by the
// resource trackers (legacy and dest-update; those two differ only in when
// the trackers write). Whether a host fits is always decided from
// allocations.
//
// The view also follows the compute host aggregates: their metadata feeds
// AvailabilityZoneFilter (availability_zone),
// AggregateInstanceExtraSpecsFilter and per-host weigher multipliers.
// TestNovaDifferential checks the filters and weighers against Nova 26's
// own code (python3-nova).
//
// Time and randomness come from outside (a clock.Clock and a *rand.Rand), so
// the simulator replays decisions exactly.
package scheduler
