#!/usr/bin/env bash
# The seed's drain on a real OpenStack Nova 26 (Debian's packages, fake
# hosts), three ways side by side: Nova's own scheduler, Nova with keel's
# destination-update patch (contrib/nova/), and keel's drain executed
# through Nova's API. Prints the table and one summary line:
#
#   nova share_top3=… cv=… stale=…/24 | nova+patch share_top3=… cv=… stale=…/24 | keel share_top3=… cv=… hosts=… overcap=… refused=…
#
# and fails if Nova stops reproducing the bug (share to the top 3 < 0.9 or
# fewer than 20 of 24 stale destination rows), if a patched row is stale,
# or if keel misses its goals (10 hosts used, RAM CV <= 0.06, nothing over
# capacity, no capacity refusal).
#
#   tests/nova.sh                    all three runs, and keel sim export
#                                    and keel sim's prediction checked
#                                    against Placement and run A
#   tests/nova.sh --skip-keel-drain  no keel host drain (runs A and B, the
#                                    export and the prediction)
#   KEEP=1 tests/nova.sh          keeps the runtime directory (logs) and
#                                 leaves the cloud running
#
# Bring-up (tests/nova/up.sh) takes about 75 s on a quiet 2-core machine
# and 3 minutes on a loaded one; the whole script well under 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

skip_drain=
for a in "$@"; do
  case $a in
    --skip-keel-drain) skip_drain=1 ;;
    *) echo "usage: $0 [--skip-keel-drain]" >&2; exit 2 ;;
  esac
done
for cmd in /usr/bin/nova-api /usr/bin/nova-compute /usr/bin/placement-manage /usr/bin/gunicorn \
           /usr/sbin/mariadbd /usr/lib/rabbitmq/bin/rabbitmq-server /usr/bin/patch; do
  [ -x "$cmd" ] || { echo "$0: $cmd not found: install the packages tests/packages.txt names for tests/nova.sh" >&2; exit 1; }
done

rt=$(mktemp -d /tmp/keel-nova.XXXXXX)
cleanup() {
  if [ -n "${KEEP:-}" ]; then
    echo "tests/nova.sh: KEEP set: the cloud still runs under $rt (stop it with tests/nova/down.sh $rt --wipe)"
  else
    tests/nova/down.sh "$rt" --wipe || true
  fi
}
trap cleanup EXIT

# keel builds while Nova comes up.
go build -o "$rt/keel-bin" ./cmd/keel &
build=$!
start=$SECONDS
tests/nova/up.sh "$rt" >/dev/null
wait "$build" || { echo "tests/nova.sh: go build ./cmd/keel failed" >&2; exit 1; }
echo "tests/nova.sh: real Nova up in $((SECONDS - start)) s ($(uptime | sed 's/.*load average/load average/'))"
/usr/bin/python3 tests/nova/scenario.py "$rt" --keel "$rt/keel-bin" ${skip_drain:+--skip-keel-drain}
echo "== contrib/nova/test_dest_update.py: the patch's unit test on the patched copy"
/usr/bin/python3 contrib/nova/test_dest_update.py "$rt/nova-patched" 2>&1 | grep -v '^$'
