#!/usr/bin/env bash
# Drives `keel dev` with openstackclient (Debian's python3-openstackclient),
# the way a user of an OpenStack cloud would, and checks what each command
# prints. test.sh runs it after the Go tests; it needs only the keel
# source tree and /usr/bin/openstack.
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/lib.sh
need "$OPENSTACK" python3-openstackclient python3-osc-placement
workspace
oscd_start
# A service of its own in the catalog, as Watcher's would be (nothing
# listens there: only the catalog is read).
start_keel_dev --hosts 3 --set keel.catalog_services=infra-optim:watcher=http://127.0.0.1:9/
expect "keel dev: 3 hosts (fake driver)" "${keel_banner%%,*}" "keel dev started"

# The installed command itself once; every other command runs in a fork
# of tests/oscd.py's warmed-up openstack (the same code, started once).
expect "keel-fake" "$("$OPENSTACK" --os-cloud keel image list -f value -c Name)" "image list (/usr/bin/openstack)"

# The catalog: each service with a public, an internal and an admin
# endpoint (keystonemiddleware looks for internal), Watcher's included.
expect "glance keystone nova placement watcher" "$(os catalog list -f value -c Name | sort | xargs)" "catalog list"
expect "$(for t in compute identity image infra-optim placement; do printf '%s admin\n%s internal\n%s public\n' $t $t $t; done)" \
  "$(os endpoint list -f value -c 'Service Type' -c Interface | sort)" "endpoint list"
expect "http://127.0.0.1:9" "$(os endpoint list --service infra-optim --interface internal -f value -c URL)" "endpoint list --service infra-optim"

# The image service (Glance v2): an upload, its checksum and size, the same
# bytes back, a server booted from it, the image changed, shared with
# another project, and deleted.
head -c 300000 /dev/urandom >"$work/disk.raw"
os image create --file "$work/disk.raw" --disk-format raw --container-format bare --property os_distro=cirros img1 >/dev/null
expect "$(md5sum <"$work/disk.raw" | cut -d' ' -f1) 300000 active" "$(os image show img1 -f value -c checksum -c size -c status | xargs)" \
  "image create --file (its MD5, size, active)"
expect "cirros" "$(os image show img1 -f json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["properties"]["os_distro"])')" \
  "image create --property"
os image save --file "$work/back.raw" img1
cmp -s "$work/disk.raw" "$work/back.raw" || fail "image save: not the uploaded bytes"
echo "ok  image save gives the uploaded bytes"
expect "$(printf 'img1\nkeel-fake')" "$(os image list -f value -c Name | sort)" "image list after the upload"
os server create --flavor m1.tiny --image img1 --nic none --wait fromimg >/dev/null
expect "ACTIVE img1" "$(os server list --name fromimg -f value -c Status -c Image)" "server create --image (an uploaded image)"
os server delete --wait fromimg
# image set/unset (Glance's JSON patch) and tags; a protected image is
# not deleted.
os image set --name img2 --property os_distro=debian --property hw_disk_bus=virtio --protected --tag t1 --tag t2 img1
props() { os image show "$1" -f json | /usr/bin/python3 -c 'import json,sys; i=json.load(sys.stdin); p=i["properties"]; print(i["name"], i["protected"], ",".join(i["tags"]), p.get("os_distro"), p.get("hw_disk_bus"))'; }
expect "img2 True t1,t2 debian virtio" "$(props img2)" "image set --name --property --protected --tag"
os image unset --property hw_disk_bus --tag t1 img2
expect "img2 True t2 debian None" "$(props img2)" "image unset --property --tag"
if out=$(os image delete img2 2>&1); then fail "a protected image was deleted"; fi
expect "403" "$(echo "$out" | grep -o 403 | head -1)" "image delete of a protected image (403)"
os image set --unprotected img2
demo() { osc --os-cloud keel-demo "$@"; }
# Sharing with demo's project: demo shows the shared image by ID at once,
# lists it once it accepted, and loses it when the owner removes it.
img=$(os image show img2 -f value -c id)
expect "pending" "$(os image add project img2 demo -f value -c status)" "image add project"
expect "keel-fake" "$(demo image list -f value -c Name)" "a pending member does not list the image"
expect "img2" "$(demo image show "$img" -f value -c name)" "a pending member shows the image by ID"
demo image set --accept "$img"
expect "$(printf 'img2\nkeel-fake')" "$(demo image list -f value -c Name | sort)" "image set --accept: the member lists it"
expect "$(os project show demo -f value -c id) accepted" "$(os image member list img2 -f value -c 'Member ID' -c Status)" "image member list"
if demo image set --name mine "$img" >/dev/null 2>&1; then fail "a member renamed the owner's image"; fi
echo "ok  a member may not change the image"
os image remove project img2 demo
if demo image show "$img" >/dev/null 2>&1; then fail "a removed member still sees the image"; fi
echo "ok  image remove project: the project no longer sees it"
os image delete img2
expect "keel-fake" "$(os image list -f value -c Name)" "image delete"

os server create --flavor m1.small --image keel-fake --nic none --wait vm1 >/dev/null
expect "ACTIVE" "$(os server show vm1 -f value -c status)" "server create --nic none --wait"
expect "vm1 ACTIVE keel-fake" "$(os server list -f value -c Name -c Status -c Image)" "server list"
expect "nova available" "$(os availability zone list --compute -f value)" "availability zone list --compute"
# 3 hosts; 3 × 512 MB reserved plus vm1's 2048; one running VM.
# clouds.yaml names keel's newest microversion (2.91); the statistics
# and the hypervisors' resource fields are gone from 2.88, as in Nova, so
# these ask for 2.87. At 2.91 the show has the host's uptime.
expect "$(printf '3\n3584\n1')" "$(os --os-compute-api-version 2.87 hypervisor stats show -f value -c count -c memory_mb_used -c running_vms)" \
  "hypervisor stats show (2.87)"
out=$(os hypervisor stats show 2>&1) && fail "hypervisor stats show at 2.91 answered [$out]"
expect "removed in API version 2.88" "$(grep -o 'removed in API version 2.88' <<<"$out")" "hypervisor stats show at 2.91: the client refuses it"
expect "up" "$(os hypervisor show h01 -f value -c state)" "hypervisor show (2.91)"
os hypervisor show h01 -f json | /usr/bin/python3 -c 'import json,sys; h=json.load(sys.stdin); sys.exit(0 if "uptime" in h and "vcpus" not in h else 1)' ||
  fail "hypervisor show at 2.91: want uptime and no vcpus"
echo "ok  hypervisor show (2.91): uptime, no resource fields"
os server create --flavor m1.tiny --image keel-fake --nic none --hostname web-01 --wait vmh >/dev/null
expect "web-01" "$(os server show vmh -f value -c OS-EXT-SRV-ATTR:hostname)" "server create --hostname (2.90)"
os server set --hostname web-02 vmh
expect "web-02" "$(os server show vmh -f value -c OS-EXT-SRV-ATTR:hostname)" "server set --hostname (2.90)"
os server delete --wait vmh
expect "totalCoresUsed 1;totalInstancesUsed 1;totalRAMUsed 2048;totalServerGroupsUsed 0;" \
  "$(os limits show --absolute -f value | grep Used | sort | tr '\n' ';')" "limits show --absolute"

hostof() { os server show "$1" -f value -c OS-EXT-SRV-ATTR:host; }
src=$(hostof vm1)
case "$src" in h01|h02|h03) ;; *) fail "vm1 on unexpected host [$src]" ;; esac

# Placement: the providers the agents registered, and vm1's claim on its host.
expect "$(printf 'h01\nh02\nh03')" "$(os resource provider list -f value -c name | sort)" "resource provider list"
rp=$(os resource provider list --name "$src" -f value -c uuid)
expect "$(printf 'DISK_GB 2000\nMEMORY_MB 131072\nVCPU 32')" \
  "$(os resource provider inventory list "$rp" -f value -c resource_class -c total | sort)" "resource provider inventory list"
expect "$(printf 'DISK_GB 20\nMEMORY_MB 2048\nVCPU 1')" \
  "$(os resource provider usage show "$rp" -f value | sort)" "resource provider usage show"
expect "3" "$(os --os-placement-api-version 1.10 allocation candidate list --resource VCPU=1 -f value -c 'resource provider' | wc -l)" \
  "allocation candidate list --resource VCPU=1"
# 130560 MB of capacity per host: vm1's host has 2048 of it taken.
big=$(os --os-placement-api-version 1.10 allocation candidate list --resource MEMORY_MB=130000 -f value -c 'resource provider')
expect "2 0" "$(echo "$big" | wc -l) $(echo "$big" | grep -c "$rp" || true)" \
  "allocation candidate list --resource MEMORY_MB=130000 (2 hosts, not $src)"
# Placement writes: a provider of its own, inventory, allocations against it
# (the second does not fit), then everything removed again.
osp() { os --os-placement-api-version 1.39 "$@"; }
expect "ext1" "$(osp resource provider create ext1 -f value -c name)" "resource provider create"
ext=$(osp resource provider list --name ext1 -f value -c uuid)
expect "VCPU 2147483647 4" "$(osp resource provider inventory set "$ext" --resource VCPU=4 -f value -c resource_class -c total -c max_unit)" \
  "resource provider inventory set (max_unit 2147483647 unless given, as Placement)"
# A provider tree: a child of ext1 with VCPU of its own; two granular
# groups, isolated, take 3 VCPU from ext1 and 2 from the child (the flat
# hosts cannot hold two isolated groups).
child=$(osp resource provider create ext1-numa0 --parent-provider "$ext" -f value -c uuid)
expect "$ext" "$(osp resource provider show "$child" -f value -c root_provider_uuid)" "resource provider create --parent-provider"
osp resource provider inventory set "$child" --resource VCPU=2 >/dev/null
expect "$(printf '1 VCPU=2 %s\n1 VCPU=3 %s' "$child" "$ext" | sort)" \
  "$(osp allocation candidate list --group 1 --resource VCPU=3 --group 2 --resource VCPU=2 --group-policy isolate \
      -f value -c '#' -c allocation -c 'resource provider' | sort)" "allocation candidate list --group (isolate, over a tree)"
c1=$(cat /proc/sys/kernel/random/uuid)
osp resource provider allocation set "$c1" --allocation "rp=$ext,VCPU=3" --project-id p1 --user-id u1 --consumer-type INSTANCE >/dev/null
expect "$ext {'VCPU': 3} INSTANCE" "$(osp resource provider allocation show "$c1" -f value -c resource_provider -c resources -c consumer_type)" \
  "resource provider allocation set/show"
if out=$(osp resource provider allocation set "$(cat /proc/sys/kernel/random/uuid)" --allocation "rp=$ext,VCPU=2" \
  --project-id p1 --user-id u1 --consumer-type INSTANCE 2>&1); then
  fail "2 VCPU more on a provider with 1 free was accepted"
fi
case "$out" in *"HTTP 409"*) echo "ok  an allocation over capacity is refused (409)" ;; *) fail "over capacity: [$out]" ;; esac
osp resource provider allocation delete "$c1"
osp resource provider delete "$child"
osp resource provider delete "$ext"
expect "$(printf 'h01\nh02\nh03')" "$(os resource provider list -f value -c name | sort)" "resource provider allocation delete, provider delete"

project=$(os token issue -f value -c project_id)
expect "$(printf 'DISK_GB 20\nMEMORY_MB 2048\nVCPU 1')" \
  "$(os --os-placement-api-version 1.9 resource usage show "$project" -f value | sort)" "resource usage show"

os server migrate --live-migration --wait vm1 >/dev/null
mid=$(hostof vm1)
[ "$mid" != "$src" ] || fail "live migration without --host left vm1 on $src"
echo "ok  server migrate --live-migration ($src -> $mid)"

target=
for h in h01 h02 h03; do
  if [ "$h" != "$src" ] && [ "$h" != "$mid" ]; then target=$h; fi
done
os server migrate --live-migration --host "$target" --wait vm1 >/dev/null
expect "$target" "$(hostof vm1)" "server migrate --live-migration --host $target"

expect "$(printf '%s %s completed\n%s %s completed' "$mid" "$target" "$src" "$mid")" \
  "$(os server migration list -f value -c 'Source Compute' -c 'Dest Compute' -c Status)" "server migration list"

# Both hosts of the last move are exact at once (no audit has run: the
# interval is the default 60 s): 512 MB reserved, plus 2048 on the target.
want=""
for h in h01 h02 h03; do
  used=512
  [ "$h" = "$target" ] && used=2560
  want+="$h up $used"$'\n'
done
expect "${want%$'\n'}" "$(os --os-compute-api-version 2.87 hypervisor list --long -f value -c 'Hypervisor Hostname' -c State -c 'Memory MB Used' | sort)" \
  "hypervisor list --long"

os compute service set --disable "$target" nova-compute
expect "disabled" "$(os compute service list --host "$target" -f value -c Status)" "compute service set --disable"
# Nova's force-down path of 2.11 to 2.52 (PUT /os-services/force-down).
os --os-compute-api-version 2.11 compute service set --down "$target" nova-compute
expect "True" "$(os --os-compute-api-version 2.11 compute service list --long --host "$target" -f value -c 'Forced Down')" \
  "compute service set --down at 2.11"
os --os-compute-api-version 2.11 compute service set --up "$target" nova-compute
expect "False" "$(os --os-compute-api-version 2.11 compute service list --long --host "$target" -f value -c 'Forced Down')" \
  "compute service set --up at 2.11"
expect "Services" "$(os extension list --compute -f value -c Name | grep -x Services)" "extension list --compute"
os server create --flavor m1.small --image keel-fake --nic none --wait vm2 >/dev/null
[ "$(hostof vm2)" != "$target" ] || fail "vm2 was placed on disabled host $target"
echo "ok  a disabled host gets no new server"

# Deleting a compute service (DELETE /os-services/{id}): refused while its
# host runs a server (vm1 is on $target), as Nova.
svc=$(os compute service list --host "$target" -f value -c ID)
rp_target=$(os resource provider list --name "$target" -f value -c uuid)
if out=$(os compute service delete "$svc" 2>&1); then fail "compute service delete of $target, which hosts vm1, succeeded"; fi
case "$out" in *"Unable to delete compute service that is hosting instances"*) echo "ok  compute service delete of a host with a server: 409" ;;
  *) fail "compute service delete of a busy host: [$out]" ;; esac

os server delete --wait vm1 vm2
expect "" "$(os server list -f value -c Name)" "server delete --wait"

# Once idle it goes. $target's agent keeps running, so its next heartbeat
# (report_interval, 10 s) registers the host again, as a restarted
# nova-compute does: enabled (it was disabled), its provider under the
# same UUID. Then $target is disabled again for what follows.
os compute service delete "$svc"
echo "ok  compute service delete $target"
back=
for _ in $(seq 60); do
  back=$(os compute service list --host "$target" -f value -c Status -c State)
  [ "$back" = "enabled up" ] && break
  sleep 1
done
expect "enabled up" "$back" "the running agent of $target registers again after its service was deleted"
expect "$rp_target" "$(os resource provider list --name "$target" -f value -c uuid)" "$target's provider back under its UUID"
os compute service set --disable "$target" nova-compute

# Host aggregates and availability zones: a zone on an aggregate is its
# hosts' zone, in the zone list and for the scheduler. $target is still
# disabled, so the aggregate takes the two hosts that are not.
az=()
for h in h01 h02 h03; do [ "$h" != "$target" ] && az+=("$h"); done
expect "$(printf 'az1\nrack1')" "$(os aggregate create --zone az1 rack1 -f value -c name -c availability_zone)" "aggregate create --zone az1"
os aggregate add host rack1 "${az[0]}" >/dev/null
expect "['${az[0]}', '${az[1]}']" "$(os aggregate add host rack1 "${az[1]}" -f value -c hosts)" "aggregate add host"
# Placement mirrors the membership: each host's provider is in the
# placement aggregate of rack1's UUID, the disabled one's in none.
agg=$(os --os-compute-api-version 2.41 aggregate show rack1 -f value -c uuid)
for h in "${az[@]}" "$target"; do
  want=$agg; [ "$h" = "$target" ] && want=
  expect "$want" "$(osp resource provider aggregate list "$(os resource provider list --name "$h" -f value -c uuid)" -f value -c uuid)" \
    "resource provider aggregate list ($h)"
done
# nova keeps only the disabled $target: Nova reports such a zone unavailable.
expect "$(printf 'az1 available\nnova not available')" "$(os availability zone list --compute -f value)" \
  "availability zone list (az1 from the aggregate)"
expect "$(printf 'az1 %s\naz1 %s\nnova %s' "${az[0]}" "${az[1]}" "$target")" \
  "$(os availability zone list --compute --long -f value -c 'Zone Name' -c 'Host Name' | sort)" "availability zone list --long"
os server create --flavor m1.small --image keel-fake --nic none --availability-zone az1 --wait inaz1 >/dev/null
case "$(hostof inaz1)" in "${az[0]}"|"${az[1]}") echo "ok  server create --availability-zone az1 lands in rack1" ;;
  *) fail "inaz1 landed on [$(hostof inaz1)], outside az1" ;; esac
os server delete --wait inaz1

# Server groups: anti-affinity spreads the members over the two enabled
# hosts; a third member finds no valid host and leaves the group.
expect "$(printf 'web\nanti-affinity')" "$(os server group create --policy anti-affinity web -f value -c name -c policy)" \
  "server group create --policy anti-affinity"
gid=$(os server group show web -f value -c id)
for m in web1 web2; do
  os server create --flavor m1.small --image keel-fake --nic none --hint group="$gid" --wait "$m" >/dev/null
done
[ "$(hostof web1)" != "$(hostof web2)" ] || fail "anti-affinity put web1 and web2 both on $(hostof web1)"
echo "ok  server create --hint group= (anti-affinity: web1 on $(hostof web1), web2 on $(hostof web2))"
os server create --flavor m1.small --image keel-fake --nic none --hint group="$gid" --wait web3 >/dev/null 2>&1 || true
expect "ERROR" "$(os server show web3 -f value -c status)" "a third anti-affinity member on two hosts"
case "$(os server show web3 -f value -c fault)" in *"No valid host"*"ServerGroupAntiAffinityFilter"*) echo "ok  its fault names the filter" ;;
  *) fail "web3's fault: $(os server show web3 -f value -c fault)" ;; esac
members=$(os server group show web -f value -c members)
for m in web1 web2; do
  case "$members" in *"$(os server show "$m" -f value -c id)"*) ;; *) fail "server group members [$members] lack $m" ;; esac
done
case "$members" in *"$(os server show web3 -f value -c id)"*) fail "the failed web3 is still a member: $members" ;; esac
echo "ok  server group show: members web1 and web2"
os server delete --wait web1 web2 web3
os server group delete web
os aggregate remove host rack1 "${az[0]}" >/dev/null
os aggregate remove host rack1 "${az[1]}" >/dev/null
os aggregate delete rack1
expect "nova available" "$(os availability zone list --compute -f value)" "aggregate remove host, aggregate delete"

# Placement traits, resource classes and aggregates, and the list and
# candidate filters that read them (osc-placement at 1.39; --required A,B
# is 1.39's "in:" any-of).
rpa=$(os resource provider list --name h01 -f value -c uuid)
rpb=$(os resource provider list --name h02 -f value -c uuid)
osp trait create CUSTOM_FAST_NIC
expect "CUSTOM_FAST_NIC" "$(osp trait list --name startswith:CUSTOM_ -f value)" "trait create, trait list --name startswith:"
osp resource class create CUSTOM_GPU
expect "$(printf 'CUSTOM_GPU\nVCPU')" "$(osp resource class list -f value | grep -x -e VCPU -e 'CUSTOM_.*' | sort)" \
  "resource class create, resource class list"
expect "$(printf 'CUSTOM_FAST_NIC\nHW_CPU_X86_AVX2')" \
  "$(osp resource provider trait set --trait CUSTOM_FAST_NIC --trait HW_CPU_X86_AVX2 "$rpa" -f value | sort)" "resource provider trait set"
expect "$(printf 'CUSTOM_FAST_NIC\nHW_CPU_X86_AVX2')" "$(osp resource provider trait list "$rpa" -f value | sort)" \
  "resource provider trait list"
agg=$(cat /proc/sys/kernel/random/uuid)
gen=$(osp resource provider show "$rpb" -f value -c generation)
if out=$(osp resource provider aggregate set --aggregate "$agg" --generation $((gen - 1)) "$rpb" 2>&1); then
  fail "aggregate set with a stale generation was accepted"
fi
case "$out" in *"HTTP 409"*) echo "ok  aggregate set with a stale generation is refused (409)" ;; *) fail "stale generation: [$out]" ;; esac
expect "$agg" "$(osp resource provider aggregate set --aggregate "$agg" --generation "$gen" "$rpb" -f value -c uuid)" \
  "resource provider aggregate set"
expect "$agg" "$(osp resource provider aggregate list "$rpb" -f value -c uuid)" "resource provider aggregate list"
expect "h01" "$(osp resource provider list --required CUSTOM_FAST_NIC -f value -c name)" "resource provider list --required"
expect "$(printf 'h02\nh03')" "$(osp resource provider list --forbidden CUSTOM_FAST_NIC -f value -c name | sort)" \
  "resource provider list --forbidden"
expect "h01" "$(osp resource provider list --required HW_CPU_X86_AVX2,COMPUTE_STATUS_DISABLED -f value -c name)" \
  "resource provider list --required A,B (any of)"
expect "h02" "$(osp resource provider list --member-of "$agg" -f value -c name)" "resource provider list --member-of"
expect "$rpa" "$(osp allocation candidate list --resource VCPU=1 --required CUSTOM_FAST_NIC -f value -c 'resource provider')" \
  "allocation candidate list --resource VCPU=1 --required CUSTOM_FAST_NIC"
expect "$rpb" "$(osp allocation candidate list --resource VCPU=1 --forbidden HW_CPU_X86_AVX2 --member-of "$agg" -f value -c 'resource provider')" \
  "allocation candidate list --forbidden --member-of"
expect "" "$(osp allocation candidate list --resource VCPU=1 --required CUSTOM_FAST_NIC --member-of "$agg" -f value)" \
  "allocation candidate list --required --member-of (no provider has both)"
if out=$(osp trait delete CUSTOM_FAST_NIC 2>&1); then fail "a trait in use was deleted"; fi
case "$out" in *"HTTP 409"*) echo "ok  trait delete of a trait in use is refused (409)" ;; *) fail "trait in use: [$out]" ;; esac
osp resource provider trait delete "$rpa"
osp trait delete CUSTOM_FAST_NIC
osp resource class delete CUSTOM_GPU
osp resource provider aggregate set --generation "$(osp resource provider show "$rpb" -f value -c generation)" "$rpb" >/dev/null
expect "" "$(osp trait list --name startswith:CUSTOM_ -f value)$(osp resource provider aggregate list "$rpb" -f value)" \
  "resource provider trait delete, trait delete, aggregates cleared"

# A flavor's trait:NAME=required reaches keel's scheduler: the server lands
# on the one enabled host whose provider has the trait.
th=
for h in h01 h02 h03; do if [ "$h" != "$target" ]; then th=$h; break; fi; done
rpt=$(os resource provider list --name "$th" -f value -c uuid)
osp trait create CUSTOM_PICK_ME
osp resource provider trait set --trait CUSTOM_PICK_ME "$rpt" >/dev/null
os flavor create --vcpus 1 --ram 512 --disk 1 --property trait:CUSTOM_PICK_ME=required picky >/dev/null
os server create --flavor picky --image keel-fake --nic none --wait vmt >/dev/null
expect "$th" "$(hostof vmt)" "server create --flavor with trait:CUSTOM_PICK_ME=required lands on $th"
os server delete --wait vmt
os flavor delete picky
osp resource provider trait delete "$rpt"

# A flavor's granular group reaches a child provider: CUSTOM_PGPU with the
# trait on a child of $th's provider takes resources1:CUSTOM_PGPU=1 with
# trait1:CUSTOM_PICK_ME=required; the claim spans the tree (the flavor on
# the host's provider, the PGPU on the child); a second such server finds
# no valid host.
osp resource class create CUSTOM_PGPU
pgpu=$(osp resource provider create "$th-pgpu0" --parent-provider "$rpt" -f value -c uuid)
osp resource provider inventory set "$pgpu" --resource CUSTOM_PGPU=1 >/dev/null
osp resource provider trait set --trait CUSTOM_PICK_ME "$pgpu" >/dev/null
os flavor create --vcpus 1 --ram 512 --disk 1 --property resources1:CUSTOM_PGPU=1 --property trait1:CUSTOM_PICK_ME=required gpu1 >/dev/null
os server create --flavor gpu1 --image keel-fake --nic none --wait vmg >/dev/null
expect "$th" "$(hostof vmg)" "server create --flavor with resources1:CUSTOM_PGPU=1 + trait1 lands on $th"
expect "$(printf "%s {'CUSTOM_PGPU': 1}\n%s {'DISK_GB': 1, 'MEMORY_MB': 512, 'VCPU': 1}" "$pgpu" "$rpt" | sort)" \
  "$(osp resource provider allocation show "$(os server show vmg -f value -c id)" -f value -c resource_provider -c resources | sort)" \
  "resource provider allocation show: the claim spans the host's provider and its child"
# (openstackclient 6.0's --wait exits 0 on ERROR too: the status tells.)
os server create --flavor gpu1 --image keel-fake --nic none --wait vmg2 >/dev/null 2>&1 || true
case "$(os server show vmg2 -f value -c status -c fault)" in
  *ERROR*"No valid host"*|*"No valid host"*ERROR*) echo "ok  a group no provider can satisfy: ERROR, No valid host" ;;
  *) fail "vmg2: [$(os server show vmg2 -f value -c status -c fault)]" ;;
esac
os server delete --wait vmg vmg2
expect "" "$(osp resource provider usage show "$pgpu" -f value | grep -v ' 0$' || true)" "server delete gives the child's CUSTOM_PGPU back"
osp resource provider delete "$pgpu"
osp resource class delete CUSTOM_PGPU
os flavor delete gpu1
osp trait delete CUSTOM_PICK_ME

# Identity: keel dev's members log in with passwords of their own (their
# own clouds in clouds.yaml), and the admin adds a project and a user.
expect "$(os project show demo -f value -c id)" "$(osc --os-cloud keel-demo token issue -f value -c project_id)" \
  "keel-demo logs in to project demo"
if osc --os-auth-url "$keel_url/identity/v3" --os-username demo --os-password "$(cat "$work/data/admin-password")" \
  --os-project-name demo --os-user-domain-name Default --os-project-domain-name Default token issue >/dev/null 2>&1; then
  fail "demo logs in with the admin's password"
fi
echo "ok  demo does not log in with the admin's password"
# The admin's side of Keystone's API: a project and a user made, renamed,
# disabled and deleted; a role of its own made and deleted; assignments
# listed with Keystone's filters.
expect "team1" "$(os project create team1 --description first -f value -c name)" "project create"
expect "carol" "$(os user create --project team1 --password carol-pw-1 carol -f value -c name)" "user create"
os role add --user carol --project team1 member
carol() { osc --os-auth-url "$keel_url/identity/v3" --os-username "${CU:-carol}" --os-password "$1" \
  --os-project-name "${CP:-team1}" --os-user-domain-name Default --os-project-domain-name Default --os-compute-api-version 2.79 "${@:2}"; }
team1=$(os project show team1 -f value -c id)
expect "$team1" "$(carol carol-pw-1 token issue -f value -c project_id)" "the new user logs in to its project"
expect "" "$(carol carol-pw-1 server list -f value)" "the new user sees no servers of other projects"
os user set --password carol-pw-2 carol
if carol carol-pw-1 token issue >/dev/null 2>&1; then fail "carol's old password still works after user set --password"; fi
expect "$team1" "$(carol carol-pw-2 token issue -f value -c project_id)" "user set --password"
os project set --name team2 --description second team1
expect "second True $team1 team2" "$(os project show team2 -f value -c description -c enabled -c id -c name | xargs)" \
  "project set --name --description"
expect "$team1" "$(CP=team2 carol carol-pw-2 token issue -f value -c project_id)" "the renamed project takes logins by its new name"
os project set --disable team2
if CP=team2 carol carol-pw-2 token issue >/dev/null 2>&1; then fail "carol logs in to a disabled project"; fi
echo "ok  project set --disable"
os project set --enable team2
expect "observer" "$(os role create observer -f value -c name)" "role create"
os role add --user carol --project team2 observer
expect "$(printf 'member carol@Default team2@Default\nobserver carol@Default team2@Default')" \
  "$(os role assignment list --user carol --names -f value -c Role -c User -c Project | sort)" "role assignment list --user --names"
expect "$(os user show carol -f value -c id) $team1" "$(os role assignment list --role observer -f value -c User -c Project)" \
  "role assignment list --role"
expect "$(printf 'admin\nmember\nreader')" "$(os role assignment list --user admin --project admin --effective --names -f value -c Role | sort)" \
  "role assignment list --effective (admin implies member and reader)"
os role delete observer
expect "member" "$(os role assignment list --project team2 --names -f value -c Role)" "role delete takes its assignments"
if os role delete member 2>/dev/null; then fail "role delete member (a built-in role) succeeded"; fi
echo "ok  role delete refuses a built-in role"
os user set --name carol2 --email carol@example.org --description "team lead" carol
expect "team lead carol@example.org True carol2" "$(os user show carol2 -f value -c description -c email -c enabled -c name | xargs)" \
  "user set --name --email --description"
CU=carol2 CP=team2 carol carol-pw-2 user password set --original-password carol-pw-2 --password carol-pw-3
if CU=carol2 CP=team2 carol carol-pw-2 token issue >/dev/null 2>&1; then fail "carol's old password still works after user password set"; fi
expect "$team1" "$(CU=carol2 CP=team2 carol carol-pw-3 token issue -f value -c project_id)" "user password set"
os user set --disable carol2
if CU=carol2 CP=team2 carol carol-pw-3 token issue >/dev/null 2>&1; then fail "a disabled user logs in"; fi
echo "ok  user set --disable"
os user set --enable carol2
if osc --os-cloud keel-demo role assignment list >/dev/null 2>&1; then fail "a member listed role assignments"; fi
if osc --os-cloud keel-demo project set --name x "$(os project show demo -f value -c id)" >/dev/null 2>&1; then fail "a member renamed its project"; fi
echo "ok  a member can do none of it"
os role remove --user carol2 --project team2 member
if CU=carol2 CP=team2 carol carol-pw-3 token issue >/dev/null 2>&1; then fail "carol logs in after role remove"; fi
echo "ok  role remove"
os role add --user carol2 --project team2 member
os project delete team2
if CU=carol2 CP=team2 carol carol-pw-3 token issue >/dev/null 2>&1; then fail "carol logs in to a deleted project"; fi
expect "" "$(os role assignment list --user carol2 -f value)" "project delete takes its assignments"
os user delete carol2
expect "" "$(os user list -f value -c Name | grep carol || true)" "user delete"
tok=$(os token issue -f value -c id)
os token revoke "$tok"
if osc --os-auth-type token --os-token "$tok" --os-auth-url "$keel_url/identity/v3" --os-project-name admin \
  --os-project-domain-name Default server list >/dev/null 2>&1; then fail "a revoked token still works"; fi
echo "ok  token revoke"

# Quotas: demo starts with Nova's defaults; the admin lowers them and
# demo's next boot past the limit is refused with Nova's words.
expect "10 20 51200" "$(os quota show demo -f json | /usr/bin/python3 -c 'import json,sys; q=json.load(sys.stdin); print(q["instances"], q["cores"], q["ram"])')" \
  "quota show (Nova's defaults)"
os quota set --instances 1 --cores 4 demo
expect "1 4" "$(os quota show demo -f json | /usr/bin/python3 -c 'import json,sys; q=json.load(sys.stdin); print(q["instances"], q["cores"])')" "quota set"
demo server create --flavor m1.tiny --image keel-fake --nic none --wait q1 >/dev/null
if out=$(demo server create --flavor m1.tiny --image keel-fake --nic none q2 2>&1); then fail "a boot past instances=1 was accepted"; fi
case "$out" in *"Quota exceeded for instances: Requested 1, but already used 1 of 1 instances"*"HTTP 403"*) echo "ok  a boot past the instances quota is refused (403)" ;;
  *) fail "boot past the quota: [$out]" ;; esac
expect "1 1" "$(os limits show --absolute --project demo -f value | awk '$1=="maxTotalInstances"||$1=="totalInstancesUsed"{print $2}' | tr '\n' ' ' | sed 's/ $//')" \
  "limits show --absolute --project demo"
demo server delete --wait q1
# The lifecycle actions: each ends in Nova's status, vm_state and
# power_state; the ones openstackclient cannot --wait for are polled.
waitstatus() { # NAME STATUS
  local i s
  for i in $(seq 100); do
    # -f value prints the columns sorted by name: task_state, status.
    s=$(os server show "$1" -f value -c status -c OS-EXT-STS:task_state | tr '\n' ' ')
    [ "$s" = "None $2 " ] && return 0
    sleep 0.1
  done
  fail "server $1 is [$s], want $2"
}
# power_state vm_state status (the columns sorted by name).
states() { os server show "$1" -f value -c status -c OS-EXT-STS:vm_state -c OS-EXT-STS:power_state | tr '\n' ' '; }
os server create --flavor m1.small --image keel-fake --nic none --wait life >/dev/null
os server stop life; waitstatus life SHUTOFF
expect "4 stopped SHUTOFF " "$(states life)" "server stop"
if out=$(os server stop life 2>&1); then fail "stopping a stopped server was accepted"; fi
case "$out" in *"Cannot 'stop' instance"*"while it is in vm_state stopped"*"HTTP 409"*) echo "ok  server stop of a stopped server: 409, Nova's text" ;;
  *) fail "stop again: [$out]" ;; esac
os server start life; waitstatus life ACTIVE
expect "1 active ACTIVE " "$(states life)" "server start"
os server reboot --hard --wait life >/dev/null
expect "1 active ACTIVE " "$(states life)" "server reboot --hard --wait"
os server reboot --soft --wait life >/dev/null
expect "1 active ACTIVE " "$(states life)" "server reboot --soft --wait"
os server pause life; waitstatus life PAUSED
expect "3 paused PAUSED " "$(states life)" "server pause"
os server unpause life; waitstatus life ACTIVE
os server suspend life; waitstatus life SUSPENDED
expect "7 suspended SUSPENDED " "$(states life)" "server suspend"
os server resume life; waitstatus life ACTIVE
expect "1 active ACTIVE " "$(states life)" "server unpause, server resume"
os server rescue life >/dev/null; waitstatus life RESCUE
os server unrescue life; waitstatus life ACTIVE
echo "ok  server rescue, server unrescue"
os server rebuild --image keel-fake --name life2 --wait life >/dev/null
expect "life2 ACTIVE" "$(os server show life2 -f value -c status -c name | tr '\n' ' ' | sed 's/ $//')" "server rebuild --name --wait"
os --os-compute-api-version 2.73 server lock --reason "maintenance window" life2
expect "True maintenance window" "$(os --os-compute-api-version 2.73 server show life2 -f value -c locked -c locked_reason | tr '\n' ' ' | sed 's/ $//')" \
  "server lock --reason"
os server unlock life2
expect "False" "$(os --os-compute-api-version 2.73 server show life2 -f value -c locked)" "server unlock"
lhost=$(hostof life2)
lrp=$(os resource provider list --name "$lhost" -f value -c uuid)
before=$(osp resource provider usage show "$lrp" -f value -c resource_class -c usage | grep MEMORY_MB)
os server shelve life2; waitstatus life2 SHELVED_OFFLOADED
expect "0 shelved_offloaded SHELVED_OFFLOADED " "$(states life2)" "server shelve (offloaded at once)"
expect "None" "$(hostof life2)" "a shelved_offloaded server has no host"
expect "MEMORY_MB $(( ${before#MEMORY_MB } - 2048 ))" "$(osp resource provider usage show "$lrp" -f value -c resource_class -c usage | grep MEMORY_MB)" \
  "the offload gives $lhost's claim back"
os server unshelve --wait life2 >/dev/null
expect "1 active ACTIVE " "$(states life2)" "server unshelve --wait"
case "$(hostof life2)" in h01|h02|h03) echo "ok  unshelved onto $(hostof life2)" ;; *) fail "unshelved on [$(hostof life2)]" ;; esac
expect "$(printf 'create\nreboot\nreboot\nstop\nstart\npause\nunpause\nsuspend\nresume\nrescue\nunrescue\nrebuild\nlock\nunlock\nshelve\nunshelve' | sort)" \
  "$(os server event list life2 -f value -c Action | sort)" "server event list: every action recorded"
os server delete --wait life2


# Cold moves: resize (confirm), cold migration (revert) and evacuation of
# a host forced down; the usage of each host is exact at each step (the
# hypervisor list shows the host records).
os server create --flavor m1.tiny --image keel-fake --nic none --wait vmr >/dev/null
rsrc=$(hostof vmr)
os server resize --flavor m1.small --wait vmr >/dev/null
expect "VERIFY_RESIZE" "$(os server show vmr -f value -c status)" "server resize --flavor m1.small --wait: VERIFY_RESIZE"
rdst=$(hostof vmr)
if [ "$rdst" = "$rsrc" ]; then fail "resize stayed on $rsrc"; fi
os server resize confirm vmr
expect "ACTIVE m1.small" "$(os server show vmr -f value -c status) $(os server show vmr -f json -c flavor | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["flavor"]["original_name"])')" \
  "server resize confirm: ACTIVE with the new flavor"
os server migrate --wait vmr >/dev/null
expect "VERIFY_RESIZE" "$(os server show vmr -f value -c status)" "server migrate --wait (cold): VERIFY_RESIZE"
os server resize revert vmr
for _ in $(seq 50); do [ "$(os server show vmr -f value -c status)" = ACTIVE ] && break; sleep 0.2; done
expect "ACTIVE $rdst" "$(os server show vmr -f value -c status) $(hostof vmr)" "server resize revert: back on $rdst"
if out=$(os server evacuate vmr 2>&1); then fail "evacuate from a live host was accepted"; fi
case "$out" in *"still in use"*"HTTP 400"*) echo "ok  server evacuate from a live host is refused (400)" ;; *) fail "evacuate of a live host: [$out]" ;; esac
os compute service set --down "$rdst" nova-compute
# openstackclient 6.0's `server evacuate` sends the action, then fails
# reading the answer as a server ('TupleWithMeta' object has no attribute
# 'to_dict', whatever the cloud); keel's own command evacuates the host.
"$work/keel" host evacuate "$rdst" --wait --os-cloud keel >"$work/evacuate.out"
grep -q "^\[1/1\] vmr: ACTIVE on " "$work/evacuate.out" || fail "keel host evacuate: [$(cat "$work/evacuate.out")]"
for _ in $(seq 50); do [ "$(hostof vmr)" != "$rdst" ] && [ "$(os server show vmr -f value -c status)" = ACTIVE ] && break; sleep 0.2; done
edst=$(hostof vmr)
if [ "$edst" = "$rdst" ] || [ "$(os server show vmr -f value -c status)" != ACTIVE ]; then fail "evacuate: vmr still on $rdst"; fi
echo "ok  keel host evacuate $rdst --wait: vmr rebuilt on $edst"
os compute service set --up "$rdst" nova-compute
for _ in $(seq 100); do
  case " $(os server migration list -f value -c Status | tr '\n' ' ') " in *" done "*) sleep 0.2 ;; *) break ;; esac
done
expect "" "$(os server migration list -f value -c Status | grep -x -e done -e migrating -e pre-migrating)" \
  "compute service set --up: the evacuation completes once the host is back"
os server delete --wait vmr
# Private flavors and flavor access (issue 18): a private flavor is hidden
# from demo until the admin gives demo's project access, then demo boots it.
os flavor create --private --ram 256 --vcpus 1 --disk 1 m1.private >/dev/null
expect "False" "$(os flavor show m1.private -f value -c os-flavor-access:is_public)" "flavor create --private"
case "$(demo flavor list -f value -c Name)" in *m1.private*) fail "demo lists a private flavor it has no access to" ;; esac
if demo flavor show m1.private >/dev/null 2>&1; then fail "demo shows a private flavor it has no access to"; fi
echo "ok  a private flavor is neither listed nor shown to a project without access"
os flavor set --project demo m1.private
expect "['$(os project show demo -f value -c id)']" "$(os flavor show m1.private -f value -c access_project_ids)" "flavor set --project"
case "$(demo flavor list -f value -c Name)" in *m1.private*) echo "ok  demo lists the private flavor once it has access" ;;
  *) fail "demo with access does not list m1.private" ;; esac
demo server create --flavor m1.private --image keel-fake --nic none --wait pf1 >/dev/null
expect "ACTIVE m1.private" "$(demo server show pf1 -f json | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["status"], s["flavor"]["original_name"])')" "demo boots the private flavor"
demo server delete --wait pf1
os flavor unset --project demo m1.private
case "$(demo flavor list -f value -c Name)" in *m1.private*) fail "demo still lists m1.private after flavor unset --project" ;; esac
echo "ok  flavor unset --project hides it again"
os --os-compute-api-version 2.55 flavor set --description "for demo" m1.private
expect "for demo" "$(os --os-compute-api-version 2.55 flavor show m1.private -f value -c description)" "flavor set --description (2.55)"
os flavor delete m1.private

# Key pairs, server metadata and usage (issue 18): demo's key pairs are its
# own, a server booted with one shows it, --property writes the server's
# metadata, and usage counts the servers' hours.
demo keypair create kp1 >"$work/kp1.pem"
grep -q 'BEGIN RSA PRIVATE KEY' "$work/kp1.pem" || fail "keypair create printed no private key"
echo "ok  keypair create (generated; the private key printed once)"
# An ed25519 public key made once with ssh-keygen.
printf '%s\n' 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB4aJVfMOZ/BFPLT3XcrMcW0AVv6M0nqHJDOQPkx0izo demo@keel' >"$work/kp2.pub"
demo keypair create --public-key "$work/kp2.pub" kp2 >/dev/null
expect "kp1 kp2" "$(demo keypair list -f value -c Name | sort | tr '\n' ' ' | sed 's/ $//')" "keypair create --public-key, keypair list"
expect "$(cut -d' ' -f1,2 "$work/kp2.pub")" "$(demo keypair show --public-key kp2 | cut -d' ' -f1,2)" "keypair show --public-key: the imported key"
expect "ssh" "$(demo --os-compute-api-version 2.2 keypair show kp2 -f value -c type)" "keypair show: type ssh (2.2)"
expect "" "$(os keypair list -f value -c Name)" "the admin does not see demo's key pairs"
demo server create --flavor m1.tiny --image keel-fake --nic none --key-name kp2 --property a=1 --wait kv1 >/dev/null
expect "kp2" "$(demo server show kv1 -f value -c key_name)" "server create --key-name"
if out=$(os server create --flavor m1.tiny --image keel-fake --nic none --key-name kp2 kv2 2>&1); then fail "the admin booted with demo's key pair"; fi
case "$out" in *"Invalid key_name provided"*) echo "ok  another user's key pair is refused (400)" ;; *) fail "boot with another user's key: [$out]" ;; esac
demo server set --property b=2 --property a=one kv1
expect "{'a': 'one', 'b': '2'}" "$(demo server show kv1 -f value -c properties)" "server set --property"
demo server unset --property a kv1
expect "{'b': '2'}" "$(demo server show kv1 -f value -c properties)" "server unset --property"
# usage list / show: kv1 counted in demo's project.
demo_id=$(os project show demo -f value -c id)
case "$(os usage list -f value -c Project -c Servers)" in *"$demo_id"*"'name': 'kv1'"*) echo "ok  usage list: kv1 in demo's project" ;;
  *) fail "usage list: [$(os usage list -f value)]" ;; esac
# kv1 is minutes old: under an hour of CPU, as many MB-hours of RAM as 512 × hours.
expect "kv1 True True" "$(demo usage show -f json | /usr/bin/python3 -c 'import json,sys; u=json.load(sys.stdin); print(u["Servers"][0]["name"], 0 < u["CPU Hours"] < 1, abs(u["RAM MB-Hours"] - 512*u["CPU Hours"]) < 1e-6)')" \
  "usage show: demo's own project, kv1's hours so far"
demo server delete --wait kv1
demo keypair delete kp1 kp2
expect "" "$(demo keypair list -f value -c Name)" "keypair delete"
