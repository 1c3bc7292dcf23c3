"""Runs openstackclient commands without paying its start-up each time.

`openstack` spends one to two seconds (far more on a loaded machine)
importing openstackclient, its command plugins and their API clients
before it sends a request; tests/openstackclient.sh runs it some 300
times. This server imports all of that once, then forks a child per
command: the child is a fresh copy of a warmed-up `openstack` process
that runs the command with the caller's arguments, environment, working
directory and standard streams, and reports its exit status. Every
command still runs the real client, in a process of its own.

    oscd.py serve SOCKET     listen on the Unix socket SOCKET (created
                             atomically: it exists once it accepts)
    oscd.py run SOCKET ARG…  run `openstack ARG…` through that server;
                             its output is the command's, its exit
                             status the command's

Run both with /usr/bin/python3 (the interpreter /usr/bin/openstack uses);
`run` imports nothing heavy, so it starts in a few milliseconds.
"""

import json
import os
import socket
import struct
import sys

# The request: a 4-byte big-endian length, then that many bytes of JSON
# (argv, env, cwd); the caller's stdin, stdout and stderr ride along with
# the first bytes (SCM_RIGHTS). The answer: the exit status, 4 bytes.
_LEN = struct.Struct("!I")
_RC = struct.Struct("!i")


def run(path, argv):
    """Sends one command to the server at path; returns its exit status."""
    body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    msg = _LEN.pack(len(body)) + body
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
        except OSError as err:
            print(f"oscd: no openstackclient server at {path}: {err}", file=sys.stderr)
            return 255
        sent = socket.send_fds(s, [msg], [0, 1, 2])
        s.sendall(msg[sent:])
        answer = _recv_exact(s, _RC.size)
    if answer is None:
        print("oscd: the openstackclient server closed the connection without an exit status", file=sys.stderr)
        return 255
    return _RC.unpack(answer)[0]


def _recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _warm():
    """Imports what commands load lazily: every command plugin openstack
    lists, and the API client modules behind them."""
    import importlib
    import importlib.metadata

    from openstackclient import shell  # noqa: F401  (the entry point itself)

    eps = importlib.metadata.entry_points()
    prefixes = ("openstack.", "cliff.", "keystoneauth1.", "openstack.cli")
    for group in sorted(g for g in eps.groups if g.startswith(prefixes)):
        for ep in eps.select(group=group):
            try:
                ep.load()
            except Exception:  # a plugin that does not load fails in the child as in openstack
                pass
    for mod in (
        "dogpile.cache.backends.null",
        "keystoneclient.v3.client",
        "netrc",
        "novaclient.client",
        "novaclient.v2.client",
        "openstack.compute.v2._proxy",
        "openstack.connection",
        "openstack.identity.v3._proxy",
        "openstack.image.v2._proxy",
        "openstackclient.api.compute_v2",
        "osc_lib.api.api",
        "osc_placement.http",
        "shlex",
    ):
        try:
            importlib.import_module(mod)
        except Exception:
            pass
    # cliff maps every installed module to its distribution (for a
    # command's help epilog) on each command's first parser: some 300
    # distributions' metadata read, half a command's time. Once here.
    from cliff import command

    command._get_distributions_by_modules()


def _child(conn):
    """Runs one command in this forked process and answers its status."""
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    head, fds, _, _ = socket.recv_fds(conn, _LEN.size, 3)
    if len(head) < _LEN.size:
        rest = _recv_exact(conn, _LEN.size - len(head))
        head += rest or b""
    (n,) = _LEN.unpack(head)
    body = _recv_exact(conn, n)
    if body is None or len(fds) != 3:
        os._exit(1)
    req = json.loads(body)
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    # Streams as a new process would open them on these descriptors.
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
    sys.argv = ["openstack"] + req["argv"]
    rc = 1
    try:
        from openstackclient import shell

        rc = shell.main(req["argv"])
    except SystemExit as e:
        if e.code is None:
            rc = 0
        elif isinstance(e.code, int):
            rc = e.code
        else:
            print(e.code, file=sys.stderr)
            rc = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        rc = 1
    try:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    try:
        conn.sendall(_RC.pack(rc if isinstance(rc, int) else 1))
    finally:
        os._exit(0)


def serve(path):
    """Warms up, then forks a child per connection, forever."""
    import signal

    _warm()
    tmp = f"{path}.{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(tmp)
    srv.listen(64)
    os.rename(tmp, path)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            try:
                srv.close()
                _child(conn)
            finally:
                os._exit(1)  # never back into this loop
        conn.close()


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], sys.argv[3:]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
