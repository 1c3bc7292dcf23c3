// Package rebalance plans live migrations that even out a cloud's usage.
//
// The imbalance is the coefficient of variation (standard deviation over
// mean) of the hosts' normalised usage — used ÷ capacity of one resource
// class (Metric ram, vcpu or disk), or the largest of the three (max) —
// over the enabled hosts. A Planner takes a picture of the cloud (Cloud:
// hosts with inventories, usage, service state, zones, aggregates and
// traits; instances with flavors, hosts and server groups) and returns an
// ordered list of moves, each of which lowers the imbalance:
//
//	CV ≤ Threshold           nothing to do (hysteresis: act above it)
//	loop, while CV ≥ Threshold/2 and fewer than MaxMoves moves:
//	  sources     the most loaded enabled hosts first
//	  instances   each source's movable instances, one per shape
//	              (flavor, zone, no group or hints: equivalent moves)
//	  destinations the least loaded enabled hosts first that pass the
//	              scheduler's own filters (scheduler.Filters: the same
//	              pipeline a decision runs, on the state the earlier
//	              moves leave), never a host the options exclude
//	  choice      of the moves that gain at least half the best gain,
//	              the one that copies the least RAM (cheap moves first);
//	              it must lower the CV by at least MinGain, else stop
//
// Never worse: a move is in the plan only if the CV after it is strictly
// lower than before it. No ping-pong: a plan moves an instance at most once,
// so A→B→A never appears and a chain A→B→C is always its single move A→C;
// instances moved within Options.Cooldown of Options.Now (MovedAt) are not
// moved at all. The planner does no I/O and reads no clock: the same Cloud,
// Options and Seed give the same plan.
package rebalance
