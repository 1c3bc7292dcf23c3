#!/usr/bin/env bash
# tests/nova/down.sh RT [--wipe]: stops every process tests/nova/up.sh RT
# started (by the PIDs it recorded, computes first, the database last);
# --wipe also removes RT.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 RT [--wipe]" >&2; exit 2; }
exec /usr/bin/python3 "$(dirname "$0")/harness.py" down "$@"
