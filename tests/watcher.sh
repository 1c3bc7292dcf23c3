#!/usr/bin/env bash
# OpenStack Watcher 9.0 (Debian's watcher-api, watcher-decision-engine,
# watcher-applier) against `keel dev`, with no workaround in watcher.conf:
# the default endpoint interface (internal, which keel's catalog lists)
# and the default compute model rebuild period (3600 s, so the model
# follows keel only through keel's Nova notifications). On 127.0.0.1 only:
# a RabbitMQ of its own (free AMQP, distribution and epmd ports, its own
# node name) that keel's notifications ([oslo_messaging_notifications]
# driver messagingv2) and Watcher's RPC share, Watcher on SQLite, and keel
# dev with Watcher in its catalog. It runs three audits through keel's
# catalog with `openstack optimize …` (host_maintenance,
# node_resource_consolidation, actuator), starts each action plan and
# checks keel executed it; and it times how long Watcher's model takes to
# follow a boot, a live migration and a service disable in keel, read
# through Watcher's /v1/data_model. Everything it starts is stopped by
# PID. The last line sums it up:
#   watcher: audits host_maintenance=SUCCEEDED … | actions executed N | model follows keel in X s | workarounds none
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/lib.sh
need "$OPENSTACK" python3-openstackclient
need /usr/bin/watcher-api watcher-api
need /usr/bin/watcher-decision-engine watcher-decision-engine
need /usr/bin/watcher-applier watcher-applier
need /usr/lib/rabbitmq/bin/rabbitmq-server rabbitmq-server
/usr/bin/python3 -c 'import watcherclient' 2>/dev/null || { echo "watcherclient missing: apt-get install -y python3-watcherclient" >&2; exit 1; }
workspace
keep_work=${KEEL_KEEP_WORK:-}
oscd_start # openstackclient imported once, warming up while RabbitMQ and keel start

pids=()
on_exit() {
  local p
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[$i]}
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  if [ -n "${keep_work:-}" ]; then echo "work dir kept: $work" >&2; fi
}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wfail() {
  echo "FAIL: $*" >&2
  for f in "$work"/log/*.log; do
    echo "--- $f (last 25 lines)" >&2
    tail -25 "$f" >&2 || true
  done
  fail "$*"
}

# waitfor SECONDS WHAT CMD…: run CMD until it succeeds. SECONDS is the
# bound on a quiet machine; on a loaded one (RabbitMQ took over 3 minutes
# to listen at a load of 30 on 2 cores) the wait goes on, up to 5 times as
# long, while the load average per core stays above 1, saying so once
# a minute.
waitfor() {
  local secs=$1 what=$2
  shift 2
  local start=$SECONDS said=$SECONDS load cores factor
  cores=$(nproc)
  until "$@" >/dev/null 2>&1; do
    if [ $((SECONDS - start)) -ge "$secs" ]; then
      load=$(cut -d' ' -f1 /proc/loadavg)
      factor=$(awk -v l="$load" -v c="$cores" 'BEGIN { f = int(l / c + 0.999); if (f < 1) f = 1; if (f > 5) f = 5; print f }')
      [ $((SECONDS - start)) -lt $((secs * factor)) ] || wfail "$what (waited $((SECONDS - start)) s, load $load)"
      if [ $((SECONDS - said)) -ge 60 ]; then
        echo "watcher: still waiting for $what after $((SECONDS - start)) s (load $load on $cores cores)" >&2
        said=$SECONDS
      fi
    fi
    sleep 0.5
  done
}

mkdir -p "$work/log" "$work/rabbit" "$work/lock"

# --- RabbitMQ, its epmd of its own.
amqp_port=$(free_port)
epmd_port=$(free_port)
dist_port=$(free_port)
/usr/bin/epmd -port "$epmd_port" -address 127.0.0.1 &
pids+=($!)
printf 'listeners.tcp.default = 127.0.0.1:%s\n' "$amqp_port" >"$work/rabbit/rabbitmq.conf"
echo '[].' >"$work/rabbit/enabled_plugins"
: >"$work/rabbit/env.conf"
env HOME="$work/rabbit" RUNNING_UNDER_SYSTEMD=true \
  RABBITMQ_NODENAME="keelwatcher$$@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
  RABBITMQ_NODE_PORT="$amqp_port" RABBITMQ_DIST_PORT="$dist_port" \
  ERL_EPMD_PORT="$epmd_port" ERL_EPMD_ADDRESS=127.0.0.1 \
  RABBITMQ_CONFIG_FILE="$work/rabbit/rabbitmq.conf" RABBITMQ_CONF_ENV_FILE="$work/rabbit/env.conf" \
  RABBITMQ_ENABLED_PLUGINS_FILE="$work/rabbit/enabled_plugins" \
  RABBITMQ_MNESIA_BASE="$work/rabbit/mnesia" RABBITMQ_LOG_BASE="$work/rabbit/log" RABBITMQ_LOGS=- \
  /usr/lib/rabbitmq/bin/rabbitmq-server >"$work/log/rabbitmq.log" 2>&1 &
pids+=($!)
amqp_up() { /usr/bin/python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$amqp_port),1); s.send(b'AMQP\x00\x00\x09\x01'); sys.exit(0 if s.recv(8)[:1]==b'\x01' else 1)"; }
waitfor 180 "RabbitMQ up on 127.0.0.1:$amqp_port" amqp_up
echo "ok  RabbitMQ on 127.0.0.1:$amqp_port"
transport="rabbit://guest:guest@127.0.0.1:$amqp_port/"

# --- keel dev: notifications to that RabbitMQ, Watcher in the catalog.
watcher_port=$(free_port)
start_keel_dev --hosts 3 \
  --set oslo_messaging_notifications.driver=messagingv2 \
  --set oslo_messaging_notifications.transport_url="$transport" \
  --set keel.catalog_services="infra-optim:watcher=http://127.0.0.1:$watcher_port"
password=$(/usr/bin/python3 -c 'import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))["clouds"]["keel"]["auth"]["password"])' "$OS_CLIENT_CONFIG_FILE")

# --- Watcher: nothing but where things are and who it is.
cat >"$work/watcher.conf" <<EOF
[DEFAULT]
transport_url = $transport
[api]
host = 127.0.0.1
port = $watcher_port
workers = 1
[database]
connection = sqlite:///$work/watcher.sqlite
[keystone_authtoken]
www_authenticate_uri = $keel_url/identity
auth_url = $keel_url/identity
auth_type = password
username = admin
password = $password
project_name = admin
user_domain_name = Default
project_domain_name = Default
region_name = RegionOne
[watcher_clients_auth]
auth_type = password
auth_url = $keel_url/identity
username = admin
password = $password
project_name = admin
user_domain_name = Default
project_domain_name = Default
[oslo_concurrency]
lock_path = $work/lock
EOF
/usr/bin/watcher-db-manage --config-file "$work/watcher.conf" create_schema >"$work/log/db-manage.log" 2>&1 ||
  wfail "watcher-db-manage create_schema"
for svc in api decision-engine applier; do
  "/usr/bin/watcher-$svc" --config-file "$work/watcher.conf" --log-file "$work/log/$svc.log" >"$work/log/$svc.out" 2>&1 &
  pids+=($!)
done
waitfor 120 "watcher-api answers on :$watcher_port" curl -sf "http://127.0.0.1:$watcher_port/"
# The decision engine files its goals and strategies as it starts.
waitfor 180 "Watcher's strategies (decision engine started)" \
  sh -c "'$OPENSTACK' --os-cloud keel optimize strategy list -f value -c Name | grep -q node_resource_consolidation"
echo "ok  Watcher through keel's catalog: $(os optimize strategy list -f value -c Name | sort | xargs)"

# --- The cloud: four servers on three hosts.
for i in 1 2 3 4; do os server create --flavor m1.small --image keel-fake --nic none "vm$i" >/dev/null; done
for i in 1 2 3 4; do waitfor 60 "vm$i ACTIVE" sh -c "'$OPENSTACK' --os-cloud keel server show vm$i -f value -c status | grep -qx ACTIVE"; done
hostof() { os server show "$1" -f value -c OS-EXT-SRV-ATTR:host; }

# audit GOAL STRATEGY [PARAM…]: creates the audit, waits for it to end,
# starts its action plan and waits for that; $audit_state is the plan's
# final state, and its actions that succeeded count in $actions_done.
actions_done=0
audit_state=
audit() {
  local goal=$1 strategy=$2
  shift 2
  local args=() p
  for p in "$@"; do args+=(-p "$p"); done
  local uuid state plan
  uuid=$(os optimize audit create -g "$goal" -s "$strategy" "${args[@]}" -f value -c UUID)
  waitfor 180 "audit $strategy ends" sh -c "'$OPENSTACK' --os-cloud keel optimize audit show $uuid -f value -c State | grep -Eqx 'SUCCEEDED|FAILED|CANCELLED'"
  state=$(os optimize audit show "$uuid" -f value -c State)
  [ "$state" = SUCCEEDED ] || wfail "audit $strategy: $state"
  plan=$(os optimize actionplan list --audit "$uuid" -f value -c UUID | head -1)
  [ -n "$plan" ] || wfail "audit $strategy made no action plan"
  os optimize actionplan start "$plan" >/dev/null
  waitfor 300 "action plan of $strategy ends" sh -c "'$OPENSTACK' --os-cloud keel optimize actionplan show $plan -f value -c State | grep -Eqx 'SUCCEEDED|FAILED|CANCELLED'"
  state=$(os optimize actionplan show "$plan" -f value -c State)
  local n
  n=$(os optimize action list --action-plan "$plan" -f value -c State | grep -c SUCCEEDED || true)
  [ "$state" = SUCCEEDED ] || wfail "action plan of $strategy: $state ($(os optimize action list --action-plan "$plan" -f value -c 'Action Type' -c State | xargs))"
  actions_done=$((actions_done + n))
  audit_state=$state
  echo "ok  $strategy: audit SUCCEEDED, action plan $state, $n actions"
}

# host_maintenance: every server off the host, the host disabled.
maint=$(hostof vm1)
audit cluster_maintaining host_maintenance "maintenance_node=$maint"
hm=$audit_state
left=$(os server list --host "$maint" -f value -c Name | wc -l)
expect "0 disabled" "$left $(os compute service list --host "$maint" -f value -c Status)" "host_maintenance: $maint emptied and disabled"

# node_resource_consolidation: the servers packed onto as few hosts as fit.
audit server_consolidation node_resource_consolidation
nrc=$audit_state
used=$(for i in 1 2 3 4; do hostof "vm$i"; done | sort -u | wc -l)
expect 1 "$used" "node_resource_consolidation: the servers on one host"

# actuator: the actions given — enable the maintained host again, and
# live-migrate vm1 to it.
vm1=$(os server show vm1 -f value -c id)
from=$(hostof vm1)
audit unclassified actuator "actions=[{\"action_type\": \"change_nova_service_state\", \"resource_id\": \"$maint\", \"input_parameters\": {\"resource_name\": \"$maint\", \"state\": \"enabled\"}}, {\"action_type\": \"migrate\", \"resource_id\": \"$vm1\", \"input_parameters\": {\"migration_type\": \"live\", \"resource_name\": \"vm1\", \"source_node\": \"$from\", \"destination_node\": \"$maint\"}}]"
act=$audit_state
expect "$maint enabled" "$(hostof vm1) $(os compute service list --host "$maint" -f value -c Status)" "actuator: vm1 live-migrated to $maint, its service enabled"

# --- Watcher's model follows keel: read /v1/data_model until it shows
# what keel just did.
token=$(os token issue -f value -c id)
model() {
  curl -sf -H "X-Auth-Token: $token" -H "OpenStack-API-Version: infra-optim 1.3" \
    "http://127.0.0.1:$watcher_port/v1/data_model/?data_model_type=compute"
}
# model_has PYTHON-EXPR: true once the expression over rows (the model's
# rows: node_hostname, node_status, server_uuid, …) holds.
model_has() {
  model | /usr/bin/python3 -c "import json,sys; rows=json.load(sys.stdin)['context']; sys.exit(0 if ($1) else 1)"
}
worst=0
follow() { # follow WHAT EXPR: seconds until the model shows it
  local what=$1 expr=$2 t0 dt
  t0=$(date +%s.%N)
  waitfor 60 "Watcher's model shows $what" model_has "$expr"
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "ok  Watcher's model follows $what in ${dt} s"
  worst=$(awk -v a="$dt" -v b="$worst" 'BEGIN { print (a > b) ? a : b }')
}
os server create --flavor m1.small --image keel-fake --nic none --wait vm5 >/dev/null
vm5=$(os server show vm5 -f value -c id)
h5=$(hostof vm5)
follow "the boot of vm5" "any(r.get('server_uuid')=='$vm5' and r['node_hostname']=='$h5' and r.get('server_state')=='active' for r in rows)"
os server migrate --live-migration --wait vm5 >/dev/null
h5b=$(hostof vm5)
[ "$h5b" != "$h5" ] || wfail "vm5 did not move"
follow "vm5's live migration" "any(r.get('server_uuid')=='$vm5' and r['node_hostname']=='$h5b' for r in rows)"
os compute service set --disable --disable-reason watcher-test "$h5" nova-compute
follow "the disable of $h5" "any(r['node_hostname']=='$h5' and r['node_status']=='disabled' for r in rows)"

dropped=$(curl -sf -H "X-Auth-Token: $token" "$keel_url/metrics" | awk '/^keel_notifications_dropped_total\{sink="rabbit"\}/{print $2}')
expect 0 "${dropped:-missing}" "no notification dropped (keel_notifications_dropped_total{sink=\"rabbit\"})"
grep -q "Event 'instance.update' received from nova-compute" "$work/log/decision-engine.log" || wfail "the decision engine logged no instance.update from keel"
if grep -q "interface *= *public\|rebuild_period\|period *=" "$work/watcher.conf"; then wfail "a workaround in watcher.conf"; fi
echo "watcher: audits host_maintenance=$hm node_resource_consolidation=$nrc actuator=$act | actions executed $actions_done | model follows keel in $worst s | workarounds none"
