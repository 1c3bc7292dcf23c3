// Command keelbench runs keel's benchmark harness and prints one table:
// scheduler decision latency, decide + durable claim on SQLite and
// PostgreSQL, boots and migrations through the HTTP API, keel side by side
// with OpenStack Placement 8.0 and with Nova 26's scheduler code, and the
// simulator's wall time, and how many hosts one keel server process
// carries (the fleet) — each figure with its conditions.
//
//	go run ./bench/cmd/keelbench              # everything, a few minutes
//	go run ./bench/cmd/keelbench --json       # the same figures as JSON
//	go run ./bench/cmd/keelbench --only placement,nova
//	go run ./bench/cmd/keelbench --quick      # shrunk sizes: checks it works
//	go run ./bench/cmd/keelbench --only fleet --server-cpuprofile server.pprof
//
// It needs Debian's postgresql, python3-placement, gunicorn and
// python3-nova (what .ci/run installs) and stops everything it starts.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"keel/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "keelbench:", err)
		os.Exit(1)
	}
}
