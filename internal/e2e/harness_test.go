package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"keel/internal/testenv"
)

var keelBin string

// keelProcesses is what every test here needs: the fast loop (-short)
// leaves them out, and does not build the binary.
const keelProcesses = "keel server and agent processes (the binary built from this tree)"

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // every test skips, saying why (testenv.External)
	}
	dir, err := os.MkdirTemp("", "keel-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	keelBin = filepath.Join(dir, "keel")
	build := exec.Command("go", "build", "-o", keelBin, "keel/cmd/keel")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building keel:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a keel process the test started; its output goes to a log file
// shown when the test fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startIn(t, name, nil, args...)
}

// startIn is start with the keel binary run through a prefix command
// (`ip netns exec NS`, which execs it in place: the process is keel's).
func startIn(t *testing.T, name string, prefix []string, args ...string) *proc {
	t.Helper()
	testenv.External(t, keelProcesses)
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append(append([]string{}, prefix...), keelBin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			t.Logf("--- last lines of %s (%s):\n%s", name, keepLog(t, name, p.cmd.Process.Pid, data), strings.Join(lines[max(0, len(lines)-25):], "\n"))
		}
	})
	return p
}

// keepLog copies a failed test's process log into its artifact directory
// (kept under go test -artifacts; a flake under load is read from the
// whole log, not its last lines) and says where.
func keepLog(t *testing.T, name string, pid int, data []byte) string {
	path := filepath.Join(t.ArtifactDir(), fmt.Sprintf("%s-%d.log", name, pid))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Sprintf("its whole log not kept: %v", err)
	}
	return "whole log: " + path + ", kept with go test -artifacts"
}

// mustRun fails the test at once if the process has exited (a wait for
// what it should do would only time out).
func (p *proc) mustRun(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		data, _ := os.ReadFile(p.log)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		t.Fatalf("%s exited (%v); its last lines:\n%s", p.name, p.cmd.ProcessState, strings.Join(lines[max(0, len(lines)-25):], "\n"))
	default:
	}
}

// linesWith is the lines of p's log that hold s (an instance's UUID).
func (p *proc) linesWith(s string) string {
	data, _ := os.ReadFile(p.log)
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// interrupt sends SIGINT (Ctrl-C) and waits for the process to exit.
func (p *proc) interrupt(t *testing.T, timeout time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s of SIGINT", p.name, timeout)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// cloud is a keel server and its agents, as separate processes.
type cloud struct {
	t        *testing.T
	dataDir  string
	httpPort int
	natsPort int
	url      string
	sets     []string
	server   *proc
	agents   map[string]*proc
	token    string
	mu       sync.Mutex
	// busHost is the address the server's bus listens on and agents dial
	// (127.0.0.1, or the host side of a network namespace's veth pair:
	// see netns_test.go); netns runs a host's agent in that namespace.
	busHost string
	netns   map[string]*netns
}

// newCloud starts a server on ports it picks itself (port 0), so parallel
// tests never race for a port; a restart reuses the same ports (agents
// reconnect to the bus URL they were given).
func newCloud(t *testing.T, sets ...string) *cloud {
	return newCloudOn(t, "127.0.0.1", nil, sets...)
}

// newCloudOn is newCloud with the bus on busHost and the agents of the
// hosts netns names run in those namespaces (netns_test.go).
func newCloudOn(t *testing.T, busHost string, netns map[string]*netns, sets ...string) *cloud {
	c := &cloud{t: t, dataDir: t.TempDir(), sets: sets, agents: map[string]*proc{}, busHost: busHost, netns: netns}
	c.startServer()
	return c
}

// readEndpoints waits for the server's DATA_DIR/endpoints.json and takes
// its ports.
func (c *cloud) readEndpoints() {
	c.t.Helper()
	path := filepath.Join(c.dataDir, "endpoints.json")
	var ep struct{ API, Bus string }
	c.waitFor("endpoints.json", 30*time.Second, func() bool {
		data, err := os.ReadFile(path)
		return err == nil && json.Unmarshal(data, &ep) == nil && ep.API != ""
	})
	c.url = ep.API
	fmt.Sscanf(ep.API[strings.LastIndex(ep.API, ":")+1:], "%d", &c.httpPort)
	fmt.Sscanf(ep.Bus[strings.LastIndex(ep.Bus, ":")+1:], "%d", &c.natsPort)
}

func (c *cloud) setArgs() []string {
	var out []string
	for _, s := range c.sets {
		out = append(out, "--set", s)
	}
	return out
}

func (c *cloud) startServer() {
	c.t.Helper()
	_ = os.Remove(filepath.Join(c.dataDir, "endpoints.json"))
	args := append([]string{"server", "--data-dir", c.dataDir, "--listen", fmt.Sprintf("127.0.0.1:%d", c.httpPort),
		"--set", fmt.Sprintf("keel.nats_listen=%s:%d", c.busHost, c.natsPort)}, c.setArgs()...)
	c.server = start(c.t, "server", args...)
	c.readEndpoints()
	c.waitFor("the server's API", 20*time.Second, func() bool {
		resp, err := http.Get(c.url + "/compute/v2.1/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	c.token = ""
}

// startAgent starts host's agent with the cloud's options, then extra
// arguments of its own (which may override them).
func (c *cloud) startAgent(host string, extra ...string) {
	c.t.Helper()
	args := append([]string{"agent", "--host", host, "--data-dir", filepath.Join(c.dataDir, "agents", host),
		"--nats-url", fmt.Sprintf("nats://%s:%d", c.busHost, c.natsPort),
		"--nats-credentials", filepath.Join(c.dataDir, "bus-credentials.json")}, c.setArgs()...)
	args = append(args, extra...)
	var in []string
	if ns := c.netns[host]; ns != nil {
		in = []string{"ip", "netns", "exec", ns.name}
	}
	p := startIn(c.t, "agent-"+host, in, args...)
	c.agents[host] = p
	c.waitFor("agent "+host+" to be up", 20*time.Second, func() bool {
		p.mustRun(c.t)
		var out struct {
			Hypervisors []map[string]any `json:"hypervisors"`
		}
		if c.tryCall("GET", "/compute/v2.1/os-hypervisors", nil, &out) != 200 {
			return false
		}
		for _, h := range out.Hypervisors {
			if h["hypervisor_hostname"] == host && h["state"] == "up" {
				return true
			}
		}
		return false
	})
}

func (c *cloud) waitFor(what string, timeout time.Duration, ok func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// login gets an admin token with the password the server generated.
func (c *cloud) login() string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" {
		return c.token
	}
	pw, err := os.ReadFile(filepath.Join(c.dataDir, "admin-password"))
	if err != nil {
		c.t.Fatal(err)
	}
	body := fmt.Sprintf(`{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"admin","domain":{"name":"Default"},"password":%q}}},"scope":{"project":{"name":"admin","domain":{"name":"Default"}}}}}`, pw)
	resp, err := http.Post(c.url+"/identity/v3/auth/tokens", "application/json", strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		c.t.Fatalf("login: %d", resp.StatusCode)
	}
	c.token = resp.Header.Get("X-Subject-Token")
	return c.token
}

// send sends an authenticated request at a service microversion
// ("compute 2.30", "placement 1.28") and returns the status (0 if the
// server did not answer) and the body.
func (c *cloud) send(method, path, version string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	req.Header.Set("X-Auth-Token", c.login())
	req.Header.Set("OpenStack-API-Version", version)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// tryCall sends an authenticated request (microversion 2.30) and decodes
// the answer; it returns the status, or 0 if the server did not answer.
func (c *cloud) tryCall(method, path string, body, out any) int {
	status, data := c.send(method, path, "compute 2.30", body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: %d %s", method, path, status, data)
		}
	}
	return status
}

func (c *cloud) call(method, path string, body, out any) int {
	c.t.Helper()
	status := c.tryCall(method, path, body, out)
	if status == 0 {
		c.t.Fatalf("%s %s: the server did not answer", method, path)
	}
	return status
}

func (c *cloud) boot(name, flavor string) string {
	c.t.Helper()
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	if st := c.call("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": name, "flavorRef": flavor, "networks": "none"}}, &out); st != 202 {
		c.t.Fatalf("boot %s: %d", name, st)
	}
	c.waitFor("server "+name+" ACTIVE", 20*time.Second, func() bool { return c.server_(out.Server.ID)["status"] == "ACTIVE" })
	return out.Server.ID
}

func (c *cloud) server_(id string) map[string]any {
	var out struct {
		Server map[string]any `json:"server"`
	}
	c.call("GET", "/compute/v2.1/servers/"+id, nil, &out)
	return out.Server
}

func (c *cloud) hostOf(id string) string {
	h, _ := c.server_(id)["OS-EXT-SRV-ATTR:host"].(string)
	return h
}

// hypervisors returns memory_mb_used per host.
func (c *cloud) memUsed() map[string]float64 {
	var out struct {
		Hypervisors []map[string]any `json:"hypervisors"`
	}
	c.call("GET", "/compute/v2.1/os-hypervisors/detail", nil, &out)
	m := map[string]float64{}
	for _, h := range out.Hypervisors {
		m[h["hypervisor_hostname"].(string)] = h["memory_mb_used"].(float64)
	}
	return m
}

// migrate starts a live migration and returns its id.
func (c *cloud) migrate(id, host string) int64 {
	c.t.Helper()
	var h any
	if host != "" {
		h = host
	}
	if st := c.call("POST", "/compute/v2.1/servers/"+id+"/action", map[string]any{"os-migrateLive": map[string]any{"host": h, "block_migration": "auto"}}, nil); st != 202 {
		c.t.Fatalf("live migration of %s: %d", id, st)
	}
	var out struct {
		Migrations []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
		} `json:"migrations"`
	}
	c.call("GET", "/compute/v2.1/os-migrations?instance_uuid="+id, nil, &out)
	if len(out.Migrations) == 0 {
		c.t.Fatalf("no migration recorded for %s", id)
	}
	return out.Migrations[0].ID
}

func (c *cloud) migrationStatus(id int64) string {
	var out struct {
		Migrations []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
		} `json:"migrations"`
	}
	if c.tryCall("GET", "/compute/v2.1/os-migrations", nil, &out) != 200 {
		return ""
	}
	for _, m := range out.Migrations {
		if m.ID == id {
			return m.Status
		}
	}
	return ""
}

func (c *cloud) waitMigration(id int64, timeout time.Duration) string {
	c.t.Helper()
	var st string
	c.waitFor(fmt.Sprintf("migration %d to end", id), timeout, func() bool {
		st = c.migrationStatus(id)
		switch st {
		case "completed", "error", "failed", "cancelled", "confirmed", "reverted":
			return true
		}
		return false
	})
	return st
}

// audit returns the server's invariant violations.
func (c *cloud) audit() []string {
	c.t.Helper()
	var out struct {
		Violations []string `json:"violations"`
	}
	if st := c.call("GET", "/keel/v1/audit", nil, &out); st != 200 {
		c.t.Fatalf("audit: %d", st)
	}
	return out.Violations
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// metric returns the value of one Prometheus sample ("name{labels}") from
// /metrics, or -1 if absent.
func (c *cloud) metric(sample string) float64 {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.url+"/metrics", nil)
	req.Header.Set("X-Auth-Token", c.login()) // /metrics is the admin's
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}
