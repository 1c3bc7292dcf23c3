package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"keel/internal/api/computeapi"
	"keel/internal/api/placementapi"
	"keel/internal/httproute"
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
			computeapi.WriteError(w, http.StatusRequestURITooLong, "The request line is too long (more than 8 KiB).")
			return
		}
		// A NUL byte is in no name, ID or filter keel keeps, and
		// PostgreSQL's text refuses it: 400 here, on every store.
		if strings.ContainsRune(r.URL.Path, 0) || strings.Contains(r.URL.RawQuery, "%00") || strings.ContainsRune(r.URL.RawQuery, 0) {
			errorWriterFor(r.URL.Path)(w, http.StatusBadRequest, "The request's path or query holds a NUL character.")
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &nulGuard{ReadCloser: r.Body}
		}
		next.ServeHTTP(w, r)
	})
}

// adminOnly lets only an admin's token through (after identity.Require).
func adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := identity.PrincipalFrom(r.Context()); !ok || !p.IsAdmin() {
			computeapi.WriteError(w, http.StatusForbidden, "Policy doesn't allow metrics to be performed.")
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

// errorWriterFor is the error shape of the API serving path.
func errorWriterFor(path string) identity.ErrorWriter {
	switch {
	case strings.HasPrefix(path, "/identity"):
		return identity.WriteError
	case strings.HasPrefix(path, "/placement"):
		return placementapi.WriteStatus
	}
	return computeapi.WriteError
}

// errNULInBody: a JSON body with the escape \u0000 (a NUL character in a
// string); the API's decoder turns it into its 400.
var errNULInBody = errors.New("the body holds a NUL character (\\u0000)")

// nulGuard fails the read of a body that holds the JSON escape \u0000,
// also across reads.
type nulGuard struct {
	io.ReadCloser
	tail []byte // the last bytes read, for an escape split between reads
}

func (g *nulGuard) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if n > 0 {
		buf := append(g.tail, p[:n]...)
		if bytes.Contains(buf, []byte(`\u0000`)) {
			return 0, errNULInBody
		}
		if len(buf) > 5 {
			buf = buf[len(buf)-5:]
		}
		g.tail = append(g.tail[:0], buf...)
	}
	return n, err
}

// jsonMisses answers a request no route of mux takes with 404 (or 405 and
// Allow) in the compute API's JSON shape, not Go's plain text.
func jsonMisses(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if miss, status, allow := httproute.Miss(mux, r); miss {
			if allow != "" {
				w.Header().Set("Allow", allow)
			}
			computeapi.WriteError(w, status, http.StatusText(status))
			return
		}
		mux.ServeHTTP(w, r)
	})
}
