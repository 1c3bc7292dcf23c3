#!/usr/bin/python3
"""A real OpenStack Nova 26 and Placement 8 on 127.0.0.1, from Debian's
packages, for keel's tests.

  harness.py up RT [--computes N]   bring it up under the runtime dir RT,
                                    leave it running, write RT/env and
                                    RT/clouds.yaml (cloud "nova")
  harness.py down RT [--wipe]       stop every process it started (by
                                    PID), then remove RT with --wipe
  harness.py restart-computes RT [--pythonpath DIR]
                                    restart the nova-compute processes,
                                    with DIR first on their PYTHONPATH

What runs: MariaDB, epmd and RabbitMQ (a node name of its own), stubs for
Glance and Neutron, Placement under gunicorn, nova-conductor,
nova-scheduler, nova-api (noauth2) and N nova-compute processes (h01…)
on Nova's fake driver sized 32 vCPU / 128 GiB / 2 TB. Every port is
chosen free at run time and bound on 127.0.0.1; every file (databases,
logs, configuration, caches, locks, HOME) is under RT. Each process is
the leader of its own process group; RT/pids lists them in start order
and down stops them group by group, computes first.

Only Debian's python3 standard library and the packages named in
tests/packages.txt are used. The facts this rests on (the pitfalls and
their fixes) are in the comments where they apply.
"""
import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.join(HERE, 'py')
PYTHON = '/usr/bin/python3'
TOKEN = 'admin'  # noauth2: user "admin" is admin in Nova and in Placement
COMPUTE_MICROVERSION = '2.79'  # 2.88+ drops the usage fields of os-hypervisors
PLACEMENT_MICROVERSION = '1.39'
IMAGE_ID = '7ee1f6a4-6b13-4d0b-9c9f-2c0b6c4e0a11'  # keel_nova_stubs.IMAGE_ID
# Stop order: computes first (after RabbitMQ is gone they retry AMQP for
# ~20 s), the database last.
STOP_ORDER = ['nova-compute', 'nova-api', 'nova-scheduler', 'nova-conductor',
              'placement', 'stubs', 'rabbitmq', 'epmd', 'mariadb']


def log(msg):
    print('nova harness: ' + msg, file=sys.stderr, flush=True)


class HarnessError(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- processes

class Runtime:
    """The runtime dir RT: paths, recorded PIDs, ports."""

    def __init__(self, rt):
        self.rt = os.path.abspath(rt)

    def path(self, *p):
        return os.path.join(self.rt, *p)

    def env(self, pythonpath=None):
        e = {
            'PATH': '/usr/sbin:/usr/bin:/sbin:/bin',
            'HOME': self.path('home'),
            'XDG_CACHE_HOME': self.path('cache'),
            'XDG_CONFIG_HOME': self.path('home', '.config'),
            'XDG_DATA_HOME': self.path('home', '.local', 'share'),
            'TMPDIR': self.path('tmp'),
            'LANG': 'C.UTF-8',
            'PYTHONPATH': ':'.join(p for p in (pythonpath, PYDIR) if p),
            # No bytecode written next to tests/nova/py (the system's and
            # the patched copy's are compiled already).
            'PYTHONDONTWRITEBYTECODE': '1',
        }
        return e

    def pids(self):
        """[(name, pid)] in start order."""
        try:
            with open(self.path('pids')) as f:
                return [(n, int(p)) for n, p in (l.split() for l in f if l.strip())]
        except FileNotFoundError:
            return []

    def record(self, name, pid):
        with open(self.path('pids'), 'a') as f:
            f.write('%s %d\n' % (name, pid))

    def forget(self, pids):
        keep = [(n, p) for n, p in self.pids() if p not in pids]
        with open(self.path('pids'), 'w') as f:
            f.writelines('%s %d\n' % np for np in keep)

    def ports(self):
        with open(self.path('ports.json')) as f:
            return json.load(f)

    def start(self, name, argv, env=None, logname=None, kind=None):
        """Starts argv as the leader of a new session, output to
        RT/log/LOGNAME.log, and records it under KIND (default NAME)."""
        logf = open(self.path('log', (logname or name) + '.log'), 'ab')
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                             stderr=subprocess.STDOUT, env=env or self.env(),
                             cwd=self.rt, start_new_session=True)
        logf.close()
        self.record(kind or name, p.pid)
        return p


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except FileNotFoundError:
        return False


def group_alive(pgid):
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % d) as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != 'Z' and int(fields[2]) == pgid:
            return True
    return False


def stop_groups(entries, timeout=30):
    """SIGTERM to each recorded process group, then SIGKILL to what is
    still there after TIMEOUT seconds. Each recorded PID is the leader of
    its own group (start_new_session), so the group is its children."""
    for _, pid in entries:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    left = list(entries)
    while left and time.monotonic() < deadline:
        for e in list(left):
            try:
                os.waitpid(e[1], os.WNOHANG)
            except ChildProcessError:
                pass
            if not group_alive(e[1]):
                left.remove(e)
        if left:
            time.sleep(0.1)
    for name, pid in left:
        log('%s (pid %d) still running after %d s: SIGKILL' % (name, pid, timeout))
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def down(rt, wipe=False):
    R = Runtime(rt)
    entries = R.pids()
    for kind in STOP_ORDER + sorted({n for n, _ in entries} - set(STOP_ORDER)):
        group = [(n, p) for n, p in entries if n == kind]
        if group:
            stop_groups(group)
            R.forget({p for _, p in group})
    if wipe:
        shutil.rmtree(R.rt, ignore_errors=True)
    log('stopped %d processes%s' % (len(entries), ' and removed ' + R.rt if wipe else ''))


# ---------------------------------------------------------------- waiting

class Waiter:
    """Polls CHECK until it returns a true value, printing a progress line
    (what it waits for, elapsed time, CHECK's last note) every 10 s.
    Fails after TIMEOUT, or at once when a process it depends on died."""

    def __init__(self, what, timeout, procs=()):
        self.what, self.timeout, self.procs = what, timeout, procs

    def until(self, check, interval=0.2):
        t0 = time.monotonic()
        last = t0
        self.note = ''
        while True:
            try:
                v = check(self)
            except Exception as e:  # the thing is not up yet
                v = None
                self.note = '%s: %s' % (type(e).__name__, str(e)[:160])
            if v:
                return v
            for name, p in self.procs:
                if p.poll() is not None:
                    raise HarnessError('%s exited with %s while waiting for %s (see its log)'
                                       % (name, p.returncode, self.what))
            now = time.monotonic()
            if now - t0 > self.timeout:
                raise HarnessError('%s not ready after %d s (%s)' % (self.what, self.timeout, self.note))
            if now - last >= 10:
                log('waiting for %s: %d s%s' % (self.what, now - t0,
                                                 ' (' + self.note + ')' if self.note else ''))
                last = now
            time.sleep(interval)


def http_json(method, url, body=None, headers=None, timeout=30):
    """(status, parsed body or None, response headers)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header('X-Auth-Token', TOKEN)
    req.add_header('Accept', 'application/json')
    if data is not None:
        req.add_header('Content-Type', 'application/json')
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status, hdrs = r.status, r.headers
    except urllib.error.HTTPError as e:
        raw, status, hdrs = e.read(), e.code, e.headers
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = {'raw': raw.decode(errors='replace')}
    return status, doc, hdrs


class Cloud:
    """Nova's and Placement's APIs, noauth2, admin."""

    def __init__(self, nova_url, placement_url):
        self.nova_url, self.placement_url = nova_url, placement_url

    def nova(self, method, path, body=None, ok=(200, 201, 202, 204), mv=COMPUTE_MICROVERSION):
        status, doc, _ = http_json(method, self.nova_url + path, body,
                                   {'OpenStack-API-Version': 'compute ' + mv})
        if status not in ok:
            raise HarnessError('%s %s: %s %s' % (method, path, status, json.dumps(doc)[:400]))
        return doc

    def placement(self, method, path, body=None, ok=(200, 201, 204)):
        status, doc, _ = http_json(method, self.placement_url + path, body,
                                   {'OpenStack-API-Version': 'placement ' + PLACEMENT_MICROVERSION})
        if status not in ok:
            raise HarnessError('%s %s: %s %s' % (method, path, status, json.dumps(doc)[:400]))
        return doc

    @classmethod
    def of(cls, rt):
        ports = Runtime(rt).ports()
        return cls('http://127.0.0.1:%d/v2.1' % ports['nova'],
                   'http://127.0.0.1:%d' % ports['placement'])


def amqp_ready(port):
    """True once RabbitMQ answers the AMQP 0-9-1 header with a method
    frame (Connection.Start): it has booted, not only opened the port."""
    with socket.create_connection(('127.0.0.1', port), timeout=2) as s:
        s.sendall(b'AMQP\x00\x00\x09\x01')
        s.settimeout(5)
        head = s.recv(7)
        return len(head) == 7 and head[0] == 1


# ---------------------------------------------------------------- config

def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def hostname(i):
    return 'h%02d' % i


def write_configs(R, ports, computes):
    db = 'mysql+pymysql://nova:nova@127.0.0.1:%d/%%s?charset=utf8' % ports['mariadb']
    placement_url = 'http://127.0.0.1:%d' % ports['placement']
    write(R.path('etc', 'placement', 'placement.conf'), f"""[DEFAULT]
debug = false
[api]
auth_strategy = noauth2
[placement_database]
connection = {db % 'placement'}
""")
    # Nova 26's api-paste, cut to the compute API, with keel's noauth2
    # filter (keel_nova_noauth: the context keeps the token Glance needs).
    write(R.path('etc', 'nova', 'api-paste.ini'), """[composite:osapi_compute]
use = call:nova.api.openstack.urlmap:urlmap_factory
/: versions
/v2.1: versions_v21
/v2.1/+: compute_v21
[composite:compute_v21]
use = call:nova.api.auth:pipeline_factory_v21
noauth2 = compute_req_id faultwrap request_log sizelimit noauth2 compute_app_v21
[filter:request_log]
paste.filter_factory = nova.api.openstack.requestlog:RequestLog.factory
[filter:compute_req_id]
paste.filter_factory = nova.api.compute_req_id:ComputeReqIdMiddleware.factory
[filter:faultwrap]
paste.filter_factory = nova.api.openstack:FaultWrapper.factory
[filter:noauth2]
paste.filter_factory = keel_nova_noauth:NoAuthKeepToken.factory
[filter:sizelimit]
paste.filter_factory = oslo_middleware:RequestBodySizeLimiter.factory
[app:compute_app_v21]
paste.app_factory = nova.api.openstack.compute:APIRouterV21.factory
[pipeline:versions]
pipeline = faultwrap versionapp
[pipeline:versions_v21]
pipeline = compute_req_id faultwrap versionapp_v21
[app:versionapp]
paste.app_factory = nova.api.openstack.compute.versions:Versions.factory
[app:versionapp_v21]
paste.app_factory = nova.api.openstack.compute.versions:VersionsV2.factory
""")
    # Shared by every Nova process. Everything not named here is at Nova
    # 26's defaults (filters, weighers, allocation ratios 16/1.5/1.0,
    # reserved_host_memory_mb 512).
    write(R.path('etc', 'nova', 'nova.conf'), f"""[DEFAULT]
debug = false
my_ip = 127.0.0.1
state_path = {R.path('state')}
instances_path = {R.path('state', 'instances')}
transport_url = rabbit://guest:guest@127.0.0.1:{ports['rabbitmq']}/
enabled_apis = osapi_compute
osapi_compute_listen = 127.0.0.1
osapi_compute_listen_port = {ports['nova']}
osapi_compute_workers = 1
compute_driver = keel_fake.SizedFakeDriver
# The seed: a destination's compute_nodes row is refreshed only by this
# periodic audit (or a restart), an hour apart.
update_resources_interval = 3600
[api]
auth_strategy = noauth2
[wsgi]
api_paste_config = {R.path('etc', 'nova', 'api-paste.ini')}
[conductor]
workers = 1
[scheduler]
workers = 1
# The harness maps new computes itself (nova-manage cell_v2 discover_hosts).
discover_hosts_in_cells_interval = -1
[filter_scheduler]
host_subset_size = 3
[quota]
instances = -1
cores = -1
ram = -1
[oslo_messaging_notifications]
driver = noop
[oslo_concurrency]
lock_path = {R.path('lock')}
[vnc]
enabled = false
[placement]
auth_type = admin_token
endpoint = {placement_url}
token = {TOKEN}
[glance]
# Deprecated, but the one way to a Glance without a catalog.
api_servers = http://127.0.0.1:{ports['glance']}
[neutron]
# The context's token has no catalog: the endpoint is given.
endpoint_override = http://127.0.0.1:{ports['neutron']}
auth_type = admin_token
endpoint = http://127.0.0.1:{ports['neutron']}
token = {TOKEN}
""")
    # The database connections only for api, conductor, scheduler and
    # nova-manage: a nova-compute that sees [api_database] tries to read
    # every cell's minimum version and logs "No DB access allowed".
    write(R.path('etc', 'nova', 'nova-db.conf'), f"""[api_database]
connection = {db % 'nova_api'}
[database]
connection = {db % 'nova'}
""")
    for i in range(1, computes + 1):
        write(R.path('etc', 'nova', 'compute', hostname(i) + '.conf'),
              '[DEFAULT]\nhost = %s\n' % hostname(i))


def write_env(R, ports, computes):
    nova_url = 'http://127.0.0.1:%d/v2.1' % ports['nova']
    placement_url = 'http://127.0.0.1:%d' % ports['placement']
    lines = {
        'NOVA_RT': R.rt,
        'NOVA_URL': nova_url,
        'PLACEMENT_URL': placement_url,
        'NOVA_TOKEN': TOKEN,
        'PLACEMENT_TOKEN': TOKEN,
        'NOVA_CONF': R.path('etc', 'nova', 'nova.conf'),
        'NOVA_DB_CONF': R.path('etc', 'nova', 'nova-db.conf'),
        'NOVA_COMPUTES': str(computes),
        'NOVA_IMAGE_ID': IMAGE_ID,
        'MARIADB_SOCKET': R.path('mysql.sock'),
        'OS_CLIENT_CONFIG_FILE': R.path('clouds.yaml'),
    }
    write(R.path('env'), ''.join('%s=%s\n' % kv for kv in lines.items()))
    write(R.path('clouds.yaml'), f"""clouds:
  nova:
    auth_type: admin_token
    auth:
      token: {TOKEN}
      endpoint: {nova_url}
    compute_endpoint_override: {nova_url}
    placement_endpoint_override: {placement_url}
    region_name: RegionOne
  # openstackclient's placement plugin (osc-placement) ignores
  # placement_endpoint_override and sends admin_token requests to
  # auth.endpoint: `openstack --os-cloud nova-placement resource provider
  # list` (or --os-cloud nova --os-endpoint PLACEMENT_URL).
  nova-placement:
    auth_type: admin_token
    auth:
      token: {TOKEN}
      endpoint: {placement_url}
    region_name: RegionOne
""")
    return lines


# ---------------------------------------------------------------- bring-up

def run(R, what, argv, env=None, timeout=600):
    """Runs a setup command to completion, its output in RT/log/setup.log."""
    t0 = time.monotonic()
    with open(R.path('log', 'setup.log'), 'ab') as logf:
        logf.write(('\n$ %s\n' % ' '.join(argv)).encode())
        logf.flush()
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                           env=env or R.env(), cwd=R.rt, timeout=timeout)
    if p.returncode != 0:
        raise HarnessError('%s failed (exit %d): see %s' % (what, p.returncode, R.path('log', 'setup.log')))
    return time.monotonic() - t0


def background_run(R, name, argv, env=None):
    """Starts a setup command, output in RT/log/NAME.log; wait() on it."""
    path = R.path('log', name + '.log')
    with open(path, 'wb') as logf:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                             env=env or R.env(), cwd=R.rt)
    p.logpath = path
    return p


def sql(R, statements):
    run(R, 'mariadb', ['/usr/bin/mariadb', '--no-defaults', '-S', R.path('mysql.sock'),
                       '-u', 'root', '-e', statements])


def nova_manage(R, *args):
    return ['/usr/bin/nova-manage', '--config-file', R.path('etc', 'nova', 'nova.conf'),
            '--config-file', R.path('etc', 'nova', 'nova-db.conf')] + list(args)


def nova_service_argv(R, binary, debug=False):
    argv = ['/usr/bin/' + binary, '--config-file', R.path('etc', 'nova', 'nova.conf'),
            '--config-file', R.path('etc', 'nova', 'nova-db.conf'),
            '--log-file', R.path('log', binary + '.log')]
    return argv + (['--debug'] if debug else [])


def start_computes(R, computes, pythonpath=None):
    procs = []
    for i in range(1, computes + 1):
        h = hostname(i)
        argv = [PYTHON, os.path.join(PYDIR, 'keel_nova_compute.py'),
                '--config-file', R.path('etc', 'nova', 'nova.conf'),
                '--config-file', R.path('etc', 'nova', 'compute', h + '.conf'),
                '--log-file', R.path('log', 'nova-compute-%s.log' % h)]
        procs.append(('nova-compute ' + h, R.start('nova-compute', argv, env=R.env(pythonpath),
                                                   logname='nova-compute-%s.out' % h)))
    return procs


def wait_computes(R, cloud, computes, procs, t0, timeout):
    """Waits until COMPUTES compute nodes are up in os-hypervisors, maps
    them to cell1, and waits until each has its inventory in Placement."""
    want = {hostname(i) for i in range(1, computes + 1)}

    def services(w):
        doc = cloud.nova('GET', '/os-services?binary=nova-compute')
        up = {s['host'] for s in doc['services'] if s['state'] == 'up'}
        w.note = '%d of %d nova-compute services up' % (len(up & want), len(want))
        return want <= up

    Waiter('%d nova-compute services' % computes, timeout, procs).until(services, 1.0)
    log('%d nova-compute services up at %.0f s' % (computes, time.monotonic() - t0))

    # os-hypervisors lists only hosts mapped to a cell, and discover_hosts
    # maps only hosts that have written their compute node record.
    def hypervisors(w):
        run(R, 'nova-manage cell_v2 discover_hosts', nova_manage(R, 'cell_v2', 'discover_hosts'))
        doc = cloud.nova('GET', '/os-hypervisors/detail')
        up = {h['service']['host'] for h in doc['hypervisors'] if h['state'] == 'up'}
        w.note = '%d of %d hypervisors mapped' % (len(up & want), len(want))
        return want <= up

    Waiter('%d hypervisors mapped to cell1' % computes, timeout, procs).until(hypervisors, 1.0)
    log('%d hypervisors mapped at %.0f s' % (computes, time.monotonic() - t0))

    def inventories(w):
        rps = cloud.placement('GET', '/resource_providers')['resource_providers']
        named = {rp['name']: rp['uuid'] for rp in rps}
        ready = 0
        for h in want & set(named):
            inv = cloud.placement('GET', '/resource_providers/%s/inventories' % named[h])['inventories']
            ready += {'VCPU', 'MEMORY_MB', 'DISK_GB'} <= set(inv)
        w.note = '%d of %d providers with inventory' % (ready, len(want))
        return ready == len(want)

    Waiter('Placement inventories', timeout, procs).until(inventories, 0.5)


def up(rt, computes=12, timeout=600):
    """Brings everything up; on failure stops what it started."""
    R = Runtime(rt)
    if R.pids():
        raise HarnessError('%s already has processes recorded (%s/pids): run down first' % (R.rt, R.rt))
    for d in ('log', 'home', 'cache', 'tmp', 'lock', 'state', 'etc', 'rabbitmq'):
        os.makedirs(R.path(d), exist_ok=True)
    ports = {k: free_port() for k in ('mariadb', 'rabbitmq', 'rabbitmq_dist', 'epmd', 'placement',
                                      'nova', 'glance', 'neutron')}
    write(R.path('ports.json'), json.dumps(ports, indent=1))
    write_configs(R, ports, computes)
    t0 = time.monotonic()
    try:
        return _up(R, ports, computes, timeout, t0)
    except BaseException:
        log('bring-up failed after %.0f s; stopping what started (logs in %s)'
            % (time.monotonic() - t0, R.path('log')))
        down(R.rt)
        raise


def _up(R, ports, computes, timeout, t0):
    env = R.env()
    # MariaDB: its own datadir, socket and port.
    run(R, 'mariadb-install-db', ['/usr/bin/mariadb-install-db', '--no-defaults',
                                  '--datadir=' + R.path('mysql'), '--user=root',
                                  '--auth-root-authentication-method=socket',
                                  '--skip-test-db'])
    mariadb = R.start('mariadb', ['/usr/sbin/mariadbd', '--no-defaults', '--user=root',
                                  '--datadir=' + R.path('mysql'), '--socket=' + R.path('mysql.sock'),
                                  '--pid-file=' + R.path('mysql.pid'),
                                  '--bind-address=127.0.0.1', '--port=%d' % ports['mariadb'],
                                  '--skip-name-resolve', '--skip-log-bin', '--max-connections=1000',
                                  '--innodb-buffer-pool-size=128M',
                                  '--innodb-flush-log-at-trx-commit=0',
                                  # A throw-away database: no fsync.
                                  '--innodb-flush-method=nosync', '--innodb-doublewrite=0',
                                  '--tmpdir=' + R.path('tmp')])
    # RabbitMQ: epmd started first on a port of its own (RabbitMQ then
    # uses it instead of daemonizing one we would have to hunt for).
    rabbit_env = dict(env,
                      ERL_EPMD_PORT=str(ports['epmd']), ERL_EPMD_ADDRESS='127.0.0.1',
                      RABBITMQ_NODENAME='keelnova-%s@localhost' % secrets.token_hex(4),
                      RABBITMQ_NODE_IP_ADDRESS='127.0.0.1',
                      RABBITMQ_NODE_PORT=str(ports['rabbitmq']),
                      RABBITMQ_DIST_PORT=str(ports['rabbitmq_dist']),
                      RABBITMQ_CONF_ENV_FILE=R.path('rabbitmq', 'rabbitmq-env.conf'),
                      RABBITMQ_CONFIG_FILE=R.path('rabbitmq', 'rabbitmq.conf'),
                      RABBITMQ_ADVANCED_CONFIG_FILE=R.path('rabbitmq', 'advanced.config'),
                      RABBITMQ_ENABLED_PLUGINS_FILE=R.path('rabbitmq', 'enabled_plugins'),
                      RABBITMQ_MNESIA_BASE=R.path('rabbitmq', 'mnesia'),
                      RABBITMQ_LOG_BASE=R.path('log', 'rabbitmq'),
                      RABBITMQ_PID_FILE=R.path('rabbitmq', 'rabbitmq.pid'),
                      # Erlang distribution on loopback too (it binds every
                      # address otherwise); epmd is on ERL_EPMD_ADDRESS.
                      RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}')
    write(R.path('rabbitmq', 'rabbitmq-env.conf'), '')
    write(R.path('rabbitmq', 'rabbitmq.conf'), 'listeners.tcp.default = 127.0.0.1:%d\n' % ports['rabbitmq'])
    write(R.path('rabbitmq', 'advanced.config'), '[].\n')
    write(R.path('rabbitmq', 'enabled_plugins'), '[].\n')
    epmd = R.start('epmd', ['/usr/bin/epmd', '-port', str(ports['epmd']), '-address', '127.0.0.1'],
                   env=rabbit_env)
    rabbit = R.start('rabbitmq', ['/usr/lib/rabbitmq/bin/rabbitmq-server'], env=rabbit_env)
    stubs = R.start('stubs', [PYTHON, os.path.join(PYDIR, 'keel_nova_stubs.py'),
                              str(ports['glance']), str(ports['neutron'])])
    log('mariadb, rabbitmq, stubs started; RT=%s' % R.rt)

    Waiter('MariaDB', timeout, [('mariadb', mariadb)]).until(
        lambda w: subprocess.run(['/usr/bin/mariadb', '--no-defaults', '-S', R.path('mysql.sock'),
                                  '-u', 'root', '-e', 'select 1'], capture_output=True).returncode == 0)
    log('MariaDB up at %.0f s' % (time.monotonic() - t0))
    sql(R, ''.join("CREATE DATABASE %s CHARACTER SET utf8;" % d
                   for d in ('nova_api', 'nova', 'nova_cell0', 'placement')) +
        "CREATE USER 'nova'@'127.0.0.1' IDENTIFIED BY 'nova';"
        "GRANT ALL PRIVILEGES ON *.* TO 'nova'@'127.0.0.1';")

    # Schemas, four at once (each nova-manage spends most of its time
    # importing Nova): Placement's, cell1's and cell0's in the background
    # (cell0 through a config file naming its database), the API
    # database and then the cell mappings in the foreground.
    pl_env = dict(env, OS_PLACEMENT_CONFIG_DIR=R.path('etc', 'placement'))
    cell0 = 'mysql+pymysql://nova:nova@127.0.0.1:%d/nova_cell0?charset=utf8' % ports['mariadb']
    write(R.path('etc', 'nova', 'cell0-db.conf'), '[database]\nconnection = %s\n' % cell0)
    background = [
        ('placement-manage db sync', background_run(R, 'placement-db-sync', [
            '/usr/bin/placement-manage', '--config-file', R.path('etc', 'placement', 'placement.conf'),
            'db', 'sync'], pl_env)),
        ('nova-manage db sync (cell1)', background_run(R, 'nova-db-sync-cell1', nova_manage(
            R, 'db', 'sync', '--local_cell'))),
        ('nova-manage db sync (cell0)', background_run(R, 'nova-db-sync-cell0', nova_manage(
            R, '--config-file', R.path('etc', 'nova', 'cell0-db.conf'), 'db', 'sync', '--local_cell'))),
    ]
    run(R, 'nova-manage api_db sync', nova_manage(R, 'api_db', 'sync'))
    Waiter('RabbitMQ', timeout, [('rabbitmq', rabbit), ('epmd', epmd)]).until(
        lambda w: amqp_ready(ports['rabbitmq']))
    log('RabbitMQ up at %.0f s' % (time.monotonic() - t0))
    # The computes import Nova (the slow part) while the cells are made;
    # they wait for nova-conductor before they touch Placement.
    procs = start_computes(R, computes)
    run(R, 'nova-manage cell_v2 map_cell0',
        nova_manage(R, 'cell_v2', 'map_cell0', '--database_connection', cell0))
    run(R, 'nova-manage cell_v2 create_cell', nova_manage(R, 'cell_v2', 'create_cell', '--name', 'cell1'))
    for what, p in background:
        if p.wait() != 0:
            raise HarnessError('%s failed (exit %d): see %s' % (what, p.returncode, p.logpath))
    log('schemas synced at %.0f s' % (time.monotonic() - t0))
    placement = R.start('placement', ['/usr/bin/gunicorn', '-w', '2', '-b', '127.0.0.1:%d' % ports['placement'],
                                      '--pythonpath', PYDIR, '--access-logfile', '-',
                                      'keel_nova_placement:application'], env=pl_env)
    cloud = Cloud.of(R.rt)
    Waiter('Placement', timeout, [('placement', placement)]).until(
        lambda w: http_json('GET', cloud.placement_url + '/')[0] == 200)
    log('Placement up at %.0f s' % (time.monotonic() - t0))
    services = [(b, R.start(b, nova_service_argv(R, b, debug=(b == 'nova-scheduler')),
                            logname=b + '.out'))
                for b in ('nova-conductor', 'nova-scheduler', 'nova-api')]
    procs = services + procs + [('placement', placement), ('rabbitmq', rabbit), ('mariadb', mariadb),
                                ('stubs', stubs)]
    Waiter('nova-api', timeout, procs).until(
        lambda w: http_json('GET', cloud.nova_url + '/')[0] == 200)
    log('nova-api up at %.0f s' % (time.monotonic() - t0))

    def services_up(w):
        doc = cloud.nova('GET', '/os-services')
        st = {s['binary']: s['state'] for s in doc['services'] if s['binary'] != 'nova-compute'}
        w.note = ' '.join('%s=%s' % kv for kv in sorted(st.items()))
        return st.get('nova-conductor') == 'up' and st.get('nova-scheduler') == 'up'

    Waiter('nova-conductor and nova-scheduler', timeout, procs).until(services_up, 0.5)
    wait_computes(R, cloud, computes, procs, t0, timeout)
    for name, ram, vcpus, disk in (('m1.small', 2048, 1, 20), ('m1.medium', 4096, 2, 40),
                                   ('m1.large', 8192, 4, 80)):
        cloud.nova('POST', '/flavors', {'flavor': {'name': name, 'ram': ram, 'vcpus': vcpus,
                                                   'disk': disk, 'id': name}})
    lines = write_env(R, ports, computes)
    took = time.monotonic() - t0
    write(R.path('bringup_seconds'), '%.1f\n' % took)
    log('up in %.0f s: %d computes, Nova at %s, Placement at %s (env: %s)'
        % (took, computes, lines['NOVA_URL'], lines['PLACEMENT_URL'], R.path('env')))
    return took


def restart_computes(rt, pythonpath=None, timeout=600):
    """Stops every nova-compute and starts them again (PYTHONPATH first
    PYTHONPATH); waits until all are up and their rows were refreshed
    (a compute's start-up runs update_available_resource)."""
    R = Runtime(rt)
    old = [(n, p) for n, p in R.pids() if n == 'nova-compute']
    t0 = time.monotonic()
    stop_groups(old)
    R.forget({p for _, p in old})
    cloud = Cloud.of(rt)
    # A stopped service stays "up" in os-services for service_down_time:
    # wait for a report made after the restart instead.
    start_stamp = time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(time.time() - 1))
    procs = start_computes(R, len(old), pythonpath)

    def restarted(w):
        doc = cloud.nova('GET', '/os-services?binary=nova-compute')
        fresh = [s for s in doc['services'] if s['state'] == 'up' and (s['updated_at'] or '') >= start_stamp]
        w.note = '%d of %d computes reported since the restart' % (len(fresh), len(old))
        return len(fresh) == len(old)

    Waiter('%d restarted nova-computes' % len(old), timeout, procs).until(restarted, 1.0)
    log('%d computes restarted in %.0f s%s' % (len(old), time.monotonic() - t0,
                                                ' (PYTHONPATH %s first)' % pythonpath if pythonpath else ''))
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    u = sub.add_parser('up')
    u.add_argument('rt')
    u.add_argument('--computes', type=int, default=12)
    u.add_argument('--timeout', type=int, default=600, help='seconds to wait for each step')
    d = sub.add_parser('down')
    d.add_argument('rt')
    d.add_argument('--wipe', action='store_true', help='also remove RT')
    r = sub.add_parser('restart-computes')
    r.add_argument('rt')
    r.add_argument('--pythonpath')
    a = ap.parse_args()
    # A TERM (a caller's timeout) unwinds like Ctrl-C, so a failed
    # bring-up still stops what it started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if a.cmd == 'up':
            up(a.rt, a.computes, a.timeout)
            with open(Runtime(a.rt).path('env')) as f:
                sys.stdout.write(f.read())
        elif a.cmd == 'down':
            down(a.rt, a.wipe)
        else:
            restart_computes(a.rt, a.pythonpath)
    except HarnessError as e:
        log('error: %s' % e)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
