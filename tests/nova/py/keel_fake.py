"""Nova's fake virt driver sized like keel's dev hosts.

Loaded by keel_nova_compute.py as nova.virt.keel_fake. 32 vCPU, 128 GiB
and 2 TB feed both get_available_resource (the compute_nodes row) and
update_provider_tree (Placement's inventory). FakeDriver reports
disk_available_least = 0, which makes the scheduler's HostState see no
free disk at all (free_disk_mb is the smaller of the two): the host
reports its whole disk instead, as an empty real host would.
"""
from nova.virt import fake


class SizedFakeDriver(fake.FakeDriver):
    vcpus = 32
    memory_mb = 131072
    local_gb = 2000

    def __init__(self, virtapi, read_only=False):
        super().__init__(virtapi, read_only)
        self.host_status_base['disk_available_least'] = self.local_gb
