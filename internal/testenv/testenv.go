// Package testenv marks the tests the fast loop leaves out. `go test
// -short ./...` needs nothing but Go: a test that needs a Debian package or
// starts a process of its own (PostgreSQL, nats-server, Chromium, Python's
// Nova or Placement, QEMU, libvirtd, keel's own binary, mount or ip netns) calls
// External first, and under -short it is skipped with one line saying what
// it needs. Without -short nothing is skipped: ./test.sh and CI run every
// such test, and a missing package fails it, naming the package.
package testenv

import "testing"

// External skips tb under -short, saying it needs what (e.g. "PostgreSQL
// (Debian's postgresql)"); otherwise it does nothing.
func External(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("left out of the fast loop (-short): needs %s; ./test.sh runs it", what)
	}
}
