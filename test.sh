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

section "openstackclient against keel dev"
tests/openstackclient.sh

section "OpenStack Watcher 9.0 against keel dev (catalog, Nova notifications over RabbitMQ, three audits)"
tests/watcher.sh

section "Tempest (compute API selection) against keel dev"
tests/tempest.sh

section "fuzz targets, a few seconds each"
FUZZTIME=${FUZZTIME:-5s} tests/fuzz.sh

section "real guests with QEMU: keel dev --driver qemu and openstackclient"
tests/qemu.sh

section "libvirt: daemons side by side in namespaces, keel dev --driver libvirt and the libvirt slice"
tests/libvirt.sh

section "a real OpenStack Nova 26 (Debian's packages, 12 fake hosts): the seed's drain by Nova and by Nova with contrib/nova's patch, keel sim's prediction of it"
tests/nova.sh

section "scale-out race test: 3 keel server replicas on PostgreSQL and nats-server, 200 hosts, 10,000 boots at once"
# Build tag scale: kept out of the -race run above (real processes, about
# two minutes); prints the figures (ACTIVE, No valid host, conflicts per
# placement, wall time).
go test -tags scale -count=1 -v -run '^TestRaceManyBoots$' -timeout 10m ./internal/e2e/ | grep -v '^=== RUN'
