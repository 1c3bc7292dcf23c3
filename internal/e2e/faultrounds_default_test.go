//go:build !faults

package e2e

// faultRounds scales the fault rows: 1 in the default run (a
// representative slice, within ./test.sh's time budget); the faults
// build tag runs more (go test -tags faults -run Fault ./internal/e2e/).
const faultRounds = 1
