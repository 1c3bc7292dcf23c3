//go:build faults

package e2e

// faultRounds under the faults build tag: the full matrix (more hang-ups,
// more kill rounds); run it with several seeds, e.g.
//
//	for s in 1 2 3; do KEEL_FAULT_SEED=$s go test -tags faults -count=1 -run 'Fault|Kill' ./internal/e2e/; done
const faultRounds = 4
