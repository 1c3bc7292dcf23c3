package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"keel/internal/bus"
	"keel/internal/testenv"
)

// counter is a handler that counts its calls and answers with its name.
type counter struct {
	name string
	n    atomic.Int64
}

func (c *counter) handle(context.Context, json.RawMessage) (any, error) {
	c.n.Add(1)
	return echoResp{By: c.name}, nil
}

// agentConn connects as host's own identity, derived from the servers'.
func agentConn(t *testing.T, url string, servers bus.Credentials, host string) *bus.Conn {
	t.Helper()
	ac, err := bus.AgentCredentials(servers, host)
	if err != nil {
		t.Fatal(err)
	}
	return connect(t, testLog(t), url, ac, "agent-"+host)
}

// checkAgentIdentities runs the attacks of issue 12 with host A's
// identity against the bus at url (whose servers' user is servers) and
// checks that each is refused, and that what A may do still works.
func checkAgentIdentities(t *testing.T, url string, servers bus.Credentials) {
	srv := connect(t, testLog(t), url, servers, "server")
	a := agentConn(t, url, servers, "A")
	b := agentConn(t, url, servers, "B")

	// The servers serve the conductor subjects of every host; B its own.
	conductorBuildDone := &counter{name: "server"}
	conductorHeartbeat := &counter{name: "server"}
	for subj, c := range map[string]*counter{
		bus.AgentConductorSubject("*", "build_done"):        conductorBuildDone,
		bus.AgentConductorSubject("*", "service_heartbeat"): conductorHeartbeat,
	} {
		if _, err := srv.Handle(subj, "conductor", c.handle); err != nil {
			t.Fatal(err)
		}
	}
	bTerminate, bCheckIncoming := &counter{name: "B"}, &counter{name: "B"}
	if _, err := b.Handle(bus.ComputeSubject("B", "terminate_instance"), "", bTerminate.handle); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Handle(bus.ComputeSubject("B", "check_incoming"), "", bCheckIncoming.handle); err != nil {
		t.Fatal(err)
	}

	// A tries to listen where it may not: everything, B's calls, and the
	// servers' queue group.
	var sniffed atomic.Int64
	if _, err := a.Subscribe(">", func(json.RawMessage) { sniffed.Add(1) }); err != nil {
		t.Fatal(err)
	}
	aOnB := &counter{name: "A posing as B"}
	if _, err := a.Handle(bus.ComputeSubject("B", "build_and_run_instance"), "", aOnB.handle); err != nil {
		t.Fatal(err)
	}
	aConductor := &counter{name: "A posing as the conductor"}
	if _, err := a.Handle(bus.AgentConductorSubject("*", "build_done"), "conductor", aConductor.handle); err != nil {
		t.Fatal(err)
	}
	// The subscriptions are refused asynchronously: give the refusals a
	// round trip to arrive before the traffic starts.
	_ = a.Call(callCtx(t, 500*time.Millisecond), bus.AgentConductorSubject("A", "service_heartbeat"), nil, nil)

	// A publishes as B: a heartbeat and a build report under B's prefix,
	// and calls B's terminate_instance.
	if err := a.Call(callCtx(t, time.Second), bus.AgentConductorSubject("B", "service_heartbeat"), nil, nil); err == nil {
		t.Error("A's heartbeat under B's subject was answered")
	}
	if err := a.Cast(t.Context(), bus.AgentConductorSubject("B", "build_done"), nil); err != nil {
		t.Logf("cast as B: %v", err)
	}
	if err := a.Call(callCtx(t, time.Second), bus.ComputeSubject("B", "terminate_instance"), nil, nil); err == nil {
		t.Error("A's terminate_instance to B was answered")
	}

	// What A and B may do still works, and goes to the right handlers.
	var r echoResp
	if err := a.Call(callCtx(t, 5*time.Second), bus.AgentConductorSubject("A", "service_heartbeat"), nil, &r); err != nil || r.By != "server" {
		t.Fatalf("A's own heartbeat: %+v, %v", r, err)
	}
	if err := a.Call(callCtx(t, 5*time.Second), bus.ComputeSubject("B", "check_incoming"), nil, &r); err != nil || r.By != "B" {
		t.Fatalf("A's peer call check_incoming to B: %+v, %v", r, err)
	}
	for range 6 {
		if err := b.Call(callCtx(t, 5*time.Second), bus.AgentConductorSubject("B", "build_done"), nil, &r); err != nil || r.By != "server" {
			t.Fatalf("B's build report: %+v, %v (answered by A?)", r, err)
		}
	}
	if err := srv.Call(callCtx(t, time.Second), bus.ComputeSubject("B", "build_and_run_instance"), nil, &r); err == nil {
		t.Errorf("the servers' build call to B was answered by %q (B serves no build here)", r.By)
	}
	if err := srv.Call(callCtx(t, 5*time.Second), bus.ComputeSubject("B", "terminate_instance"), nil, &r); err != nil || r.By != "B" {
		t.Fatalf("the servers' terminate call to B: %+v, %v", r, err)
	}

	if n := conductorHeartbeat.n.Load(); n != 2 {
		t.Errorf("the servers got %d heartbeats, want A's own 2 (not the one A sent as B)", n)
	}
	if n := conductorBuildDone.n.Load(); n != 6 {
		t.Errorf("the servers got %d build reports, want B's 6 (not A's cast as B)", n)
	}
	if n := bTerminate.n.Load(); n != 1 {
		t.Errorf("B's terminate_instance ran %d times, want 1 (the servers', not A's)", n)
	}
	if n := aOnB.n.Load() + aConductor.n.Load(); n != 0 {
		t.Errorf("A served %d calls meant for B or the servers", n)
	}
	if n := sniffed.Load(); n != 0 {
		t.Errorf("A's subscription to > saw %d messages", n)
	}

	// Identities cannot be forged: B's user with A's password, or an
	// identity made from an agent's credentials.
	ac, _ := bus.AgentCredentials(servers, "A")
	forged := bus.Credentials{User: bus.AgentUserPrefix + "B", Password: ac.Password}
	if c, err := bus.Connect(callCtx(t, 5*time.Second), url, forged, "forger", nil); err == nil {
		c.Close()
		t.Error("connected as B with A's password")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("forged identity: %v, want an authorization error", err)
	}
	if _, err := bus.AgentCredentials(ac, "B"); err == nil {
		t.Error("A's credentials issued B's identity")
	}
}

func TestAgentIdentitiesEmbedded(t *testing.T) {
	servers := testCreds(t)
	s := startServer(t, testLog(t), servers, 0)
	checkAgentIdentities(t, s.URL(), servers)
}

// TestAgentIdentitiesExternalNATS runs the same attacks against Debian's
// nats-server, configured with AuthorizationConfig.
func TestAgentIdentitiesExternalNATS(t *testing.T) {
	servers := testCreds(t)
	auth, err := bus.AuthorizationConfig(servers, []string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	url, _, _ := externalNATS(t, func(port int) []byte { return fmt.Appendf(nil, "listen: 127.0.0.1:%d\n%s", port, auth) })
	checkAgentIdentities(t, url, servers)
}

// externalNATS starts Debian's nats-server on a free loopback port with
// the configuration conf(port) (written to the file it returns: write it
// again and send the process SIGHUP to reload), stopped at the test's end
// with its log shown if the test failed.
func externalNATS(t *testing.T, conf func(port int) []byte) (url, confPath string, proc *os.Process) {
	t.Helper()
	testenv.External(t, "nats-server (Debian's nats-server)")
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
		if _, err := os.Stat(bin); err != nil {
			t.Fatal("nats-server not found: install Debian's nats-server package")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	confPath = filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, conf(port), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", confPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("nats-server log:\n%s", b)
		}
	})
	return fmt.Sprintf("nats://127.0.0.1:%d", port), confPath, cmd.Process
}

func TestCredentialsForAgent(t *testing.T) {
	servers := testCreds(t)
	if !servers.DeriveAgents {
		t.Fatal("new servers' credentials do not derive agent identities")
	}
	got, err := servers.ForAgent("h1")
	if err != nil || got.User != "agent-h1" || got.Password == servers.Password {
		t.Fatalf("ForAgent(h1) = %v, %v", got, err)
	}
	if again, _ := servers.ForAgent("h1"); again != got {
		t.Fatal("the derived identity is not stable")
	}
	if own, err := got.ForAgent("h1"); err != nil || own != got {
		t.Fatalf("h1's identity for h1: %v, %v", own, err)
	}
	if _, err := got.ForAgent("h2"); err == nil {
		t.Fatal("h1's identity was accepted for h2")
	}
	shared := bus.Credentials{User: "keel", Password: "pw"}
	if c, err := shared.ForAgent("h1"); err != nil || c != shared {
		t.Fatalf("a shared user without derive_agent_identities: %v, %v", c, err)
	}
	path := filepath.Join(t.TempDir(), "h1.json")
	if err := bus.WriteCredentials(path, got); err != nil {
		t.Fatal(err)
	}
	read, err := bus.ReadCredentials(path)
	if err != nil || read != got {
		t.Fatalf("read back %v, %v", read, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
}
