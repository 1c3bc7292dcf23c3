#!/usr/bin/env bash
# tests/nova/up.sh RT: brings a real Nova 26 + Placement 8 up under the
# runtime directory RT (12 fake hosts h01…h12, flavors m1.small/medium/large,
# noauth2, every port free on 127.0.0.1) and leaves it running; prints
# RT/env (NOVA_URL, PLACEMENT_URL, tokens, NOVA_CONF, OS_CLIENT_CONFIG_FILE)
# and writes RT/clouds.yaml with the cloud "nova". Stop it with
# tests/nova/down.sh RT. See tests/nova/harness.py.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 RT [--computes N]" >&2; exit 2; }
rt=$1
shift
mkdir -p "$rt"
exec /usr/bin/python3 "$(dirname "$0")/harness.py" up "$rt" "$@"
