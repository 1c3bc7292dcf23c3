#!/usr/bin/env bash
# Runs every check and test keel has: formatting, go vet, and the whole test
# suite under the race detector. CI (.ci/run) calls exactly this script.
#
# First it checks the Debian packages the tests need (tests/packages.txt):
# run as root on Debian it installs the missing ones (apt-get update, then
# apt-get install); otherwise it prints the apt-get line they need and stops.
#
#   ./test.sh            everything
#   ./test.sh -short     the fast loop's go test -short: leaves out the tests
#                        that need a Debian package (testenv.External)
#
# After the Go tests, tests/openstackclient.sh drives keel dev with Debian's
# openstackclient (python3-openstackclient), tests/watcher.sh runs
# OpenStack Watcher's audits against it (watcher-*, rabbitmq-server),
# tests/tempest.sh runs a selection of Tempest's compute API tests (tempest),
# tests/fuzz.sh runs every fuzz target for a few seconds (FUZZTIME),
# tests/qemu.sh and tests/libvirt.sh (--full for its whole set) run real
# guests under QEMU and libvirt, and tests/nova.sh drains the seed on a real
# Nova 26.
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"

# shellcheck source=tests/packages.sh
. tests/packages.sh
mapfile -t missing < <(keel_missing_packages)
if [ ${#missing[@]} -gt 0 ]; then
  if keel_can_install; then
    echo "== installing the Debian packages the tests need: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    keel_install "${missing[@]}"
  else
    echo "./test.sh needs Debian packages that are not installed (tests/packages.txt says what for);"
    echo "install them as root, or run ./test.sh as root on Debian to have it do so:"
    echo "  $(keel_install_line "${missing[@]}")"
    exit 1
  fi
fi

# section NAME starts a timed part: each part's wall time and the load
# average are printed when the script ends (pass or fail), so a slow or
# loaded run says where its time went.
start=$(date +%s)
sections=()
current=""
current_start=$start
section() {
  local now
  now=$(date +%s)
  [ -n "$current" ] && sections+=("$(printf '%5ds  %s' $((now - current_start)) "$current")")
  current="$1"
  current_start=$now
  [ -z "$1" ] || echo "== $1 (at $((now - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"
}
report_times() {
  local rc=$?
  section ""
  echo "== wall time per part (total $(( $(date +%s) - start )) s, load now $(cut -d' ' -f1-3 /proc/loadavg)):"
  printf '%s\n' "${sections[@]}"
  [ -s "${lanes:-}/times" ] && { echo "   of which, per lane:"; sed 's/^/  /' "$lanes/times"; }
  [ -n "${lanes:-}" ] && rm -rf "$lanes"
  return $rc
}
trap report_times EXIT

section "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change these files (run: gofmt -w .):"
  echo "$unformatted"
  exit 1
fi

section "go vet"
go vet ./...

section "go test -race"
go test -race -count=1 -parallel 8 -timeout 15m "$@" ./...

# The parts after the Go tests are mostly single-threaded: Python clients
# and services (openstackclient, Watcher, Tempest, a real Nova) waiting on
# each other and on keel. Run one after another they left a quiet 2-core
# machine at a load of about 1 for 25 minutes, so they run in two lanes
# side by side. Each part picks free ports and its own directories; the
# two that start a RabbitMQ (Watcher, Nova) share lane B, one after the
# other. Every line a part prints is prefixed with its lane; a lane stops
# at its first failing part, the other goes on to its end, and the script
# fails if either failed. KEEL_TEST_LANES=1 runs the parts one after
# another (lane A, then lane B), as before.
lanes=$(mktemp -d /tmp/keel-test-lanes.XXXXXX)
# part LANE TITLE CMD…: one timed part of a lane, its output prefixed.
part() {
  local lane=$1 title=$2 t0 rc=0
  shift 2
  t0=$(date +%s)
  echo "== [$lane] $title (at $((t0 - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"
  # Through a file, not a pipe: a daemon a part leaves behind holding its
  # output open would keep a pipe's reader waiting forever.
  local log pid tailer
  log=$(mktemp "$lanes/part.XXXXXX")
  "$@" >"$log" 2>&1 &
  pid=$!
  tail -n +1 -s 0.5 -f --pid="$pid" "$log" | sed -u "s/^/[$lane] /" &
  tailer=$!
  wait "$pid" || rc=$?
  wait "$tailer" || true
  printf '%5ds  [%s] %s%s\n' $(( $(date +%s) - t0 )) "$lane" "$title" "$([ $rc -eq 0 ] || echo " (failed, status $rc)")" >>"$lanes/times"
  return $rc
}
lane_a() {
  set +m
  part A "openstackclient against keel dev" tests/openstackclient.sh &&
  part A "Tempest (compute API selection) against keel dev" env TEMPEST_CONCURRENCY="${TEMPEST_CONCURRENCY:-2}" tests/tempest.sh &&
  part A "real guests with QEMU: keel dev --driver qemu and openstackclient" tests/qemu.sh &&
  part A "libvirt: daemons side by side in namespaces, keel dev --driver libvirt and the libvirt slice" tests/libvirt.sh
}
scale_race() {
  # Build tag scale: kept out of the -race run above (real processes, about
  # two minutes); prints the figures (ACTIVE, No valid host, conflicts per
  # placement, wall time).
  go test -tags scale -count=1 -v -run '^TestRaceManyBoots$' -timeout 10m ./internal/e2e/ | grep -v '^=== RUN'
}
lane_b() {
  set +m
  part B "OpenStack Watcher 9.0 against keel dev (catalog, Nova notifications over RabbitMQ, three audits)" tests/watcher.sh &&
  part B "fuzz targets, a few seconds each" env FUZZTIME="${FUZZTIME:-5s}" tests/fuzz.sh &&
  part B "a real OpenStack Nova 26 (Debian's packages, 12 fake hosts): the seed's drain by Nova and by Nova with contrib/nova's patch, keel sim's prediction of it" tests/nova.sh &&
  part B "scale-out race test: 3 keel server replicas on PostgreSQL and nats-server, 200 hosts, 10,000 boots at once" scale_race
}

section "the external parts in two lanes (A: openstackclient, Tempest, QEMU, libvirt; B: Watcher, fuzz, real Nova, scale-out race)"
rc_a=0 rc_b=0
if [ "${KEEL_TEST_LANES:-2}" = 1 ]; then
  lane_a || rc_a=$?
  lane_b || rc_b=$?
else
  # Each lane in a process group of its own, so an interrupted run stops
  # both with everything they started.
  set -m
  lane_a & pid_a=$!
  lane_b & pid_b=$!
  set +m
  trap 'kill -TERM -- -$pid_a -$pid_b 2>/dev/null; exit 130' INT TERM
  wait "$pid_a" || rc_a=$?
  wait "$pid_b" || rc_b=$?
  trap - INT TERM
fi
[ "$rc_a" -eq 0 ] || echo "lane A failed (status $rc_a): see its [A] lines above"
[ "$rc_b" -eq 0 ] || echo "lane B failed (status $rc_b): see its [B] lines above"
[ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ]
