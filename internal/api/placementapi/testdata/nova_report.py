"""Drive a Placement with Nova 26's own report client, as nova-compute and
nova-scheduler do: a compute node's provider with inventory, a claim on
it, a reshape moving its VCPU into two NUMA children (with the claim's
allocation), then a flavor's granular request groups as Nova builds them,
its candidates, a claim of the first, and what is read back.

Run by TestNovaReportClient with Debian's Python (python3-nova):

    /usr/bin/python3 nova_report.py PLACEMENT_URL

It prints one JSON object with what the client read.
"""

import json
import sys


CN = "c2000001-0000-4000-8000-000000000000"
NUMA0 = "c2000001-0000-4000-8000-000000000010"
NUMA1 = "c2000001-0000-4000-8000-000000000011"
VM1 = "e2000000-0000-4000-8000-000000000001"
VM2 = "e2000000-0000-4000-8000-000000000002"


def inv(total):
    return {"total": total, "reserved": 0, "min_unit": 1, "max_unit": total,
            "step_size": 1, "allocation_ratio": 1.0}


def main():
    url = sys.argv[1]
    # As nova-compute and nova-scheduler run: under eventlet (the report
    # client deep-copies its provider tree, lock included).
    import eventlet
    eventlet.monkey_patch()
    from keystoneauth1 import adapter as ks_adapter
    from keystoneauth1 import session as ks_session
    import nova.conf
    from nova import context as nova_context
    from nova import objects
    from nova.scheduler.client import report
    from nova.scheduler import utils as sched_utils

    nova.conf.CONF([], project="nova", default_config_files=[])
    objects.register_all()
    def new_client():
        # (Any token: keel's test server and Placement's noauth2 take it.)
        sess = ks_session.Session(additional_headers={"X-Auth-Token": "admin"})
        ad = ks_adapter.Adapter(session=sess, service_type="placement",
                                endpoint_override=url)
        return report.SchedulerReportClient(adapter=ad)

    ctx = nova_context.get_admin_context()
    out = {}

    # nova-compute: the node's provider and inventory.
    compute = new_client()
    tree = compute.get_provider_tree_and_ensure_root(ctx, CN, name="cn1")
    tree.update_inventory("cn1", {"VCPU": inv(8), "MEMORY_MB": inv(4096)})
    compute.update_from_provider_tree(ctx, tree)

    # nova-scheduler (a process of its own): a claim on the node.
    scheduler = new_client()
    out["claim1"] = scheduler.claim_resources(
        ctx, VM1, {"allocations": {CN: {"resources": {"VCPU": 2, "MEMORY_MB": 512}}}},
        "p", "u", allocation_request_version="1.36")

    # nova-compute, restarted with a driver that reports NUMA cells: it
    # moves VCPU into NUMA children, and the claim's VCPU with it (a
    # reshape).
    client = new_client()
    tree = client.get_provider_tree_and_ensure_root(ctx, CN, name="cn1")
    tree.new_child("cn1_numa0", CN, uuid=NUMA0)
    tree.new_child("cn1_numa1", CN, uuid=NUMA1)
    tree.update_inventory("cn1", {"MEMORY_MB": inv(4096)})
    tree.update_inventory("cn1_numa0", {"VCPU": inv(4)})
    tree.update_inventory("cn1_numa1", {"VCPU": inv(4)})
    allocs = client.get_allocations_for_provider_tree(ctx, "cn1")
    vm1 = allocs[VM1]["allocations"]
    vm1[CN]["resources"].pop("VCPU")
    vm1[NUMA0] = {"resources": {"VCPU": 2}}
    client.update_from_provider_tree(ctx, tree, allocations=allocs)

    # nova-scheduler: a flavor asking for one VCPU on each of two NUMA
    # cells (isolated) and memory from the tree.
    flavor = objects.Flavor(extra_specs={
        "resources:MEMORY_MB": "256", "resources1:VCPU": "1",
        "resources2:VCPU": "1", "group_policy": "isolate"})
    rr = sched_utils.ResourceRequest()
    rr._process_extra_specs(flavor)
    rr.strip_zeros()
    out["querystring"] = rr.to_querystring()
    client = scheduler
    areqs, psums, version = client.get_allocation_candidates(ctx, rr)
    out["candidates"] = areqs
    out["summaries"] = sorted(psums)
    out["version"] = version
    out["claim2"] = client.claim_resources(ctx, VM2, areqs[0], "p", "u",
                                           allocation_request_version=version)

    out["vm1"] = client.get_allocs_for_consumer(ctx, VM1)
    out["vm2"] = client.get_allocs_for_consumer(ctx, VM2)
    out["tree"] = sorted(p["uuid"] for p in client.get_providers_in_tree(ctx, CN))
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
