package server_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"keel/internal/client/clienttest"
)

// TestRefusedUploadsOnKeel: on a running keel, a server create declaring
// a 1 GiB body is answered at once — 401 without a token, 413 with one —
// without waiting for the body.
func TestRefusedUploadsOnKeel(t *testing.T) {
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 1})
	base := cloud.Server.URL()
	admin := login(t, base, "admin", cloud.Password)
	host := strings.TrimPrefix(base, "http://")
	for _, c := range []struct {
		token  string
		status int
	}{{"", http.StatusUnauthorized}, {admin.token, http.StatusRequestEntityTooLarge}} {
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		conn.SetDeadline(start.Add(10 * time.Second))
		hdr := ""
		if c.token != "" {
			hdr = "X-Auth-Token: " + c.token + "\r\n"
		}
		fmt.Fprint(conn, "POST /compute/v2.1/servers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n"+hdr+"\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("token %v: no answer within %v: %v", c.token != "", time.Since(start), err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || time.Since(start) > 3*time.Second {
			t.Errorf("token %v: %d after %v, want %d at once", c.token != "", resp.StatusCode, time.Since(start), c.status)
		}
		conn.Close()
	}
}
