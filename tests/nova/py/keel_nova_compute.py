"""Runs Nova 26's nova-compute with keel's sized fake virt driver.

Nova 26 loads its virt driver as 'nova.virt.' + [DEFAULT] compute_driver,
so a driver kept outside the nova package cannot be named directly. This
wrapper maps exactly one module name, nova.virt.keel_fake, to the file
keel_fake.py next to it, then hands over to nova-compute's own main (the
same entry point as /usr/bin/nova-compute). The harness sets
compute_driver = keel_fake.SizedFakeDriver.
"""
import importlib.abc
import importlib.util
import os
import sys

DRIVER_MODULE = 'nova.virt.keel_fake'
DRIVER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'keel_fake.py')


class _DriverFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != DRIVER_MODULE:
            return None
        return importlib.util.spec_from_file_location(name, DRIVER_FILE)


if __name__ == '__main__':
    sys.meta_path.insert(0, _DriverFinder())
    # nova.cmd monkey-patches eventlet on import: it must come first.
    from nova.cmd import compute
    sys.exit(compute.main())
