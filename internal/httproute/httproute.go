// Package httproute tells, before a request reaches an http.ServeMux,
// whether the mux has a route for it, so each API can answer unknown paths
// (404) and wrong methods (405, with Allow) in its own error shape instead
// of the mux's plain-text pages.
package httproute

import (
	"net/http"
	"strings"
)

var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Miss reports whether mux has no route for r. When it has none, status is
// 404 if no method has a route for the path, or 405 with the methods that
// do (for the Allow header).
func Miss(mux *http.ServeMux, r *http.Request) (miss bool, status int, allow string) {
	if _, pattern := mux.Handler(r); pattern != "" {
		return false, 0, ""
	}
	var ok []string
	for _, m := range methods {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" {
			ok = append(ok, m)
		}
	}
	if len(ok) == 0 {
		return true, http.StatusNotFound, ""
	}
	return true, http.StatusMethodNotAllowed, strings.Join(ok, ", ")
}
