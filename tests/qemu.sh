#!/usr/bin/env bash
# Drives `keel dev --driver qemu --hosts 3` with openstackclient: a real
# guest (keel's tiny boot sector under qemu-system-x86_64, TCG) is booted,
# live-migrated by QEMU (the scheduler choosing the host), live-migrated
# again while paused, resized (a cold move: powered off, disk copied,
# started with the new RAM), and deleted; its QEMU process follows it from host to host. Then an
# uploaded qcow2 image (keel's guest sector) boots on a disk that is an
# overlay on the host's copy of the image. test.sh runs it after the Go
# tests. Needs Debian's qemu-system-x86, qemu-utils and
# python3-openstackclient.
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/lib.sh
need "$OPENSTACK" python3-openstackclient
need /usr/bin/qemu-system-x86_64 qemu-system-x86
need qemu-img qemu-utils
workspace
oscd_start # openstackclient imported once, warming up while keel builds
# The guests' QEMU outlive keel dev by design: stop any left behind.
on_exit() {
  for f in "$work"/data/agents/*/qemu/*/qemu.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
}
start_keel_dev --driver qemu --hosts 3
expect "keel dev: 3 hosts (qemu driver)" "${keel_banner%%,*}" "keel dev started"
# qemuof HOST UUID: the pid of the guest's live QEMU on HOST, or nothing.
qemuof() {
  local f="$work/data/agents/$1/qemu/$2/qemu.pid"
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f" || true
}

# Each openstack command runs in a fork of tests/oscd.py's warmed-up
# openstackclient; they are still kept few.
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

# Nova live-migrates paused servers: QEMU copies the paused guest and it
# arrives paused.
# (openstack's --wait waits for ACTIVE: the script polls for PAUSED.)
os server pause vm1
os server migrate --live-migration vm1 >/dev/null
for _ in $(seq 60); do
  read -r pdst status <<<"$(os server show vm1 -f value -c status -c OS-EXT-SRV-ATTR:host | tr '\n' ' ')"
  [ "$status" = MIGRATING ] || break
  sleep 1
done
expect "PAUSED" "$status" "vm1 PAUSED after its paused live migration"
[ "$pdst" != "$dst" ] || fail "the paused live migration left vm1 on $dst"
[ -n "$(qemuof "$pdst" "$id")" ] || fail "no QEMU holds the paused vm1 on $pdst"
[ -z "$(qemuof "$dst" "$id")" ] || fail "the source QEMU of the paused vm1 still runs on $dst"
echo "ok  server migrate --live-migration of a paused server: QEMU moved it $dst -> $pdst, PAUSED"
os server unpause vm1
dst=$pdst

# A resize moves the guest cold: its QEMU powers off, its disk is copied,
# a QEMU with the new flavor's RAM starts on the destination; confirm
# drops the source's guest.
os server resize --flavor m1.small --wait vm1 >/dev/null
read -r rdst status <<<"$(os server show vm1 -f value -c status -c OS-EXT-SRV-ATTR:host | tr '\n' ' ')"
expect "VERIFY_RESIZE" "$status" "vm1 VERIFY_RESIZE after server resize"
[ "$rdst" != "$dst" ] || fail "the resize left vm1 on $dst"
rpid=$(qemuof "$rdst" "$id")
[ -n "$rpid" ] || fail "no QEMU runs the resized vm1 on $rdst"
tr '\0' ' ' <"/proc/$rpid/cmdline" | grep -q -- "-m 2048 " || fail "the resized vm1's QEMU does not have m1.small's 2048 MiB: $(tr '\0' ' ' <"/proc/$rpid/cmdline")"
[ -z "$(qemuof "$dst" "$id")" ] || fail "the source QEMU of vm1 still runs on $dst after the resize"
os server resize confirm vm1
for _ in $(seq 30); do
  status=$(os server show vm1 -f value -c status)
  [ "$status" = VERIFY_RESIZE ] || break
  sleep 1
done
expect "ACTIVE" "$status" "vm1 ACTIVE after resize confirm"
[ ! -d "$work/data/agents/$dst/qemu/$id" ] || fail "the confirmed resize left vm1's directory on $dst"
echo "ok  server resize + confirm: QEMU moved vm1 cold $dst -> $rdst with 2048 MiB"
dst=$rdst

os server delete --wait vm1
[ -z "$(qemuof "$dst" "$id")" ] || fail "vm1's QEMU still runs after server delete"
echo "ok  server delete stops the guest's QEMU"

# An uploaded image boots its own data (here keel's guest sector as a
# qcow2 image): the host keeps one raw copy of it in _base, and the
# guest's disk is a qcow2 overlay naming it relatively.
qemu-img convert -q -f raw -O qcow2 internal/compute/qemu/guest/guest.bin "$work/guest.qcow2"
img=$(os image create --disk-format qcow2 --container-format bare --file "$work/guest.qcow2" -f value -c id guest-qcow2)
read -r ihost iid status <<<"$(os server create --flavor m1.tiny --image guest-qcow2 --nic none --wait \
  -f value -c id -c status -c OS-EXT-SRV-ATTR:host vm2 | tr '\n' ' ')"
expect "ACTIVE" "$status" "server create from an uploaded qcow2 image"
[ -n "$(qemuof "$ihost" "$iid")" ] || fail "no QEMU runs vm2 on $ihost"
backing=$(qemu-img info -U --output=json "$work/data/agents/$ihost/qemu/$iid/disk.img" |
  python3 -c 'import json, sys; print(json.load(sys.stdin).get("backing-filename", ""))')
expect "../_base/$img" "$backing" "vm2's disk is an overlay on the host's copy of the image"
[ -f "$work/data/agents/$ihost/qemu/_base/$img" ] || fail "no copy of the image in $ihost's _base"
os server delete --wait vm2
echo "ok  server create --image (an uploaded qcow2): vm2 boots an overlay on $ihost's _base/$img"
