# shellcheck shell=bash
# What tests/openstackclient.sh, qemu.sh, libvirt.sh, watcher.sh and
# tempest.sh share:
# a workspace removed on exit, `keel dev` built from this tree and started
# on loopback, and the helpers their checks use. Source it from the top of
# the keel tree after `set -euo pipefail`:
#
#   need CMD PACKAGE…        exit 1 unless CMD (a path or a name) runs,
#                            naming the Debian packages that provide it
#   workspace [TEMPLATE]     $work := a new temporary directory (mktemp -d
#                            TEMPLATE); on exit keel dev is stopped, the
#                            script's on_exit function runs if it has one,
#                            and $work is removed unless keep_work is set
#   start_keel_dev ARGS…     builds $work/keel and runs `keel dev ARGS…` on
#                            127.0.0.1 with its data in $work/data and its
#                            log in $work/dev.log; once it is up (20 s at
#                            most): $keel_banner (its "keel dev: …" line),
#                            $keel_url (the API's URL), and
#                            OS_CLIENT_CONFIG_FILE exported for `os`
#   oscd_start               starts tests/oscd.py's server in the
#                            background (call it before start_keel_dev:
#                            it warms up while keel builds): from then on
#                            osc runs each command in a fork of an
#                            openstack process that has imported
#                            everything already, a few hundred ms instead
#                            of one to two seconds (ten on a loaded machine)
#   osc ARGS…                openstack ARGS… (through oscd once started)
#   os ARGS…                 openstackclient on keel dev's cloud
#   fail MSG                 reports MSG with the end of keel dev's log; exit 1
#   expect WANT GOT WHAT     fails unless GOT is WANT; prints "ok  WHAT"

OPENSTACK=/usr/bin/openstack
keel_tests=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

need() {
  local cmd=$1
  shift
  if ! command -v "$cmd" >/dev/null; then
    echo "$(basename "$0"): $cmd not found; install it with:" >&2
    echo "  apt-get install -y --no-install-recommends $*" >&2
    exit 1
  fi
}

work=
pid=
oscd_pid=
oscd_sock=
keep_work=
keel_banner=
keel_url=

workspace() {
  work=$(mktemp -d ${1:+"$1"})
  trap _keel_cleanup EXIT
}

_keel_cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$oscd_pid" ]; then kill "$oscd_pid" 2>/dev/null || true; wait "$oscd_pid" 2>/dev/null || true; fi
  if declare -F on_exit >/dev/null; then on_exit || true; fi
  if [ -z "$keep_work" ]; then rm -rf "$work"; fi
}

fail() {
  echo "FAIL: $*" >&2
  echo "--- keel dev log (last 30 lines)" >&2
  tail -30 "$work/dev.log" >&2 || true
  exit 1
}

expect() {
  if [ "$1" != "$2" ]; then fail "$3: want [$1], got [$2]"; fi
  echo "ok  $3"
}

start_keel_dev() {
  go build -o "$work/keel" ./cmd/keel
  "$work/keel" dev "$@" --data-dir "$work/data" --listen 127.0.0.1:0 >"$work/dev.log" 2>&1 &
  pid=$!
  local _
  for _ in $(seq 100); do
    keel_banner=$(grep -m1 '^keel dev: .* API at ' "$work/dev.log" || true)
    [ -n "$keel_banner" ] && break
    kill -0 "$pid" 2>/dev/null || fail "keel dev exited"
    sleep 0.2
  done
  [ -n "$keel_banner" ] || fail "keel dev did not report its URL in 20 s"
  keel_url=$(sed -n 's/.* API at \([^,]*\),.*/\1/p' <<<"$keel_banner")
  [ -n "$keel_url" ] || fail "no URL in keel dev's line [$keel_banner]"
  [ -s "$work/data/clouds.yaml" ] || fail "keel dev wrote no clouds.yaml"
  export OS_CLIENT_CONFIG_FILE="$work/data/clouds.yaml"
}

oscd_start() {
  oscd_sock=$work/oscd.sock
  /usr/bin/python3 "$keel_tests/oscd.py" serve "$oscd_sock" >"$work/oscd.log" 2>&1 &
  oscd_pid=$!
}

osc() {
  if [ -z "$oscd_sock" ]; then "$OPENSTACK" "$@"; return; fi
  local _
  # The server creates its socket once it has warmed up and listens.
  for _ in $(seq 1200); do
    [ -S "$oscd_sock" ] && break
    kill -0 "$oscd_pid" 2>/dev/null || fail "tests/oscd.py exited: $(cat "$work/oscd.log")"
    sleep 0.1
  done
  [ -S "$oscd_sock" ] || fail "tests/oscd.py did not listen in 120 s: $(cat "$work/oscd.log")"
  /usr/bin/python3 -S "$keel_tests/oscd.py" run "$oscd_sock" "$@"
}

os() { osc --os-cloud keel "$@"; }
