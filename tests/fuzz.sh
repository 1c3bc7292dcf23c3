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
# `go test -run 'FuzzName/<id>' ./pkg` replays it.
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
for t in "${targets[@]}"; do
  set -- $t
  echo "-- $1 in $2 for $fuzztime"
  go test -run '^$' -fuzz "^$1\$" -fuzztime "$fuzztime" -parallel 2 "${@:3}" "$2" 2>&1 | tail -n 3
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz target $1 in $2 failed"; exit 1; }
done
