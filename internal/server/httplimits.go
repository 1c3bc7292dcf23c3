package server

import (
	"net"
	"net/http"
	"sync"
	"time"

	"keel/internal/api/compute"
	"keel/internal/identity"
)

// The HTTP server's limits. A request's headers must arrive within
// readHeaderTimeout and its whole body within readTimeout (a slow body on
// the unauthenticated login route is cut); an idle keep-alive connection
// is closed after idleTimeout; at most maxConns connections are open at
// once (the rest wait in the kernel's backlog), so idle clients cannot
// use up the file descriptors the bus and the store share. There is no
// write timeout: the web view's event stream stays open for as long as
// its token is valid.
var (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 60 * time.Second
	idleTimeout       = 90 * time.Second
)

const (
	maxHeaderBytes = 32 << 10
	maxRequestURI  = 8 << 10 // Nova answers 414 past 8 KiB
	maxConns       = 1024
)

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// limitRequest answers 414 for a request line longer than maxRequestURI
// before anything parses its query (a 900 KB ?name= regex cost 0.6 s of
// CPU).
func limitRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.RequestURI) > maxRequestURI {
			compute.WriteError(w, http.StatusRequestURITooLong, "The request line is too long (more than 8 KiB).")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminOnly lets only an admin's token through (after identity.Require).
func adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := identity.PrincipalFrom(r.Context()); !ok || !p.IsAdmin() {
			compute.WriteError(w, http.StatusForbidden, "Policy doesn't allow metrics to be performed.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitListener accepts at most n connections at once.
func limitListener(ln net.Listener, n int) net.Listener {
	return &capListener{Listener: ln, slots: make(chan struct{}, n)}
}

type capListener struct {
	net.Listener
	slots chan struct{}
}

func (l *capListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &capConn{Conn: c, release: func() { <-l.slots }}, nil
}

type capConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
