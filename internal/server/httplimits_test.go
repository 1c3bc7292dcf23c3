package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serveLimited runs newHTTPServer over serveConns (a total of conns, no
// per-client bound) on loopback with short timeouts; the handler reads
// the whole body.
func serveLimited(t *testing.T, conns int, timeout time.Duration) string {
	t.Helper()
	oldRead, oldIdle := readTimeout, idleTimeout
	readTimeout, idleTimeout = timeout, timeout
	t.Cleanup(func() { readTimeout, idleTimeout = oldRead, oldIdle })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(limitRequest(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		fmt.Fprint(w, "ok")
	})))
	go serveConns(srv, ln, connLimits{Total: conns, PerClient: conns + 1, FewConns: conns + 1}) // the total alone
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestSlowBodyAndIdleConnectionsAreCut: a body that trickles in is cut at
// the read timeout, an idle keep-alive connection is closed, and a
// request line past 8 KiB gets 414.
func TestSlowBodyAndIdleConnectionsAreCut(t *testing.T) {
	addr := serveLimited(t, 16, 300*time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "POST /identity/v3/auth/tokens HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for time.Since(start) < 3*time.Second { // keep trickling
		if _, err := c.Write([]byte(" ")); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if el := time.Since(start); el >= 3*time.Second {
		t.Fatalf("a trickling body was not cut within %v", el)
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprint(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: %v, want closed by the server (EOF)", err)
	}

	resp, err := http.Get("http://" + addr + "/compute/v2.1/servers?name=" + strings.Repeat("a", 9000))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestURITooLong {
		t.Fatalf("9 KB request line: %d, want 414", resp.StatusCode)
	}
}

// TestConnectionCap: with the cap reached, a new connection is not served
// until one closes.
func TestConnectionCap(t *testing.T) {
	addr := serveLimited(t, 2, 10*time.Second)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n") // holds its slot
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond)
	cl := &http.Client{Timeout: 150 * time.Millisecond}
	if _, err := cl.Get("http://" + addr + "/"); err == nil {
		t.Fatal("a third connection was served with the cap at 2")
	}
	held[0].Close()
	cl.Timeout = 5 * time.Second
	resp, err := cl.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("after a slot freed: %v", err)
	}
	resp.Body.Close()
}

// TestNULIsRefused: a NUL in a path, a query or a JSON string is 400 in
// the API's own shape, before any store sees it; the same body without it
// is served.
func TestNULIsRefused(t *testing.T) {
	srv := httptest.NewServer(limitRequest(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil && r.Method == "POST" {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, "ok")
	})))
	defer srv.Close()
	for _, c := range []struct {
		method, path, body string
		status             int
		shape              string
	}{
		{"GET", "/compute/v2.1/servers/%00", "", 400, `"badRequest"`},
		{"GET", "/compute/v2.1/servers?name=a%00b", "", 400, `"badRequest"`},
		{"GET", "/placement/resource_providers/%00", "", 400, `"errors"`},
		{"POST", "/compute/v2.1/servers", `{"server": {"name": "a\u0000b"}}`, 400, ""},
		{"POST", "/compute/v2.1/servers", `{"server": {"name": "` + strings.Repeat("x", 70000) + `\u0000"}}`, 400, ""},
		{"POST", "/compute/v2.1/servers", `{"server": {"name": "ab"}}`, 200, "ok"},
		{"GET", "/compute/v2.1/servers?name=ab", "", 200, "ok"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.shape) {
			t.Errorf("%s %s: %d %s, want %d with %s", c.method, c.path, resp.StatusCode, b, c.status, c.shape)
		}
	}
}

// TestMissesAreJSON: a path no route takes is 404, and a method a path does
// not take is 405 with Allow, both in JSON.
func TestMissesAreJSON(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /keel/v1/audit", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	srv := httptest.NewServer(jsonMisses(mux))
	defer srv.Close()
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/keel/v1/nope", 404, ""},
		{"POST", "/keel/v1/audit", 405, "GET, HEAD"},
		{"GET", "/keel/v1/audit", 200, ""},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.status != 200 && !json.Valid(b)) || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %q Allow %q, want %d (JSON) Allow %q", c.method, c.path, resp.StatusCode, b, resp.Header.Get("Allow"), c.status, c.allow)
		}
	}
}
