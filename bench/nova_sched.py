"""Time Nova 26's scheduler code on keel's benchmark hosts.

Run by keelbench (bench/cmd/keelbench) with Debian's Python:

    /usr/bin/python3 bench/nova_sched.py HOSTS.json DECISIONS

HOSTS.json is {"request": {"vcpus", "memory_mb", "disk_gb"}, "hosts":
[{"name", "vcpus", "vcpus_used", "cpu_allocation_ratio", "memory_mb",
"free_ram_mb", "local_gb", "free_disk_gb"}, ...]}. For each decision the
script runs Nova's default enabled_filters (nova.conf's defaults) over every
host with nova.filters.BaseFilterHandler.get_filtered_objects, then weighs
the survivors with RAMWeigher, CPUWeigher and DiskWeigher through
nova.weights.BaseWeightHandler.get_weighed_objects -- the two calls
FilterScheduler._get_sorted_hosts makes -- and prints one JSON object:
per-decision filter, weigh and total times in ms (median over the
decisions), how many hosts passed and the five best hosts.
"""

import datetime
import json
import statistics
import sys
import time


def main():
    hosts_path, decisions = sys.argv[1], int(sys.argv[2])
    with open(hosts_path) as f:
        data = json.load(f)

    import nova.conf
    from nova import objects
    from nova.scheduler import filters as sched_filters
    from nova.scheduler import weights as sched_weights
    from nova.tests.unit.scheduler import fakes

    objects.register_all()
    conf = nova.conf.CONF
    conf([], project="nova", default_config_files=[])

    now = datetime.datetime.now(datetime.timezone.utc)
    states = []
    for h in data["hosts"]:
        service = {"disabled": False, "disabled_reason": None, "host": h["name"],
                   "created_at": now, "updated_at": now, "last_seen_up": now,
                   "forced_down": False}
        states.append(fakes.FakeHostState(h["name"], h["name"], {
            "vcpus_total": h["vcpus"],
            "vcpus_used": h["vcpus_used"],
            "cpu_allocation_ratio": h["cpu_allocation_ratio"],
            "ram_allocation_ratio": 1.0,
            "disk_allocation_ratio": 1.0,
            "total_usable_ram_mb": h["memory_mb"],
            "free_ram_mb": h["free_ram_mb"],
            "total_usable_disk_gb": h["local_gb"],
            "free_disk_mb": h["free_disk_gb"] * 1024,
            "num_io_ops": 0,
            "num_instances": 0,
            "failed_builds": 0,
            "service": service,
            "aggregates": [],
            "metrics": None,
            "updated": now,
        }))

    req = data["request"]
    flavor = objects.Flavor(vcpus=req["vcpus"], memory_mb=req["memory_mb"], root_gb=req["disk_gb"],
                            ephemeral_gb=0, swap=0, extra_specs={})
    spec = objects.RequestSpec(flavor=flavor, num_instances=1, ignore_hosts=None, force_hosts=None,
                               force_nodes=None, availability_zone=None, instance_group=None,
                               requested_destination=None,
                               image=objects.ImageMeta(properties=objects.ImageMetaProps()),
                               scheduler_hints={}, project_id="bench", user_id="bench")

    filter_handler = sched_filters.HostFilterHandler()
    by_name = {c.__name__: c for c in filter_handler.get_matching_classes(
        ["nova.scheduler.filters.all_filters"])}
    enabled = list(conf.filter_scheduler.enabled_filters)
    filter_objs = [by_name[n]() for n in enabled]
    weight_handler = sched_weights.HostWeightHandler()
    weigher_classes = weight_handler.get_matching_classes(
        ["nova.scheduler.weights.ram.RAMWeigher", "nova.scheduler.weights.cpu.CPUWeigher",
         "nova.scheduler.weights.disk.DiskWeigher"])
    weighers = [c() for c in weigher_classes]

    ftimes, wtimes, totals = [], [], []
    passed, best = 0, []
    for _ in range(decisions):
        t0 = time.perf_counter()
        kept = list(filter_handler.get_filtered_objects(filter_objs, states, spec, 0))
        t1 = time.perf_counter()
        weighed = weight_handler.get_weighed_objects(weighers, kept, spec)
        t2 = time.perf_counter()
        ftimes.append((t1 - t0) * 1000)
        wtimes.append((t2 - t1) * 1000)
        totals.append((t2 - t0) * 1000)
        passed = len(kept)
        best = [w.obj.host for w in weighed[:5]]
    json.dump({
        "filters": enabled,
        "weighers": [c.__name__ for c in weigher_classes],
        "hosts": len(states),
        "decisions": decisions,
        "passed": passed,
        "best": best,
        "filter_ms": statistics.median(ftimes),
        "weigh_ms": statistics.median(wtimes),
        "decision_ms": statistics.median(totals),
    }, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
