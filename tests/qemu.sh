#!/usr/bin/env bash
# Drives `keel dev --driver qemu --hosts 3` with openstackclient: a real
# guest (keel's tiny boot sector under qemu-system-x86_64, TCG) is booted,
# live-migrated by QEMU (the scheduler choosing the host),
# and deleted; its QEMU process follows it from host to host. test.sh runs
# it after the Go tests. Needs Debian's qemu-system-x86 and
# python3-openstackclient.
set -euo pipefail
cd "$(dirname "$0")/.."

OPENSTACK=/usr/bin/openstack
for need in "$OPENSTACK:python3-openstackclient" "/usr/bin/qemu-system-x86_64:qemu-system-x86"; do
  if [ ! -x "${need%%:*}" ]; then
    echo "qemu.sh: ${need%%:*} not found; install it with: apt-get install -y ${need##*:}" >&2
    exit 1
  fi
done

work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  # The guests' QEMU outlive keel dev by design: stop any left behind.
  for f in "$work"/data/agents/*/qemu/*/qemu.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- keel dev log (last 30 lines)" >&2
  tail -30 "$work/dev.log" >&2 || true
  exit 1
}

go build -o "$work/keel" ./cmd/keel
"$work/keel" dev --driver qemu --hosts 3 --data-dir "$work/data" --listen 127.0.0.1:0 >"$work/dev.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  [ -s "$work/data/clouds.yaml" ] && grep -q "keel dev: 3 hosts (qemu driver)" "$work/dev.log" && break
  kill -0 "$pid" 2>/dev/null || fail "keel dev exited"
  sleep 0.2
done
[ -s "$work/data/clouds.yaml" ] || fail "keel dev wrote no clouds.yaml in 20 s"
export OS_CLIENT_CONFIG_FILE="$work/data/clouds.yaml"
os() { "$OPENSTACK" --os-cloud keel "$@"; }
expect() {
  if [ "$1" != "$2" ]; then fail "$3: want [$1], got [$2]"; fi
  echo "ok  $3"
}
# qemuof HOST UUID: the pid of the guest's live QEMU on HOST, or nothing.
qemuof() {
  local f="$work/data/agents/$1/qemu/$2/qemu.pid"
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f" || true
}

# One openstack command costs seconds of Python: they are kept few.
# (-f value prints the columns in the server's field order: host, id, status.)
read -r src id status <<<"$(os server create --flavor m1.tiny --image keel-fake --property keel_guest=fill-32 --nic none --wait \
  -f value -c id -c status -c OS-EXT-SRV-ATTR:host vm1 | tr '\n' ' ')"
expect "ACTIVE" "$status" "server create (a QEMU guest)"
[ -n "$(qemuof "$src" "$id")" ] || fail "no QEMU runs vm1 on $src"
echo "ok  vm1's QEMU runs on $src"

os server migrate --live-migration --wait vm1 >/dev/null
read -r dst status <<<"$(os server show vm1 -f value -c status -c OS-EXT-SRV-ATTR:host | tr '\n' ' ')"
expect "ACTIVE" "$status" "vm1 ACTIVE after the migration"
[ "$dst" != "$src" ] || fail "live migration left vm1 on $src"
[ -n "$(qemuof "$dst" "$id")" ] || fail "no QEMU runs vm1 on $dst after the migration"
[ -z "$(qemuof "$src" "$id")" ] || fail "the source QEMU of vm1 still runs on $src"
echo "ok  server migrate --live-migration: QEMU moved vm1 $src -> $dst"
expect "$src $dst completed" \
  "$(os server migration list --server vm1 -f value -c 'Source Compute' -c 'Dest Compute' -c Status)" "server migration list"

os server delete --wait vm1
[ -z "$(qemuof "$dst" "$id")" ] || fail "vm1's QEMU still runs after server delete"
echo "ok  server delete stops the guest's QEMU"
