#!/usr/bin/python3
"""Unit test of nova-26-dest-update.patch, with Debian's python3.

  /usr/bin/python3 contrib/nova/test_dest_update.py [PATCHED_DIR]

PATCHED_DIR holds a patched copy of the nova package (PATCHED_DIR/nova);
without it the test copies Debian's nova package into a temporary
directory and applies the patch there. The system's files are only read.

The resource tracker runs for real (its usage and stats arithmetic, its
lock); what it would send further — the compute node's save through the
conductor, Placement's inventory — is replaced by recorders.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
PATCH = os.path.join(HERE, 'nova-26-dest-update.patch')
SYSTEM_NOVA = '/usr/lib/python3/dist-packages/nova'


def patched_copy():
    top = tempfile.mkdtemp(prefix='nova-dest-update-')
    shutil.copytree(SYSTEM_NOVA, os.path.join(top, 'nova'), ignore=shutil.ignore_patterns('tests'))
    subprocess.run(['patch', '-p1', '--batch', '--quiet', '-d', top, '-i', PATCH], check=True)
    return top


class DestUpdateTest(unittest.TestCase):
    def setUp(self):
        from nova.compute import resource_tracker, stats
        from nova import context, objects
        objects.register_all()
        self.objects = objects
        self.ctx = context.get_admin_context()
        driver = mock.Mock()
        driver.node_is_available.return_value = True
        self.rt = resource_tracker.ResourceTracker('h03', driver, reportclient=mock.Mock())
        cn = objects.ComputeNode(
            hypervisor_hostname='h03', memory_mb=131072, memory_mb_used=512,
            free_ram_mb=131072 - 512, vcpus=32, vcpus_used=0, local_gb=2000,
            local_gb_used=0, free_disk_gb=2000, running_vms=0, current_workload=0,
            numa_topology=None, stats={})
        self.saved = []
        cn.save = lambda: self.saved.append((cn.memory_mb_used, cn.vcpus_used, cn.local_gb_used,
                                             cn.running_vms))
        self.cn = cn
        self.rt.compute_nodes['h03'] = cn
        self.rt.old_resources['h03'] = objects.ComputeNode(hypervisor_hostname='h03')
        self.rt.stats['h03'] = stats.Stats()
        self.rt._update_to_placement = mock.Mock()

    def instance(self, uuid, mb=4096, vcpus=2, disk=40):
        o = self.objects
        inst = o.Instance(
            uuid=uuid, vm_state='active', task_state=None, os_type='linux', project_id='p',
            numa_topology=None, pci_requests=None, resources=None, host='h03', node='h03',
            flavor=o.Flavor(memory_mb=mb, vcpus=vcpus, root_gb=disk, ephemeral_gb=0, swap=0))
        self.rt.is_bfv[uuid] = False  # not volume-backed (skips the BDM lookup)
        return inst

    def test_landing_updates_the_row(self):
        a = '00000000-0000-0000-0000-00000000000a'
        self.rt.update_usage_after_live_migration(self.ctx, self.instance(a), 'h03')
        self.assertEqual(self.saved, [(512 + 4096, 2, 40, 1)])
        self.assertEqual(self.cn.free_ram_mb, 131072 - 512 - 4096)
        self.assertIn(a, self.rt.tracked_instances)
        self.rt._update_to_placement.assert_called_once()

        b = '00000000-0000-0000-0000-00000000000b'
        self.rt.update_usage_after_live_migration(self.ctx, self.instance(b, 8192, 4, 80), 'h03')
        self.assertEqual(self.saved[-1], (512 + 4096 + 8192, 6, 120, 2))

    def test_counted_once(self):
        a = '00000000-0000-0000-0000-00000000000a'
        inst = self.instance(a)
        self.rt.update_usage_after_live_migration(self.ctx, inst, 'h03')
        self.rt.update_usage_after_live_migration(self.ctx, inst, 'h03')
        self.assertEqual(self.cn.memory_mb_used, 512 + 4096)
        self.assertEqual(self.cn.running_vms, 1)

    def test_claimed_migration_left_alone(self):
        # A NUMA live migration claimed on the destination: its usage is
        # already on the node.
        a = '00000000-0000-0000-0000-00000000000a'
        self.rt.tracked_migrations[a] = mock.Mock()
        self.rt.update_usage_after_live_migration(self.ctx, self.instance(a), 'h03')
        self.assertEqual(self.saved, [])
        self.assertEqual(self.cn.memory_mb_used, 512)

    def test_unknown_node_ignored(self):
        self.rt.update_usage_after_live_migration(
            self.ctx, self.instance('00000000-0000-0000-0000-00000000000a'), 'elsewhere')
        self.assertEqual(self.saved, [])

    def test_manager_calls_it_after_saving_the_instance(self):
        from nova.compute import manager
        import inspect
        src = inspect.getsource(manager.ComputeManager.post_live_migration_at_destination)
        save = src.index('instance.save(expected_task_state=task_states.MIGRATING)')
        call = src.index('self.rt.update_usage_after_live_migration(context, instance,')
        self.assertLess(save, call)


if __name__ == '__main__':
    warnings.simplefilter('ignore')
    top = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith('-') else None
    cleanup = None
    if top is None:
        top = cleanup = patched_copy()
    sys.path.insert(0, os.path.abspath(top))
    import nova
    assert nova.__file__.startswith(os.path.abspath(top)), nova.__file__
    try:
        unittest.main(verbosity=2, warnings='ignore')
    finally:
        if cleanup:
            shutil.rmtree(cleanup, ignore_errors=True)
