package bus_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"keel/internal/bus"
	"keel/internal/testenv"
)

// agentStates is a table of hosts' identity states.
type agentStates struct {
	mu sync.Mutex
	m  map[string][2]int64 // host → {epoch, revoked (1)}
}

func (s *agentStates) set(host string, epoch int64, revoked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := int64(0)
	if revoked {
		r = 1
	}
	s.m[host] = [2]int64{epoch, r}
}

func (s *agentStates) AgentState(_ context.Context, host string) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.m[host]
	return v[0], v[1] == 1, nil
}

// dial connects with creds, without reconnecting; closed is closed when
// the server drops the connection.
func dial(url string, c bus.Credentials) (nc *nats.Conn, closed chan struct{}, err error) {
	closed = make(chan struct{})
	nc, err = nats.Connect(url, nats.UserInfo(c.User, c.Password), nats.NoReconnect(), nats.Timeout(5*time.Second),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	return nc, closed, err
}

func waitClosed(t *testing.T, what string, closed chan struct{}) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the connection was not dropped", what)
	}
}

func stillUp(t *testing.T, what string, nc *nats.Conn) {
	t.Helper()
	if err := nc.FlushTimeout(5 * time.Second); err != nil || !nc.IsConnected() {
		t.Fatalf("%s: connection lost (%v)", what, err)
	}
}

// TestAgentIdentityRotateAndRevoke: on the embedded bus, enrolling host A
// again (a new epoch) refuses A's earlier credentials and
// DisconnectAgent drops A's open connection; A's new credentials
// connect; revoking A refuses them too. Host B is untouched throughout.
func TestAgentIdentityRotateAndRevoke(t *testing.T) {
	servers := testCreds(t)
	states := &agentStates{m: map[string][2]int64{}}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerOptions{Creds: servers, Agents: states, Logger: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	a0, _ := bus.AgentCredentials(servers, "A")
	b0, _ := bus.AgentCredentials(servers, "B")
	a1, err := bus.AgentCredentialsAt(servers, "A", 1)
	if err != nil {
		t.Fatal(err)
	}
	if a1.Password == a0.Password || a1.User != a0.User {
		t.Fatalf("epoch 1 of A: %+v, epoch 0 %+v: want the same user, another password", a1, a0)
	}
	ca, aClosed, err := dial(srv.URL(), a0)
	if err != nil {
		t.Fatalf("A at epoch 0: %v", err)
	}
	defer ca.Close()
	cb, _, err := dial(srv.URL(), b0)
	if err != nil {
		t.Fatalf("B at epoch 0: %v", err)
	}
	defer cb.Close()

	states.set("A", 1, false) // keel agent enroll A
	if nc, _, err := dial(srv.URL(), a0); err == nil {
		nc.Close()
		t.Fatal("A's credentials of epoch 0 still connect after A was enrolled again")
	}
	if n := srv.DisconnectAgent("A"); n != 1 {
		t.Fatalf("DisconnectAgent(A) dropped %d connections, want 1", n)
	}
	waitClosed(t, "A's epoch-0 connection after the rotation", aClosed)
	stillUp(t, "B after A's rotation", cb)
	ca1, a1Closed, err := dial(srv.URL(), a1)
	if err != nil {
		t.Fatalf("A at epoch 1: %v", err)
	}
	defer ca1.Close()

	states.set("A", 1, true) // keel agent revoke A
	if nc, _, err := dial(srv.URL(), a1); err == nil {
		nc.Close()
		t.Fatal("A's credentials connect after A was revoked")
	}
	srv.DisconnectAgent("A")
	waitClosed(t, "A's connection after the revocation", a1Closed)
	stillUp(t, "B after A's revocation", cb)
	if nc, _, err := dial(srv.URL(), b0); err != nil {
		t.Fatalf("B reconnects after A's revocation: %v", err)
	} else {
		nc.Close()
	}
}

// TestAgentRevokedOnExternalNATS: what docs/security.md tells an operator with
// an external nats-server to do — write the authorization block again
// without the revoked host and reload nats-server (SIGHUP) — drops that
// host's open connection and refuses it from then on, and leaves the
// other host connected (Debian's nats-server).
func TestAgentRevokedOnExternalNATS(t *testing.T) {
	servers := testCreds(t)
	authAt := func(port int, hosts map[string]int64) []byte {
		t.Helper()
		auth, err := bus.AuthorizationConfigAt(servers, hosts)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Appendf(nil, "listen: 127.0.0.1:%d\n%s", port, auth)
	}
	var port int
	url, conf, proc := externalNATS(t, func(p int) []byte { port = p; return authAt(p, map[string]int64{"A": 2, "B": 0}) })
	writeConf := func(hosts map[string]int64) {
		t.Helper()
		if err := os.WriteFile(conf, authAt(port, hosts), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a2, _ := bus.AgentCredentialsAt(servers, "A", 2)
	a0, _ := bus.AgentCredentials(servers, "A")
	b0, _ := bus.AgentCredentials(servers, "B")
	var ca *nats.Conn
	var aClosed chan struct{}
	var err error
	testenv.Poll(t, "A dials at epoch 2", func() error {
		ca, aClosed, err = dial(url, a2)
		return err
	})
	defer ca.Close()
	if nc, _, err := dial(url, a0); err == nil {
		nc.Close()
		t.Fatal("A's epoch-0 credentials connect to a nats-server configured with epoch 2")
	}
	cb, _, err := dial(url, b0)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()

	writeConf(map[string]int64{"B": 0}) // keel agent revoke A --nats-conf FILE
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "A's connection after nats-server reloaded without A", aClosed)
	stillUp(t, "B after the reload", cb)
	if nc, _, err := dial(url, a2); err == nil {
		nc.Close()
		t.Fatal("A connects after nats-server reloaded without A")
	}
}
