// Package layers holds no code: its test checks that no keel package
// imports one above it. The layers, lowest first: utilities (clock, the
// HTTP helpers, flow, the drivers' low-level parts), placement, records,
// the pure machines (boot, lifecycle, migration, plan), the store
// interface, what reads it (the store backends, quota, scheduler,
// rebalance) and the image store the conductor writes snapshots to, compute (the agent's manager and the driver interface),
// what drives compute (the drivers, the audit, the conductor), the
// transport (bus, rpc, inproc), the edges (the agent, the HTTP APIs,
// identity, notifications, config, the simulator), the server and the
// client, and the commands. A package may import its own layer or
// below; the conductor, for one, may not import the bus, nor the store
// backends the compute package. A new package is placed in the table in
// layers_test.go.
//
// Its other test (sizes_test.go) reads every non-test Go file and fails
// on a type with more than 80 methods or a function of more than 140
// lines (issue 25), naming each with its file:line; the few known ones
// are listed there at their size, a list that may only shrink.
package layers
