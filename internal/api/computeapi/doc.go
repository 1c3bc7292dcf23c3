// Package computeapi serves keel's subset of the OpenStack compute API v2.1
// under /compute: version documents, flavors, servers, the os-migrateLive
// action, migrations (os-migrations and per server), hypervisors and
// services, with Nova's JSON shapes, its microversion headers and its
// error bodies ({"badRequest": {"code": 400, "message": …}}).
//
// The handlers hold no state: they read and write through a Backend (the
// server's store and conductor), so several keel servers can serve the same
// cloud.
package computeapi
