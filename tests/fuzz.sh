#!/usr/bin/env bash
# Runs every fuzz target for a short time (FUZZTIME, default 8s each): the
# compute, placement and identity request decoders (through their HTTP
# handlers: never a 5xx, errors in the API's own shape, a refused request
# changes nothing, bodies over 1 MiB are 413) and the config and scenario
# parsers (never a panic, errors name a line of the file), and the
# simulator (any scenario the loader accepts runs, under small caps, to an
# end with placement exact).
#
#   tests/fuzz.sh                 every target, 8 s each
#   FUZZTIME=5m tests/fuzz.sh     longer, by hand
#   tests/fuzz.sh --postgres      also the compute and placement targets on
#                                 the PostgreSQL store (a throw-away cluster;
#                                 a fresh database per input, so slower; their
#                                 seed corpora run in every go test anyway,
#                                 -pgfuzz.all for the whole cross product)
#
# A failure leaves its input under the package's testdata/fuzz/ directory;
# `go test -run 'FuzzName/<id>' ./pkg` replays it. A run that fails without
# writing one (Go's fuzzing engine at the -fuzztime boundary,
# golang/go#51484) is shown whole and run once more.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-8s}
targets=(
  "FuzzComputeRequests ./internal/api/computeapi/"
  "FuzzPlacementRequests ./internal/api/placementapi/"
  "FuzzLogin ./internal/identity/"
  "FuzzParse ./internal/config/"
  "FuzzParse ./internal/sim/scenario/"
  # A run takes milliseconds, so minimizing each new input at the default
  # (60 s of runs) would stall the worker: a few runs are enough.
  "FuzzRun ./internal/sim/ -fuzzminimizetime=5x"
)
if [ "${1:-}" = --postgres ]; then
  targets+=(
    "FuzzComputeRequestsPostgres ./internal/api/computeapi/"
    "FuzzPlacementRequestsPostgres ./internal/api/placementapi/"
  )
fi
# fuzz_once TARGET PKG ARGS…: one run, its last lines shown; on a failure
# the whole output, and the status 2 when the run wrote no failing input
# (the engine's own failure at the -fuzztime boundary, golang/go#51484:
# "context deadline exceeded" with nothing found), 1 when it did.
fuzz_once() {
  local target=$1 pkg=$2 out corpus before after
  shift 2
  out=$(mktemp)
  corpus="$pkg/testdata/fuzz/$target"
  before=$(ls "$corpus" 2>/dev/null | wc -l)
  if go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" -parallel 2 "$@" "$pkg" >"$out" 2>&1; then
    tail -n 3 "$out"
    rm -f "$out"
    return 0
  fi
  cat "$out"
  rm -f "$out"
  after=$(ls "$corpus" 2>/dev/null | wc -l)
  [ "$after" -gt "$before" ] && return 1
  return 2
}

for t in "${targets[@]}"; do
  set -- $t
  echo "-- $1 in $2 for $fuzztime"
  rc=0
  fuzz_once "$@" || rc=$?
  if [ "$rc" -eq 2 ]; then
    # No failing input was written: the fuzzing engine failed, not the
    # target. Run it once more; a second failure of any kind fails.
    echo "fuzz target $1 in $2: the run failed without a failing input (the engine's deadline, golang/go#51484); running it again"
    rc=0
    fuzz_once "$@" || rc=$?
  fi
  [ "$rc" -eq 0 ] || { echo "fuzz target $1 in $2 failed"; exit 1; }
done
