package server

import (
	"net/http"
	"net/http/pprof"
)

// pprofHandler serves Go's runtime profiles under /debug/pprof/ (the
// enable_pprof option; the caller wraps it in the admin check). Its own
// mux: importing net/http/pprof registers on http.DefaultServeMux, which
// keel never serves.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
