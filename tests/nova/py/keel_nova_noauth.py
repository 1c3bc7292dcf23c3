"""noauth2 for nova-api that keeps the caller's token on the context.

Nova's NoAuthMiddleware builds a RequestContext without auth_token, and
Nova's Glance client authenticates only with the context's token, so a
boot fails with AuthorizationFailure under plain noauth2. This filter is
noauth2 plus that one field; the harness's api-paste.ini names it.
"""
import webob.dec

from nova.api.openstack import auth
from nova.api.openstack import wsgi


class NoAuthKeepToken(auth.NoAuthMiddleware):
    @webob.dec.wsgify(RequestClass=wsgi.Request)
    def __call__(self, req):
        resp = self.base_call(req, True, always_admin=False)
        ctx = req.environ.get('nova.context')
        if ctx is not None:
            ctx.auth_token = req.headers.get('X-Auth-Token')
        return resp
