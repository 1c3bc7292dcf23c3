// Package computeapi serves keel's subset of the OpenStack compute API v2.1
// under /compute: version documents, flavors, servers, the os-migrateLive
// action, migrations (os-migrations and per server), hypervisors and
// services, with Nova's JSON shapes, its microversion headers and its
// error bodies ({"badRequest": {"code": 400, "message": …}}).
//
// The handlers are split by resource family as Nova's controllers are
// (api.go wires them): flavorsAPI, serversAPI, serverTagsAPI,
// serverMetadataAPI, serverActionsAPI, instanceActionsAPI, migrationsAPI,
// hypervisorsAPI, servicesAPI, zonesAPI, osHostsAPI, aggregatesAPI,
// serverGroupsAPI, quotasAPI, keyPairsAPI and usageAPI. Each holds base (the
// store, the clock, the log, the links' base URL; the lookups and views
// families share) and only the other dependencies it uses: the conductor
// for the servers, their actions and migrations, the image check for
// create and rebuild, the host view for the hypervisors.
//
// The servers' handlers are split by concern: serverview.go renders a
// server for the request's microversion, servercreate.go is POST /servers
// (parseCreate checks the body as Nova's schema does into a plain
// createRequest without reading the store; resolveCreate looks up what it
// names and checks the quotas; bootServers boots), serverlist.go is
// GET /servers, serveraction.go dispatches the server actions (moves.go,
// lifecycle.go and resetstate.go hold their own), servers.go the rest.
//
// The handlers hold no state: they read and write through the two
// interfaces this package declares (deps.go), Store (the records it serves
// and placement's provider reads) and Conductor (the intents it hands on:
// boots, deletes, lifecycle actions, moves, state resets), so several keel
// servers can serve the same cloud. A handler parses, checks and answers;
// what writes allocations or calls an agent is the conductor's.
package computeapi
