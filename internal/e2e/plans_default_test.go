//go:build !faults

package e2e

// The drain-spread test's cloud in the default run: 16 hosts with 12
// instances each, 2 drained (24 moves). The faults build tag runs the
// issue's full 40 × 12 with 5 drained (plans_full_test.go).
const (
	drainCloudHosts = 16
	drainedHosts    = 2
)
