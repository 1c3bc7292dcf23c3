package placementapi_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"keel/internal/api/placementapi"
	"keel/internal/store/memory"
)

// TestTreeCandidatesOverHTTP checks how the nested case's answer (2,000
// candidates, over a megabyte) crosses a real loopback connection: its
// length announced ahead (no chunked transfer), not compressed, and the
// bytes that arrive are the ones the handler writes when called
// directly.
func TestTreeCandidatesOverHTTP(t *testing.T) {
	st := memory.New()
	_, req, _ := treeBench(t, st)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %.300s", resp.StatusCode, got)
	}
	if resp.ContentLength != int64(len(got)) || len(resp.TransferEncoding) != 0 {
		t.Errorf("Content-Length %d, transfer encoding %v for %d bytes: want the length announced, not chunked",
			resp.ContentLength, resp.TransferEncoding, len(got))
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("Content-Encoding %q, want none", ce)
	}
	if len(got) < 1<<20 {
		t.Errorf("answer %d bytes, want the nested case's megabyte", len(got))
	}
	h := placementapi.New(st, func(*http.Request) bool { return true })
	direct := httptest.NewRecorder()
	r := httptest.NewRequest("GET", req.URL.String(), nil)
	r.Header = req.Header.Clone()
	h.ServeHTTP(direct, r)
	if !bytes.Equal(direct.Body.Bytes(), got) {
		t.Errorf("the answer over HTTP (%d bytes) differs from the handler's (%d bytes)", len(got), direct.Body.Len())
	}
	if cl := direct.Header().Get("Content-Length"); cl != strconv.Itoa(direct.Body.Len()) {
		t.Errorf("the handler's Content-Length %q, want %d", cl, direct.Body.Len())
	}
}
