package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"keel/internal/api/computeapi"
	"keel/internal/api/placementapi"
	"keel/internal/httproute"
	"keel/internal/identity"
)

// The HTTP server's limits. A request's headers must arrive within
// readHeaderTimeout and its whole body within readTimeout (a slow body on
// the unauthenticated login route is cut); an idle keep-alive connection
// is closed after idleTimeout, or sooner near the cap; at most maxConns
// connections are open at once, and fewer per client (connLimits), so
// idle clients cannot use up the file descriptors the bus and the store
// share, nor lock other clients out. There is no write timeout: the web
// view's event stream stays open for as long as its token is valid.
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
			g := &nulGuard{ReadCloser: r.Body}
			r.Body = g
			u := &unreadBodyCloser{ResponseWriter: w, body: g}
			next.ServeHTTP(u, r)
			if !g.end {
				// Go's server reads up to 256 KiB of what is left before
				// it closes the connection; nothing will read it, so that
				// read ends at once.
				_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			}
			return
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
// also across reads, and notes whether the body was read to its end.
type nulGuard struct {
	io.ReadCloser
	tail []byte // the last bytes read, for an escape split between reads
	end  bool   // the body was read to its end (io.EOF)
}

func (g *nulGuard) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if err == io.EOF {
		g.end = true
	}
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

// unreadBodyCloser closes the connection after a response written before
// its request's body was read to the end: a refusal (401, 403, 404, 413,
// …) answered without reading the body. Go's server would otherwise read
// up to 256 KiB of that body before answering, to keep the connection —
// waiting, for a client that declared a body and did not send it (a
// 1 GiB upload refused by its Content-Length, a request held back for
// "Expect: 100-continue"), until the read timeout. With "Connection:
// close" the answer goes at once and the connection ends after it.
type unreadBodyCloser struct {
	http.ResponseWriter
	body        *nulGuard
	wroteHeader bool
}

func (u *unreadBodyCloser) WriteHeader(code int) {
	if !u.wroteHeader {
		u.wroteHeader = true
		if !u.body.end {
			u.Header().Set("Connection", "close")
		}
	}
	u.ResponseWriter.WriteHeader(code)
}

func (u *unreadBodyCloser) Write(p []byte) (int, error) {
	if !u.wroteHeader {
		u.WriteHeader(http.StatusOK)
	}
	return u.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController the writer underneath.
func (u *unreadBodyCloser) Unwrap() http.ResponseWriter { return u.ResponseWriter }

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
