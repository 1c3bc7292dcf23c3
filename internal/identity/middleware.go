package identity

import (
	"context"
	"net/http"
)

// ErrorWriter writes an error response with the given status and message,
// in the shape of the API being served.
type ErrorWriter func(w http.ResponseWriter, status int, msg string)

// WriteError writes Keystone's error shape: {"error": {"code": status,
// "message": msg, "title": the status text, such as "Unauthorized"}}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code": status, "message": msg, "title": http.StatusText(status),
	}})
}

// msgAuthRequired is Keystone's (and keystonemiddleware's) 401 message.
const msgAuthRequired = "The request you have made requires authentication."

// Require authenticates every request by its X-Auth-Token header. A
// missing, malformed, forged or expired token, or one whose user or project
// has gone, gets 401 written by writeErr (WriteError if nil) with the header
// WWW-Authenticate: Keystone uri="<base>/identity", so clients know where
// to log in; base is the public base URL (derived from the request if
// empty). Otherwise next runs with the Principal in the request's context
// (see PrincipalFrom).
func (i *Issuer) Require(next http.Handler, base string, writeErr ErrorWriter) http.Handler {
	if writeErr == nil {
		writeErr = WriteError
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := i.Validate(r.Header.Get("X-Auth-Token"))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Keystone uri="`+baseURL(base, r)+`/identity"`)
			writeErr(w, http.StatusUnauthorized, msgAuthRequired)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p, as Require stores it; for tests and
// for callers that authenticate some other way.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal Require stored in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// baseURL is base without a trailing slash, or, if base is empty, the
// scheme and host the request came to.
func baseURL(base string, r *http.Request) string {
	for len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	if base != "" {
		return base
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
