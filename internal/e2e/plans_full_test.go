//go:build faults

package e2e

// The drain-spread test's cloud under the faults build tag: 40 hosts with
// 12 instances each, 5 drained with --parallel 8 (60 moves), as the
// issue names it.
const (
	drainCloudHosts = 40
	drainedHosts    = 5
)
