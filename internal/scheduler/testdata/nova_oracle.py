#!/usr/bin/python3
"""Nova 26's own scheduler filters and weighers as an oracle for keel.

Reads one JSON case per line on stdin, writes one JSON answer per line on
stdout: the hosts Nova's filters pass (in input order) and the hosts Nova's
weighers rank (best first, with their weights). The Go test
TestNovaDifferential feeds it; see nova_differential_test.go for the
case format. Nova is imported once; every case runs in this process.
"""
import datetime
import json
import sys
import traceback
import types

try:
    import nova.conf
    from nova import objects
    from nova.scheduler import filters as nova_filters
    from nova.scheduler import weights as nova_weights
    from nova.scheduler.filters import affinity_filter, availability_zone_filter
    from nova.scheduler.filters import aggregate_instance_extra_specs
    from nova.scheduler.filters import compute_filter, io_ops_filter
    from nova.scheduler.filters import num_instances_filter
    from nova.scheduler.weights import affinity, cpu, disk, io_ops, ram
    from nova.scheduler.weights import compute as build_failure
    from nova.scheduler.weights import metrics
    from nova.tests.unit.scheduler.fakes import FakeHostState
    from oslo_utils import timeutils
except ImportError as e:  # the Go test turns this into a failure naming the package
    print(json.dumps({"import_error": str(e)}), flush=True)
    sys.exit(3)

CONF = nova.conf.CONF
CONF([], project="nova", default_config_files=[])
objects.register_all()

FILTERS = {
    "ComputeFilter": compute_filter.ComputeFilter,
    "AvailabilityZoneFilter": availability_zone_filter.AvailabilityZoneFilter,
    "ServerGroupAffinityFilter": affinity_filter.ServerGroupAffinityFilter,
    "ServerGroupAntiAffinityFilter": affinity_filter.ServerGroupAntiAffinityFilter,
    "SameHostFilter": affinity_filter.SameHostFilter,
    "DifferentHostFilter": affinity_filter.DifferentHostFilter,
    "NumInstancesFilter": num_instances_filter.NumInstancesFilter,
    "IoOpsFilter": io_ops_filter.IoOpsFilter,
    "AggregateInstanceExtraSpecsFilter":
        aggregate_instance_extra_specs.AggregateInstanceExtraSpecsFilter,
}
WEIGHERS = {
    "RAMWeigher": ram.RAMWeigher,
    "CPUWeigher": cpu.CPUWeigher,
    "DiskWeigher": disk.DiskWeigher,
    "IoOpsWeigher": io_ops.IoOpsWeigher,
    "BuildFailureWeigher": build_failure.BuildFailureWeigher,
    "ServerGroupSoftAffinityWeigher": affinity.ServerGroupSoftAffinityWeigher,
    "ServerGroupSoftAntiAffinityWeigher":
        affinity.ServerGroupSoftAntiAffinityWeigher,
    "MetricsWeigher": metrics.MetricsWeigher,
}
# nova.conf [filter_scheduler] options the cases set.
OPTIONS = [
    "ram_weight_multiplier", "cpu_weight_multiplier", "disk_weight_multiplier",
    "io_ops_weight_multiplier", "build_failure_weight_multiplier",
    "soft_affinity_weight_multiplier", "soft_anti_affinity_weight_multiplier",
    "max_instances_per_host", "max_io_ops_per_host",
]


def ts(seconds):
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=seconds)


def host_state(h):
    attrs = {
        "free_ram_mb": h["free_ram_mb"], "free_disk_mb": h["free_disk_mb"],
        "vcpus_total": h["vcpus_total"], "vcpus_used": h["vcpus_used"],
        "cpu_allocation_ratio": h["cpu_allocation_ratio"],
        "num_io_ops": h["num_io_ops"], "num_instances": h["num_instances"],
        "failed_builds": h["failed_builds"],
        "service": {"host": h["host"], "binary": "nova-compute",
                    "disabled": h["disabled"], "forced_down": h["forced_down"],
                    "last_seen_up": ts(h["last_seen_up"]),
                    "created_at": ts(0), "updated_at": ts(h["last_seen_up"])},
        "aggregates": [types.SimpleNamespace(metadata=m)
                       for m in h.get("aggregates") or []],
        "instances": {u: None for u in h.get("instances") or []},
        # As HostState reads compute_nodes.metrics (the stored JSON: the
        # percents as fractions).
        "metrics": objects.MonitorMetricList.from_json(json.dumps([
            {"name": n, "value": v, "source": "keel",
             "timestamp": "2027-01-15T08:00:00.000000"}
            for n, v in sorted((h.get("metrics") or {}).items())])),
    }
    return FakeHostState(h["host"], h["host"], attrs)


def request_spec(r):
    group = None
    g = r.get("group")
    if g:
        group = objects.InstanceGroup(
            uuid=g["uuid"], policy=g["policy"], policies=[g["policy"]],
            members=g["members"],
            hosts=g["hosts"], rules=g.get("rules") or {})
    hints = {k: v for k, v in (r.get("hints") or {}).items()}
    return objects.RequestSpec(
        instance_uuid=r["instance_uuid"],
        availability_zone=r.get("availability_zone"),
        flavor=objects.Flavor(extra_specs=r.get("extra_specs") or {}),
        instance_group=group, scheduler_hints=hints,
        requested_destination=None, ignore_hosts=None, force_hosts=None,
        force_nodes=None)


def run(case):
    for opt in OPTIONS:
        if opt in case["options"]:
            CONF.set_override(opt, case["options"][opt],
                              group="filter_scheduler")
    # MetricsWeigher's [metrics] options (its multiplier is the case's
    # weight_multiplier option).
    m = case.get("metrics") or {}
    CONF.set_override("weight_setting", m.get("weight_setting") or [],
                      group="metrics")
    CONF.set_override("required", m.get("required", True), group="metrics")
    CONF.set_override("weight_of_unavailable",
                      m.get("weight_of_unavailable", -10000.0),
                      group="metrics")
    CONF.set_override("weight_multiplier",
                      case["options"].get("weight_multiplier", 1.0),
                      group="metrics")
    CONF.set_override("service_down_time", case["service_down_time"])
    timeutils.set_time_override(ts(case["now"]))
    hosts = [host_state(h) for h in case["hosts"]]
    spec = request_spec(case["request"])
    filters = [FILTERS[name]() for name in case["filters"]]
    passed = nova_filters.HostFilterHandler().get_filtered_objects(
        filters, hosts, spec, 0)
    passed = list(passed or [])
    weighers = [WEIGHERS[name]() for name in case["weighers"]]
    weighed = nova_weights.HostWeightHandler().get_weighed_objects(
        weighers, passed, spec)
    return {"passed": [h.host for h in passed],
            "weighed": [[w.obj.host, w.weight] for w in weighed]}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = run(json.loads(line))
        except Exception as e:  # report, keep serving
            out = {"error": "%s: %s\n%s" % (type(e).__name__, e,
                                             traceback.format_exc(limit=4))}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
