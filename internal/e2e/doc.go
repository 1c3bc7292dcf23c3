// Package e2e holds keel's end-to-end tests: they build the keel binary
// and run `keel server` and several `keel agent` processes on loopback
// ports, each with its own data dir, drive them over HTTP like a user, kill
// them with SIGKILL mid-operation, and check the guarantees with `keel
// audit`'s endpoint. There is no library code here.
package e2e
