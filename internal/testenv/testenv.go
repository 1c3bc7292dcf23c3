// Package testenv marks the tests the fast loop leaves out. `go test
// -short ./...` needs nothing but Go: a test that needs a Debian package or
// starts a process of its own (PostgreSQL, nats-server, Chromium, Python's
// Nova or Placement, QEMU, libvirtd, keel's own binary, mount or ip netns) calls
// External first, and under -short it is skipped with one line saying what
// it needs. Without -short nothing is skipped: ./test.sh and CI run every
// such test, and a missing package fails it, naming the package.
package testenv

import (
	"context"
	"testing"
	"time"
)

// External skips tb under -short, saying it needs what (e.g. "PostgreSQL
// (Debian's postgresql)"); otherwise it does nothing.
func External(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("left out of the fast loop (-short): needs %s; ./test.sh runs it", what)
	}
}

// Context is a context for a test's whole run that ends when the test
// binary's own deadline (go test -timeout) is 30 s away, or when the test
// ends, instead of a fixed bound: a test that passes in a minute on a quiet
// machine may need five at a load of 30, and a fixed bound turns that into
// a failure. The 30 s leave time to report what was still waiting.
func Context(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := t.Deadline(); ok {
			ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-30*time.Second))
		}
	}
	tb.Cleanup(cancel)
	return ctx
}

// Poll calls cond every 20 ms until it returns nil, bounded by Context(tb)
// rather than a fixed time: a wait on readiness that passes in 100 ms on a
// quiet machine may need seconds at a load of 30. When the time runs out it
// fails tb with what was awaited, how long, and cond's last error.
func Poll(tb testing.TB, what string, cond func() error) {
	tb.Helper()
	ctx := Context(tb)
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("%s: still not so after %s, when the test's time ran out: %v", what, time.Since(start).Round(time.Millisecond), err)
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}
