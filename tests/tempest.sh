#!/usr/bin/env bash
# Runs a selection of Tempest's compute API tests (Debian's tempest 33)
# against `keel dev` on loopback, with Tempest's dynamic credentials (a
# project and users per test class, made through keel's Keystone admin
# API) and a tempest.conf generated here. test.sh runs it after the Go tests.
#
#   tests/tempest.sh                 the selection in tests/tempest/include.txt
#   tests/tempest.sh REGEX           only the selected tests matching REGEX
#   KEEP=1 tests/tempest.sh          keep the workspace even when all pass
#   tests/tempest.sh --regenerate    rewrite tests/tempest/include.txt
#   TEMPEST_TESTS=REGEX tests/tempest.sh
#                                    a survey: every test this Tempest knows
#                                    matching REGEX (e.g. all of them with
#                                    '^tempest\.api\.compute\.'), not the
#                                    selection; prints what did not pass and
#                                    the totals, and fails only when no test
#                                    ran
#   TEMPEST_CONCURRENCY=N            Tempest's workers (1 by default)
#
# The selection lives next to this script: tests/tempest/families.txt names
# the test modules, tests/tempest/exclude.txt the tests left out with the
# reason for each, and tests/tempest/include.txt the exact tests that run
# (the first minus the second). The script fails unless every selected test
# passes (a failure, a skip or a missing result all count); then it keeps
# the workspace (tempest.conf, tempest.log, the subunit stream, keel's log)
# and prints where.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

. tests/lib.sh
TEMPEST=/usr/bin/tempest
need "$TEMPEST" tempest
need subunit2csv subunit
need subunit2pyunit subunit
HOSTS=3
# keel's default filters plus the two that read same_host/different_host
# hints; tempest.conf names the same list, so Tempest runs their tests.
FILTERS=ComputeFilter,AvailabilityZoneFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter,SameHostFilter,DifferentHostFilter
CONCURRENCY=${TEMPEST_CONCURRENCY:-1}
regenerate=0
if [ "${1:-}" = --regenerate ]; then regenerate=1; shift; fi
filter=${1:-}

workspace /tmp/keel-tempest.XXXXXX
ok=0
# The workspace stays for a look unless every selected test passed.
on_exit() {
  if [ "$ok" != 1 ] || [ -n "${KEEP:-}" ]; then
    keep_work=1
    echo "tempest.sh: workspace kept in $work (etc/tempest.conf, tempest.log, subunit.v2, dev.log)" >&2
  fi
}

start=$(date +%s)
start_keel_dev --hosts "$HOSTS" --set "filter_scheduler.enabled_filters=$FILTERS"
case "$keel_banner" in "keel dev: $HOSTS hosts "*) ;; *) fail "keel dev started [$keel_banner], not $HOSTS hosts" ;; esac
url=$keel_url
password=$(cat "$work/data/admin-password")
# A second public image, Tempest's image_ref_alt: its rebuild tests move
# servers to another image, and the servers' image filter needs two.
head -c 65536 /dev/zero >"$work/alt.raw"
image_alt=$(os image create --public --file "$work/alt.raw" --disk-format raw --container-format bare -f value -c id keel-alt) ||
  fail "uploading the second image"

(cd "$work" && "$TEMPEST" init --workspace-path "$work/workspaces.yaml" --name keel "$work/ws" >/dev/null)
ws=$work/ws
# Tempest's default dynamic credentials: keel dev's admin makes a project
# and users (role member, or admin for the admin tests) per test class
# through keel's Keystone admin API, and deletes them after, as Tempest
# does against a real cloud.
cat >"$ws/etc/tempest.conf" <<EOF
[DEFAULT]
log_file = $ws/tempest.log
debug = true

[oslo_concurrency]
lock_path = $ws/locks

[auth]
use_dynamic_credentials = True
create_isolated_networks = False
admin_username = admin
admin_password = $password
admin_project_name = admin
admin_domain_name = Default
default_credentials_domain_name = Default

[identity]
uri_v3 = $url/identity/v3
auth_version = v3
region = RegionOne
admin_role = admin

[identity-feature-enabled]
api_v2 = False
api_v3 = True

[service_available]
nova = True
glance = True
neutron = False
cinder = False
swift = False
horizon = False

[compute]
image_ref = 7f3b0d5e-6a2c-4c1e-9a55-000000000001
image_ref_alt = $image_alt
certified_image_ref = 7f3b0d5e-6a2c-4c1e-9a55-000000000001
certified_image_trusted_certs = keel-cert-a,keel-cert-b
flavor_ref = 1
flavor_ref_alt = 2
min_compute_nodes = $HOSTS
min_microversion = 2.1
max_microversion = 2.91
build_interval = 1
build_timeout = 60

[compute-feature-enabled]
scheduler_enabled_filters = $FILTERS
live_migration = True
block_migration_for_live_migration = True
volume_backed_live_migration = False
cold_migration = True
resize = True
shelve = True
shelve_migrate = False
suspend = True
pause = True
rescue = True
# Stable-device rescue (Nova 2.87's hw_rescue_bus / hw_rescue_device):
# the QEMU and libvirt drivers attach the rescue disk on the bus asked for,
# IDE included.
stable_rescue = True
ide_bus = True
snapshot = True
console_output = True
vnc_console = False
serial_console = False
interface_attach = False
change_password = False
personality = True
# os-agents, writable server metadata, resetNetwork: Tempest ties all three
# to this flag; keel serves the metadata (the families here select no
# os-agents test, and resetNetwork stays excluded).
xenapi_apis = True
config_drive = False
metadata_service = False
swap_volume = False
attach_encrypted_volume = False

[validation]
run_validation = False

[image]
build_interval = 1
EOF

# tempest run --list-tests with an include file of regexes (and an
# exclude file): the test ids, without their [attributes], sorted.
list_tests() {
  (cd "$ws" && "$TEMPEST" run --list-tests --include-list "$1" ${2:+--exclude-list "$2"}) |
    sed -n 's/^\(tempest\.[^[ ]*\).*/\1/p' | sort -u
}
strip() { sed -e 's/\s*#.*//' -e '/^\s*$/d' "$1"; }
strip tests/tempest/exclude.txt >"$work/exclude.txt"
if [ "$regenerate" = 1 ]; then
  strip tests/tempest/families.txt >"$work/families.txt"
  {
    echo "# The Tempest tests tests/tempest.sh runs: tests/tempest/families.txt minus"
    echo "# tests/tempest/exclude.txt, generated by tests/tempest.sh --regenerate."
    list_tests "$work/families.txt" "$work/exclude.txt" | sed -e 's/\./\\./g' -e 's/$/\\[/'
  } >tests/tempest/include.txt
  echo "tests/tempest/include.txt: $(grep -vc '^#' tests/tempest/include.txt) tests"
  ok=1
  exit 0
fi
include=$work/include.txt
survey=${TEMPEST_TESTS:-}
if [ -n "$survey" ]; then
  # The survey runs what Tempest lists for the regex, selected or not.
  echo "$survey" >"$work/survey.txt"
  list_tests "$work/survey.txt" | sed -e 's/\./\\./g' -e 's/$/\\[/' >"$include"
  [ -s "$include" ] || fail "Tempest knows no test matching $survey"
else
  strip tests/tempest/include.txt >"$include"
  if [ -n "$filter" ]; then
    grep -E -- "$filter" "$include" >"$include.f" || fail "no selected test matches $filter"
    mv "$include.f" "$include"
  fi
fi
selected=$(list_tests "$include" | wc -l)
[ "$selected" = "$(wc -l <"$include")" ] ||
  fail "tests/tempest/include.txt has $(wc -l <"$include") lines but this Tempest knows $selected of those tests"
echo "tempest: running $selected tests (concurrency $CONCURRENCY)"

cd "$ws"
set +e
"$TEMPEST" run --concurrency "$CONCURRENCY" --include-list "$include" \
  --subunit >"$work/subunit.v2" 2>"$work/run.err"
rc=$?
set -e
cd "$root"
subunit2csv <"$work/subunit.v2" >"$work/results.csv" || true
# One line per test (or per class whose setUpClass failed): STATUS NAME.
/usr/bin/python3 - "$work/results.csv" >"$work/results.txt" <<'PY'
import csv, re, sys
for row in csv.DictReader(open(sys.argv[1])):
    name = re.sub(r"\[.*", "", row["test"])
    m = re.match(r"setUpClass \((.*)\)", name)
    if m:
        name = m.group(1) + " (setUpClass)"
    elif not name.startswith("tempest."):
        continue
    print({"success": "pass", "failure": "FAIL", "skip": "skip"}.get(row["status"], row["status"]), name)
PY
sort -k2 -o "$work/results.txt" "$work/results.txt"
count() { grep -c "^$1 " "$work/results.txt" || true; }
passed=$(count pass)
failed=$(( $(grep -vc '^\(pass\|skip\) ' "$work/results.txt" || true) ))
skipped=$(count skip)
grep -v '^pass ' "$work/results.txt" || true
echo "tempest: $passed passed, $failed failed, $skipped skipped in $(( $(date +%s) - start )) s (results: $work/results.txt)"
if [ -n "$survey" ]; then
  # A survey reports; only a run that gave no result at all fails it.
  keep_work=1
  echo "tempest: survey of $selected tests matching $survey; workspace kept in $work" >&2
  [ "$passed" != 0 ] || fail "tempest run exited $rc and no test passed"
  ok=1
  exit 0
fi
# Every selected test must pass: a skip means tempest.conf or the
# selection no longer matches what keel offers.
if [ "$failed" != 0 ] || [ "$skipped" != 0 ] || [ "$passed" != "$selected" ] || [ "$rc" != 0 ]; then
  subunit2pyunit <"$work/subunit.v2" 2>&1 | grep -A30 '^\(FAIL\|ERROR\):' | head -300 >&2 || true
  tail -20 "$work/run.err" >&2
  fail "tempest run exited $rc: $passed of $selected selected tests passed, $failed failed, $skipped skipped"
fi
ok=1
