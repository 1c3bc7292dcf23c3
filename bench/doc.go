// Package bench holds keel's cross-package benchmarks: figures that need
// several real parts at once (the scheduler deciding on a durable store).
// Run them with `go test -run XXX -bench . ./bench/`; they print figures
// and assert nothing about speed.
package bench
