// Package apitest holds the checks keel's API fuzz targets share: whatever
// a request carries, the answer is never a 5xx, an error answer has the
// API's own error shape, and a refused request changes nothing.
package apitest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
)

// requestIDs differ from answer to answer; snapshots compare without them.
var requestIDs = regexp.MustCompile(`req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// Shape checks that an error body has the API's error shape.
type Shape func(body []byte) error

// Refused sends req to h and fails t when the answer is a server error,
// when an error answer (4xx) does not have the given shape, or when
// snapshot (a rendering of everything the request could change) differs
// after an error answer. It returns the recorded answer.
func Refused(t testing.TB, h http.Handler, req *http.Request, snapshot func() string, shape Shape) *httptest.ResponseRecorder {
	t.Helper()
	before := requestIDs.ReplaceAllString(snapshot(), "req-…")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	desc := fmt.Sprintf("%s %s", req.Method, req.URL.Path)
	if rec.Code >= 500 {
		t.Fatalf("%s: %d %s", desc, rec.Code, rec.Body.Bytes())
	}
	if rec.Code >= 400 {
		if err := shape(rec.Body.Bytes()); err != nil {
			t.Fatalf("%s: %d with a body not shaped as the API's errors: %v: %s", desc, rec.Code, err, rec.Body.Bytes())
		}
		if after := requestIDs.ReplaceAllString(snapshot(), "req-…"); after != before {
			t.Fatalf("%s: refused with %d but the state changed:\nbefore %s\nafter  %s", desc, rec.Code, before, after)
		}
	}
	return rec
}
