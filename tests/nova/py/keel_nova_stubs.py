"""Stand-ins for Glance and Neutron, enough for Nova 26 to boot and move
servers booted with networks "none".

Glance: one public, active raw image (IMAGE_ID) and the image schema
(glanceclient's own bundled one). Neutron: no extensions, so Nova skips
port binding; every list is empty. Each request is logged, one line each.

  keel_nova_stubs.py GLANCE_PORT NEUTRON_PORT
"""
import http.server
import json
import sys
import threading
import urllib.parse

from glanceclient.v2 import image_schema

IMAGE_ID = '7ee1f6a4-6b13-4d0b-9c9f-2c0b6c4e0a11'
IMAGE = {
    'id': IMAGE_ID,
    'name': 'keel-fake',
    'status': 'active',
    'visibility': 'public',
    'protected': False,
    'os_hidden': False,
    'disk_format': 'raw',
    'container_format': 'bare',
    'size': 1048576,
    'virtual_size': 1048576,
    'min_disk': 0,
    'min_ram': 0,
    'checksum': None,
    'owner': 'admin',
    'tags': [],
    'created_at': '2026-01-01T00:00:00Z',
    'updated_at': '2026-01-01T00:00:00Z',
    'file': '/v2/images/%s/file' % IMAGE_ID,
    'self': '/v2/images/%s' % IMAGE_ID,
    'schema': '/v2/schemas/image',
}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, fmt, *args):
        sys.stderr.write('%s %s\n' % (self.server.name, fmt % args))

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drain(self):
        n = int(self.headers.get('Content-Length') or 0)
        if n:
            self.rfile.read(n)

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path.rstrip('/')
        self._send(*self.server.answer(path))

    def do_POST(self):
        self._drain()
        self._send(404, {'error': 'not supported by keel\'s stub'})

    do_PUT = do_POST

    def do_DELETE(self):
        self._send(404, {'error': 'not supported by keel\'s stub'})


def glance(path):
    if path in ('', '/versions'):
        return 200, {'versions': [{'id': 'v2.9', 'status': 'CURRENT',
                                   'links': []}]}
    if path == '/v2/schemas/image':
        return 200, image_schema._BASE_SCHEMA
    if path == '/v2/images':
        return 200, {'images': [IMAGE], 'schema': '/v2/schemas/images'}
    if path == '/v2/images/' + IMAGE_ID:
        return 200, IMAGE
    return 404, {'error': 'no such image'}


def neutron(path):
    if path in ('', '/v2.0'):
        return 200, {'versions': [{'id': 'v2.0', 'status': 'CURRENT'}]}
    parts = path.split('/')
    # /v2.0/<collection>[.json]: an empty list under the collection's key.
    if len(parts) == 3 and parts[1] == 'v2.0':
        key = parts[2].removesuffix('.json')
        return 200, {key.replace('-', '_'): []}
    return 404, {'NeutronError': {'type': 'NotFound', 'message': path}}


def serve(name, port, answer):
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', port), _Handler)
    srv.name = name
    srv.answer = answer
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return t


if __name__ == '__main__':
    threads = [serve('glance', int(sys.argv[1]), glance),
               serve('neutron', int(sys.argv[2]), neutron)]
    sys.stderr.write('stubs: glance on %s, neutron on %s\n' % tuple(sys.argv[1:3]))
    sys.stderr.flush()
    for t in threads:
        t.join()
