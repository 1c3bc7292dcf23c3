// Package requestid gives every HTTP response the request id OpenStack
// services send ("x-openstack-request-id: req-<uuid>"), once: the outermost
// handler assigns it, and inner handlers (the compute and identity APIs,
// which also run on their own in tests) reuse it, so the id a client sees
// is the one keel logged.
package requestid

import (
	"net/http"

	"github.com/google/uuid"
)

// Header is the response header that carries the id.
const Header = "X-Openstack-Request-Id"

// Ensure returns the response's request id, assigning a new one if none
// has been set yet.
func Ensure(w http.ResponseWriter) string {
	if id := w.Header().Get(Header); id != "" {
		return id
	}
	id := "req-" + uuid.NewString()
	w.Header().Set(Header, id)
	return id
}
