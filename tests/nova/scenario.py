#!/usr/bin/python3
"""The seed's drain on a real Nova, three ways, side by side.

  scenario.py RT [--keel BIN] [--skip-keel-drain] [--patch FILE] [--work DIR]

RT is a Nova the harness brought up (tests/nova/up.sh RT), empty, with
the flavors. Runs, in this order (the table prints them as the issue
orders them):

  A  Nova's own drain: 12 servers booted on each of h01 and h02 (forced,
     as admin), both disabled; with --keel, keel sim export of that cloud
     (checked against Placement) and keel sim's prediction of the drain
     (legacy, dest-update, claim); then each server live-migrated with no host
     (os-migrateLive host null), one at a time, waiting for the migration
     to complete; right after each move the destination's os-hypervisors
     row (2.79) is compared with Placement's usage of that host.
  C  keel's drain on the same Nova (with --keel, without
     --skip-keel-drain): the same seed, then
     `keel host drain --os-cloud nova h01 h02 --wait`.
  B  Nova with the patch of contrib/nova/ (FILE) applied to a copy of the
     nova package that the restarted computes get first on PYTHONPATH.

Between runs the servers are deleted; the computes are restarted when a
row is stale (a restart refreshes every row) and for run B. Fails (exit 1)
when Nova no longer shows the bug (share to the top 3 < 0.9 or fewer
than 20 of 24 stale rows), when a patched row is stale, or when keel's
drain misses its goals (all 10 hosts used, RAM CV <= 0.06, no host over
capacity, no move refused for capacity).
"""
import argparse
import concurrent.futures
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import tomllib

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Cloud, HarnessError, Waiter, log  # noqa: E402

SOURCES = ('h01', 'h02')
PER_SOURCE = 12
FLAVORS = ('m1.small', 'm1.medium', 'm1.large')
RESERVED_MB = 512  # Nova 26's reserved_host_memory_mb: in the row, not in Placement's usage
POLL = 0.1


class Nova:
    """The scenario's view of one cloud: hosts, Placement usages."""

    def __init__(self, cloud):
        self.c = cloud
        hyp = self.c.nova('GET', '/os-hypervisors/detail')['hypervisors']
        self.rp = {h['service']['host']: h['id'] for h in hyp}  # host -> compute node = RP uuid
        self.hosts = sorted(self.rp)
        self.enabled = [h for h in self.hosts if h not in SOURCES]
        svcs = self.c.nova('GET', '/os-services?binary=nova-compute')['services']
        self.service = {s['host']: s['id'] for s in svcs}
        self.inventory = {h: self.c.placement('GET', '/resource_providers/%s/inventories' % rp)['inventories']
                          for h, rp in self.rp.items()}

    def usage(self, host):
        return self.c.placement('GET', '/resource_providers/%s/usages' % self.rp[host])['usages']

    def row(self, host):
        return self.c.nova('GET', '/os-hypervisors/%s' % self.rp[host])['hypervisor']

    def set_status(self, host, status):
        self.c.nova('PUT', '/os-services/%s' % self.service[host], {'status': status})

    def servers(self):
        return self.c.nova('GET', '/servers/detail?all_tenants=1')['servers']

    def capacity(self, host, rc):
        inv = self.inventory[host][rc]
        return (inv['total'] - inv['reserved']) * inv['allocation_ratio']


def boot_seed(nova):
    """12 servers on each source, cycling the flavors, each source's boots
    one at a time (the two sources at once)."""
    for h in SOURCES:
        nova.set_status(h, 'enabled')

    def boot_on(host):
        ids, times = [], []
        for i in range(PER_SOURCE):
            t0 = time.monotonic()
            doc = nova.c.nova('POST', '/servers', {'server': {
                'name': '%s-%02d' % (host, i + 1), 'imageRef': harness.IMAGE_ID,
                'flavorRef': FLAVORS[i % len(FLAVORS)], 'networks': 'none',
                'availability_zone': 'nova:' + host}})
            sid = doc['server']['id']

            def active(w):
                s = nova.c.nova('GET', '/servers/' + sid)['server']
                if s['status'] == 'ERROR':
                    raise HarnessError('boot of %s on %s failed: %s' % (sid, host, s.get('fault')))
                w.note = s['status']
                return s['status'] == 'ACTIVE' and s['OS-EXT-SRV-ATTR:host'] == host

            Waiter('server %s-%02d ACTIVE' % (host, i + 1), 180).until(_strict(active), POLL)
            times.append(time.monotonic() - t0)
            ids.append(sid)
        return ids, times

    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        results = list(ex.map(boot_on, SOURCES))
    order = [sid for ids, _ in results for sid in ids]
    boot_times = [t for _, ts in results for t in ts]
    for h in SOURCES:
        u = nova.usage(h)
        if (u['VCPU'], u['MEMORY_MB']) != (28, 57344):
            raise HarnessError('%s holds VCPU %s MEMORY_MB %s in Placement after the seed, want 28 and 57344'
                               % (h, u['VCPU'], u['MEMORY_MB']))
        nova.set_status(h, 'disabled')
    return order, boot_times


def _strict(check):
    """A check whose HarnessError is final (the Waiter retries other errors)."""
    def wrapped(w):
        try:
            return check(w)
        except HarnessError as e:
            raise _Final(e)
    return wrapped


class _Final(Exception):
    pass


def migration_of(nova, sid):
    migs = nova.c.nova('GET', '/os-migrations?instance_uuid=%s&migration_type=live-migration' % sid)['migrations']
    return max(migs, key=lambda m: m['id']) if migs else None


def staleness(nova, host):
    """(stale?, what the row says, what Placement says) for HOST right now."""
    row, u = nova.row(host), nova.usage(host)
    fresh = row['memory_mb_used'] == u['MEMORY_MB'] + RESERVED_MB and row['vcpus_used'] == u['VCPU']
    return (not fresh, 'row %d MB %d vCPU %d VMs' % (row['memory_mb_used'], row['vcpus_used'], row['running_vms']),
            'placement %d MB %d vCPU' % (u['MEMORY_MB'] + RESERVED_MB, u['VCPU']))


def nova_drain(nova, order, label):
    """Nova's own drain: os-migrateLive host null, one at a time."""
    moves = []
    for n, sid in enumerate(order, 1):
        src = nova.c.nova('GET', '/servers/' + sid)['server']['OS-EXT-SRV-ATTR:host']
        before = migration_of(nova, sid)
        t0 = time.monotonic()
        nova.c.nova('POST', '/servers/%s/action' % sid,
                    {'os-migrateLive': {'host': None, 'block_migration': 'auto'}})
        state = {}

        def landed(w):
            s = nova.c.nova('GET', '/servers/' + sid)['server']
            if s['status'] == 'ERROR':
                raise HarnessError('%s went to ERROR during its live migration: %s' % (sid, s.get('fault')))
            host = s['OS-EXT-SRV-ATTR:host']
            if s['OS-EXT-STS:task_state'] is not None or host == src:
                m = migration_of(nova, sid)
                if m and (not before or m['id'] != before['id']) and m['status'] in ('error', 'failed'):
                    raise HarnessError('live migration of %s failed: %s' % (sid, m['status']))
                w.note = 'task_state %s on %s' % (s['OS-EXT-STS:task_state'], host)
                return False
            m = migration_of(nova, sid)
            w.note = 'migration %s' % (m and m['status'])
            if not m or (before and m['id'] == before['id']) or m['status'] != 'completed':
                return False
            state['dest'] = host
            return True

        Waiter('%s move %d (%s)' % (label, n, sid), 300).until(_strict(landed), POLL)
        wall = time.monotonic() - t0
        stale, row, truth = staleness(nova, state['dest'])
        moves.append({'server': sid, 'source': src, 'dest': state['dest'], 'seconds': wall,
                      'stale': stale, 'row': row, 'placement': truth})
        log('%s move %2d/%d %s %s -> %s %.2f s, dest row %s (%s, %s)'
            % (label, n, len(order), sid[:8], src, state['dest'], wall,
               'STALE' if stale else 'fresh', row, truth))
    return moves


def figures(nova, moves):
    """The table's figures from the moves and Placement's usages now."""
    dest = {}
    for m in moves:
        dest[m['dest']] = dest.get(m['dest'], 0) + 1
    top3 = sum(sorted(dest.values(), reverse=True)[:3])
    ram = [nova.usage(h)['MEMORY_MB'] for h in nova.enabled]
    mean = statistics.fmean(ram)
    over = [h for h in nova.hosts for rc, used in nova.usage(h).items()
            if rc in nova.inventory[h] and used > nova.capacity(h, rc)]
    secs = [m['seconds'] for m in moves if m.get('seconds') is not None]
    return {
        'moves': len(moves),
        'destinations': dict(sorted(dest.items())),
        'share_top3': top3 / len(moves) if moves else 0.0,
        'cv': statistics.pstdev(ram) / mean if mean else 0.0,
        'hosts': len(dest),
        'stale': sum(1 for m in moves if m.get('stale')),
        'median_s': statistics.median(secs) if secs else None,
        'overcap': len(over),
        'ram_mb': dict(zip(nova.enabled, ram)),
    }


def reset(nova, rt, label):
    """Deletes every server and waits until Placement holds nothing; then
    restarts the computes when a row disagrees with Placement."""
    for s in nova.servers():
        nova.c.nova('DELETE', '/servers/' + s['id'], ok=(204, 404))

    def empty(w):
        left = len(nova.servers())
        used = sum(nova.usage(h).get('MEMORY_MB', 0) for h in nova.hosts)
        w.note = '%d servers, %d MB in Placement' % (left, used)
        return left == 0 and used == 0

    Waiter('servers deleted after %s' % label, 300).until(empty, 0.2)
    stale = [h for h in nova.hosts if staleness(nova, h)[0]]
    for h in SOURCES:
        nova.set_status(h, 'enabled')
    return stale


def patched_copy(rt, patch):
    """A copy of Debian's nova package under RT with PATCH applied; returns
    the directory to put first on PYTHONPATH. The system's files are only
    read."""
    import nova as system_nova
    src = os.path.dirname(system_nova.__file__)
    top = os.path.join(rt, 'nova-patched')
    dst = os.path.join(top, 'nova')
    shutil.rmtree(top, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns('tests'), symlinks=True)
    p = subprocess.run(['patch', '-p1', '--forward', '--batch', '-d', top, '-i', os.path.abspath(patch)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise HarnessError('the patch %s does not apply to Nova %s: %s%s' % (patch, src, p.stdout, p.stderr))
    # Compile once here rather than in 12 computes at once.
    subprocess.run([harness.PYTHON, '-m', 'compileall', '-q', dst], check=True)
    log('patched copy of %s in %s (%s)' % (src, dst, p.stdout.strip().replace('\n', '; ')))
    return top


# ---------------------------------------------------------------- keel

def run_keel(keel, args, env, what, capture=True):
    t0 = time.monotonic()
    p = subprocess.run([keel] + args, env=env, capture_output=True, text=True)
    for line in p.stderr.splitlines():
        log(line if line.startswith(what) else '%s: %s' % (what, line))
    if p.returncode != 0:
        raise HarnessError('%s exited %d: %s' % (' '.join(['keel'] + args), p.returncode,
                                                 (p.stdout[-2000:] + p.stderr[-2000:]).strip()))
    return p.stdout, time.monotonic() - t0


def check_export(nova, text):
    """The export's per-host usage (its instances' flavors summed) must be
    Placement's, for every host."""
    doc = tomllib.loads(text)
    flavors = {f['name']: f for f in doc.get('flavor', [])}
    used = {}
    for inst in doc.get('instance', []):
        f = flavors[inst['flavor']]
        u = used.setdefault(inst['host'], {'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0})
        u['VCPU'] += f['vcpus']
        u['MEMORY_MB'] += f['ram']
        u['DISK_GB'] += f.get('disk', 0)
    hosts = {h['name'] for h in doc.get('hosts', []) if 'name' in h}
    bad = []
    for h in nova.hosts:
        want = {rc: v for rc, v in nova.usage(h).items() if rc in ('VCPU', 'MEMORY_MB', 'DISK_GB')}
        got = used.get(h, {'VCPU': 0, 'MEMORY_MB': 0, 'DISK_GB': 0})
        if h not in hosts or any(got.get(rc, 0) != v for rc, v in want.items()):
            bad.append('%s: export %s, Placement %s%s' % (h, got, want, '' if h in hosts else ' (host missing)'))
    if bad:
        raise HarnessError('keel sim export disagrees with Placement: ' + '; '.join(bad))
    return len(doc.get('instance', []))


def keel_env(rt):
    """The environment keel runs in: ours plus RT/env (OS_CLIENT_CONFIG_FILE, NOVA_CONF)."""
    env = dict(os.environ)
    with open(os.path.join(rt, 'env')) as f:
        for line in f:
            k, _, v = line.strip().partition('=')
            if k:
                env[k] = v
    return env


def keel_predict(nova, keel, rt, work):
    """keel sim export of the seeded cloud, checked against Placement, and
    keel sim's prediction of the drain under legacy, dest-update and claim."""
    env = keel_env(rt)
    cloud_toml = os.path.join(work, 'cloud.toml')
    out, took = run_keel(keel, ['sim', 'export', '--os-cloud', 'nova', '--nova-conf', env['NOVA_CONF']],
                         env, 'keel sim export')
    with open(cloud_toml, 'w') as f:
        f.write(out)
    n = check_export(nova, out)
    log('keel sim export: %d instances, per-host usage equals Placement\'s (%.1f s)' % (n, took))
    out, _ = run_keel(keel, ['sim', cloud_toml, '--drain', ','.join(SOURCES), '--policy', 'legacy,dest-update,claim',
                             '--format', 'json'], env, 'keel sim')
    pred = {}
    for p in json.loads(out)['policies']:
        d = p['destinations']
        total = sum(d.values())
        pred[p['policy']] = {'share_top3': sum(sorted(d.values(), reverse=True)[:3]) / total if total else 0.0,
                             'cv': p['final']['ram_cv'], 'hosts': len(d), 'destinations': d}
    for name, f in pred.items():
        log('keel sim prediction %-11s share_top3=%.2f cv=%.2f hosts=%d %s'
            % (name, f['share_top3'], f['cv'], f['hosts'], f['destinations']))
    return pred


def keel_drain(keel, rt, work):
    """keel host drain --os-cloud nova h01 h02 --wait: (its output lines, wall seconds)."""
    data_dir = os.path.join(work, 'keel-data')
    t0 = time.monotonic()
    p = subprocess.Popen([keel, 'host', 'drain', '--os-cloud', 'nova', '--data-dir', data_dir,
                          *SOURCES, '--wait'], env=keel_env(rt), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line.rstrip('\n'))
        log('keel host drain: ' + line.rstrip('\n'))
    rc = p.wait()
    wall = time.monotonic() - t0
    if rc != 0:
        raise HarnessError('keel host drain exited %d' % rc)
    return lines, wall


def parse_keel_moves(lines, order):
    """Per-move seconds and keel's refusal count, when keel printed them
    (keel host drain's lines); None when it printed none."""
    secs = {}
    refused = None
    for line in lines:
        m = re.search(r'\bmove (\S+) (\S+) ?-> ?(\S+) ([0-9.]+)\s*s\b', line)
        if m:
            secs[m.group(1)] = float(m.group(4))
        m = re.search(r'refused_capacity=(\d+)', line)
        if m:
            refused = int(m.group(1))
    return secs, refused


def keel_moves(nova, order, secs):
    moves = []
    for sid in order:
        s = nova.c.nova('GET', '/servers/' + sid)['server']
        m = migration_of(nova, sid)
        sec = secs.get(sid, secs.get(s['name']))
        moves.append({'server': sid, 'source': m and m['source_compute'], 'dest': s['OS-EXT-SRV-ATTR:host'],
                      'seconds': sec, 'status': m and m['status']})
    return moves


# ---------------------------------------------------------------- main

def cv_floor(base, sizes, hosts):
    """The lowest RAM CV any placement of instances of these sizes (MB) can
    reach on hosts already using base (MB each): every host's usage moves in
    steps of the sizes' greatest common divisor, so the most even result
    spreads the total in whole steps, as evenly as the hosts' starting
    usages allow (water-filling). The seed's 8 + 8 + 8 instances of 2, 4
    and 8 GiB on 10 empty hosts cannot do better than 6 hosts at 12 GiB and
    4 at 10 GiB: CV 0.0875, above the issue's 0.06, which is the
    simulator's figure for keel's own seed cloud."""
    g = 0
    for s in sizes:
        g = math.gcd(g, s)
    if not g or not hosts:
        return 0.0
    steps = sum(sizes) // g
    load = [b / g for b in base[:hosts]] + [0.0] * (hosts - len(base))
    for _ in range(steps):
        i = min(range(hosts), key=lambda k: load[k])
        load[i] += 1
    mean = statistics.fmean(load)
    return statistics.pstdev(load) / mean if mean else 0.0


def fmt(v, spec):
    return '-' if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('rt')
    ap.add_argument('--keel', help="keel's binary: keel sim export and keel sim's prediction, and run C")
    ap.add_argument('--skip-keel-drain', action='store_true',
                    help="no run C (keel host drain); the export and prediction still run with --keel")
    ap.add_argument('--patch', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                                                    'contrib', 'nova', 'nova-26-dest-update.patch'))
    ap.add_argument('--work', help='where keel keeps cloud.toml and its data (default RT/keel)')
    a = ap.parse_args()
    rt = os.path.abspath(a.rt)
    work = a.work or os.path.join(rt, 'keel')
    os.makedirs(work, exist_ok=True)
    run_c = bool(a.keel) and not a.skip_keel_drain
    t_start = time.monotonic()
    results, errors, prediction = {}, [], None
    try:
        patched = patched_copy(rt, a.patch)
        nova = Nova(Cloud.of(rt))
        if len(nova.hosts) != 12:
            raise HarnessError('the scenario wants 12 hosts, the cloud has %d' % len(nova.hosts))

        # A: Nova's own drain.
        order, boots = boot_seed(nova)
        log('A: seed booted (boot median %.2f s); h01 h02 disabled' % statistics.median(boots))
        if a.keel:
            prediction = keel_predict(nova, a.keel, rt, work)
        results['nova'] = figures(nova, nova_drain(nova, order, 'A nova'))
        stale = reset(nova, rt, 'A')
        if stale:
            log('rows stale after A\'s reset on %s: restarting the computes' % ' '.join(stale))
            harness.restart_computes(rt)

        # C: keel's drain through Nova's API, on the same (unpatched) Nova.
        if run_c:
            order, _ = boot_seed(nova)
            log('C: seed booted; h01 h02 disabled')
            base = [nova.usage(h)['MEMORY_MB'] for h in nova.enabled]
            sizes = [nova.c.nova('GET', '/servers/' + sid)['server']['flavor']['ram'] for sid in order]
            lines, wall = keel_drain(a.keel, rt, work)
            secs, refused = parse_keel_moves(lines, order)
            f = figures(nova, keel_moves(nova, order, secs))
            f['refused'] = refused if refused is not None else sum(
                1 for sid in order if (migration_of(nova, sid) or {}).get('status') in ('error', 'failed'))
            f['wall_s'] = wall
            f['cv_floor'] = cv_floor(base, sizes, len(nova.enabled))
            log('C: the most even RAM split these instances allow on the enabled hosts: CV %.3f' % f['cv_floor'])
            results['keel'] = f
            left = [s['name'] for s in nova.servers() if s['OS-EXT-SRV-ATTR:host'] in SOURCES]
            if left:
                errors.append('keel host drain left %s on h01/h02' % ' '.join(left))
            reset(nova, rt, 'C')

        # B: the patched destination update.
        harness.restart_computes(rt, pythonpath=patched)
        order, _ = boot_seed(nova)
        log('B: seed booted on patched computes; h01 h02 disabled')
        results['nova+patch'] = figures(nova, nova_drain(nova, order, 'B nova+patch'))
    except (HarnessError, _Final) as e:
        errors.append(str(e))

    # The verdict.
    A, B, C = results.get('nova'), results.get('nova+patch'), results.get('keel')
    if prediction:
        legacy, claim = prediction.get('legacy'), prediction.get('claim')
        if not legacy or legacy['share_top3'] < 0.9:
            errors.append('keel sim\'s legacy prediction does not show the pile-up: %s' % legacy)
        if not claim or claim['hosts'] < 8:
            errors.append('keel sim\'s claim prediction does not spread: %s' % claim)
    if A:
        if A['share_top3'] < 0.9:
            errors.append('Nova no longer piles the drain onto 3 hosts (share_top3 %.2f < 0.9)' % A['share_top3'])
        if A['stale'] < 20:
            errors.append('Nova\'s destination rows were stale after only %d of 24 moves (< 20)' % A['stale'])
    if B and B['stale'] > 0:
        errors.append('with the patch %d destination rows were still stale right after their move' % B['stale'])
    if C:
        if C['hosts'] != 10:
            errors.append('keel used %d of the 10 enabled hosts' % C['hosts'])
        goal = max(0.06, C['cv_floor'] + 0.005)
        if C['cv'] > goal:
            errors.append('keel\'s RAM CV %.3f > %.3f (the issue\'s 0.06, or this drain\'s floor %.3f + 0.005)'
                          % (C['cv'], goal, C['cv_floor']))
        if C['overcap']:
            errors.append('%d hosts over capacity after keel\'s drain' % C['overcap'])
        if C['refused']:
            errors.append('%d moves refused for capacity in keel\'s drain' % C['refused'])

    print()
    print('%-15s %10s %8s %7s %6s %9s %8s  %s' % ('run', 'share_top3', 'ram_cv', 'stale', 'hosts',
                                                 'median_s', 'overcap', 'destinations'))
    for name in ('nova', 'nova+patch', 'keel'):
        f = results.get(name)
        if not f:
            print('%-15s %s' % (name, 'not run' if name != 'keel' or not run_c else 'failed'))
            continue
        print('%-15s %10.2f %8.3f %7s %6d %9s %8d  %s' % (
            name, f['share_top3'], f['cv'], '%d/%d' % (f['stale'], f['moves']) if name != 'keel' else '-',
            f['hosts'], fmt(f['median_s'], '.2f'), f['overcap'],
            ' '.join('%s=%d' % kv for kv in f['destinations'].items())))
    if prediction:
        for name, p in prediction.items():
            print('%-15s %10.2f %8.3f %7s %6d %9s %8s  %s' % ('sim ' + name, p['share_top3'], p['cv'], '-',
                                                             p['hosts'], '-', '-',
                                                             ' '.join('%s=%d' % kv for kv in sorted(p['destinations'].items()))))
    print('(RAM CV over the 10 enabled hosts from Placement; stale = destination rows (os-hypervisors 2.79) '
          'that disagreed with Placement right after their move; %.0f s in all)' % (time.monotonic() - t_start))
    parts = []
    if A:
        parts.append('nova share_top3=%.2f cv=%.2f stale=%d/%d' % (A['share_top3'], A['cv'], A['stale'], A['moves']))
    if B:
        parts.append('nova+patch share_top3=%.2f cv=%.2f stale=%d/%d' % (B['share_top3'], B['cv'], B['stale'], B['moves']))
    if C:
        parts.append('keel share_top3=%.2f cv=%.2f hosts=%d overcap=%d refused=%d'
                     % (C['share_top3'], C['cv'], C['hosts'], C['overcap'], C['refused']))
    elif not run_c:
        parts.append('keel drain not run')
    print(' | '.join(parts))
    with open(os.path.join(rt, 'results.json'), 'w') as f:
        json.dump({'results': results, 'errors': errors}, f, indent=1, default=str)
    for e in errors:
        print('FAIL: ' + e)
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
