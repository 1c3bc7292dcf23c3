#!/usr/bin/env bash
# The libvirt driver for real: libvirt daemons side by side on this
# machine, each in mount, network and UTS namespaces of its own (lvhost),
# torn down by PID at the end. test.sh runs it after tests/qemu.sh.
#
#  1. keel dev --driver libvirt --hosts 2 on two daemons, driven with
#     openstackclient: a guest boots, live-migrates (libvirt peer to
#     peer; its domain leaves h01's libvirtd for h02's, its heartbeat goes
#     on there), is deleted; keel audit after each step.
#  2. the representative slice (go test -tags libvirt TestLibvirtSlice, a
#     server and agents as processes): live h1->h2, abort mid-copy,
#     force-complete, cold migration with a resize, the source agent
#     killed mid-copy, libvirtd restarted under running guests, the audit
#     clean after every step; it ends with one line:
#       libvirt: live h1->h2 … s downtime … ms | abort ok | … | audit clean
#
#   tests/libvirt.sh --full   also every lifecycle action through the API
#                             and an evacuation (KEEL_LIBVIRT_FULL=1)
#
# Needs root, libvirt-daemon-system, qemu-system-x86, iproute2 and
# python3-openstackclient.
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/lib.sh
full=
[ "${1:-}" = --full ] && full=1
need "$OPENSTACK" python3-openstackclient
need libvirtd libvirt-daemon-system
need virsh libvirt-clients
need /usr/bin/qemu-system-x86_64 qemu-system-x86
need ip iproute2
if [ "$(id -u)" != 0 ]; then
  echo "tests/libvirt.sh: needs root (the libvirt daemons run in namespaces of their own)" >&2
  exit 1
fi
workspace
oscd_start # openstackclient imported once, warming up while keel builds
go build -o "$work/lvhosts" ./internal/compute/libvirt/lvhost/lvhosts
on_exit() { [ -f "$work/lv/cluster.json" ] && "$work/lvhosts" down "$work/lv"; }
"$work/lvhosts" up "$work/lv" h01 h02 >"$work/lvhosts.out" || fail "starting the libvirt daemons: $(cat "$work/lvhosts.out")"
echo "ok  two libvirt daemons up: $(cut -d' ' -f1,2 "$work/lvhosts.out" | tr '\n' ' ')"
uri() { echo "qemu+unix:///system?socket=$work/lv/$1/run/libvirt-sock"; }
start_keel_dev --driver libvirt --hosts 2 --set "libvirt.connection_uri=$(uri '{host}')"
expect "keel dev: 2 hosts (libvirt driver)" "${keel_banner%%,*}" "keel dev started"
audit() { "$work/keel" audit --os-cloud keel >"$work/audit.out" 2>&1 || fail "keel audit after $1: $(cat "$work/audit.out")"; echo "ok  keel audit after $1: $(head -1 "$work/audit.out")"; }
state() { virsh -c "$(uri "$1")" domstate "keel-$2" 2>/dev/null | head -1 || true; }
heartbeat() { virsh -c "$(uri "$1")" qemu-monitor-command "keel-$2" --hmp 'xp /2wx 0x1000' | tr -d '\r' | awk 'NF {print $2, $3}'; }

read -r src id status <<<"$(os server create --flavor m1.tiny --image keel-fake --property keel_guest=fill-16 --nic none --wait \
  -f value -c id -c status -c OS-EXT-SRV-ATTR:host vm1 | tr '\n' ' ')"
expect "ACTIVE" "$status" "server create (a libvirt domain)"
expect "running" "$(state "$src" "$id")" "vm1's domain runs in $src's libvirtd"
audit "boot"

os server migrate --live-migration --wait vm1 >/dev/null
read -r dst status <<<"$(os server show vm1 -f value -c status -c OS-EXT-SRV-ATTR:host | tr '\n' ' ')"
expect "ACTIVE" "$status" "vm1 ACTIVE after the live migration"
[ "$dst" != "$src" ] || fail "live migration left vm1 on $src"
expect "running" "$(state "$dst" "$id")" "libvirt moved vm1's domain $src -> $dst"
[ -z "$(state "$src" "$id")" ] || fail "vm1's domain is still defined on $src: $(state "$src" "$id")"
hb=$(heartbeat "$dst" "$id")
[ "${hb#* }" = 0x4c45454b ] || fail "no keel guest in vm1's memory on $dst: $hb"
echo "ok  vm1's heartbeat on $dst: $hb"
audit "the live migration"

os server delete --wait vm1
[ -z "$(state "$dst" "$id")" ] || fail "vm1's domain still exists on $dst after server delete"
echo "ok  server delete undefines the domain"
audit "the delete"

kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
pid=

echo "== the libvirt slice (server and agents as processes)"
KEEL_LIBVIRT_FULL=$full go test -tags libvirt -count=1 -v -run '^TestLibvirtSlice$' -timeout 20m ./internal/e2e/ >"$work/slice.log" 2>&1 || {
  grep -v '^=== ' "$work/slice.log" | tail -60 >&2
  fail "the libvirt slice failed"
}
grep -E '^\s+libvirt_test.go' "$work/slice.log" || true
line=$(grep -m1 '^libvirt: ' "$work/slice.log") || fail "the slice printed no summary line"
echo "$line"
