package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"keel/internal/testenv"
)

// natsInstallHint says what to install when Debian's nats-server is
// missing: the tests fail rather than skip.
const natsInstallHint = "install Debian's nats-server package: apt-get install -y --no-install-recommends nats-server"

// natsServerBin finds the nats-server binary (Debian puts it in /usr/sbin).
func natsServerBin(t *testing.T) string {
	t.Helper()
	testenv.External(t, "nats-server (Debian's nats-server)")
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	t.Fatalf("nats-server not found on PATH or in /usr/sbin: %s", natsInstallHint)
	return ""
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// natsNode is one Debian nats-server process on loopback, with a user and
// password, possibly one node of a cluster.
type natsNode struct {
	t          *testing.T
	name       string
	bin        string
	conf       string
	port       int
	logPath    string
	cmd        *exec.Cmd
	done       chan struct{}
	generation int
}

// natsCluster is one or more nats-server processes sharing credentials.
type natsCluster struct {
	nodes     []*natsNode
	credsFile string // the keel bus credentials file matching them
}

// startNATS starts n nats-server processes on random loopback ports (a
// cluster when n > 1, every node routing to every other), all accepting
// one user with a random password, and writes the matching keel bus
// credentials file. They are killed when the test ends.
func startNATS(t *testing.T, n int) *natsCluster {
	t.Helper()
	bin := natsServerBin(t)
	dir := t.TempDir()
	user, password := "keel", fmt.Sprintf("pw-%d-%d", time.Now().UnixNano(), os.Getpid())
	nc := &natsCluster{credsFile: filepath.Join(dir, "bus-credentials.json")}
	creds, _ := json.Marshal(map[string]string{"user": user, "password": password})
	if err := os.WriteFile(nc.credsFile, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	clusterPorts := make([]int, n)
	for i := range n {
		clusterPorts[i] = freePort(t)
	}
	for i := range n {
		node := &natsNode{t: t, name: fmt.Sprintf("nats%d", i+1), bin: bin, port: freePort(t)}
		node.conf = filepath.Join(dir, node.name+".conf")
		node.logPath = filepath.Join(dir, node.name+".log")
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\nauthorization {\n  user: %q\n  password: %q\n}\n",
			node.name, node.port, user, password)
		if n > 1 {
			var routes []string
			for j, p := range clusterPorts {
				if j != i {
					routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
				}
			}
			conf += fmt.Sprintf("cluster {\n  name: keel\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", clusterPorts[i], strings.Join(routes, ", "))
		}
		if err := os.WriteFile(node.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		node.start()
		nc.nodes = append(nc.nodes, node)
		t.Cleanup(node.kill)
	}
	if n > 1 {
		nc.waitRoutes(n - 1)
	}
	return nc
}

// URLs is the comma-separated client URL list of every node.
func (nc *natsCluster) URLs() string {
	var urls []string
	for _, n := range nc.nodes {
		urls = append(urls, n.url())
	}
	return strings.Join(urls, ",")
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// start runs the node and waits until it accepts connections.
func (n *natsNode) start() {
	n.t.Helper()
	n.generation++
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	n.cmd = exec.Command(n.bin, "-c", n.conf)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		n.t.Fatalf("starting %s: %v", n.bin, err)
	}
	done := make(chan struct{})
	n.done = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); f.Close(); close(done) }(n.cmd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			data, _ := os.ReadFile(n.logPath)
			n.t.Fatalf("%s exited at start:\n%s", n.name, data)
		default:
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s not accepting connections after 10s", n.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the node with SIGKILL (a crash: no lame-duck mode, clients
// see their connections break).
func (n *natsNode) kill() {
	if n.cmd == nil {
		return
	}
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// waitRoutes waits (up to 10 s per node) until each node's log shows want
// route connections created: the cluster is formed.
func (nc *natsCluster) waitRoutes(want int) {
	for _, n := range nc.nodes {
		deadline := time.Now().Add(10 * time.Second)
		for {
			data, _ := os.ReadFile(n.logPath)
			if strings.Count(string(data), "Route connection created") >= want || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// replica is one keel server process with a data dir of its own, reached
// through a cloud value (whose API helpers it shares).
type replica struct {
	*cloud
	proc *proc
}

// startReplica starts `keel server` on a random API port with the given
// flags, and waits until its API answers. identityFrom, if not empty, is
// the data dir of a first replica whose admin password and token key are
// copied first (replicas must share the key: a token issued by one is
// checked by another); users and projects come from the store.
func startReplica(t *testing.T, name, identityFrom string, args ...string) *replica {
	t.Helper()
	dir := t.TempDir()
	if identityFrom != "" {
		for _, f := range []string{"admin-password", "token.key"} { // users and projects are the store's
			data, err := os.ReadFile(filepath.Join(identityFrom, f))
			if err != nil {
				t.Fatalf("copying %s to replica %s: %v", f, name, err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := &cloud{t: t, dataDir: dir, agents: map[string]*proc{}}
	p := start(t, name, append([]string{"server", "--data-dir", dir, "--listen", "127.0.0.1:0"}, args...)...)
	c.server = p
	c.readEndpoints()
	c.waitFor("replica "+name+"'s API", 30*time.Second, func() bool {
		resp, err := http.Get(c.url + "/compute/v2.1/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	return &replica{cloud: c, proc: p}
}

// hypervisorsUp counts the hypervisors the API reports up.
func (c *cloud) hypervisorsUp() int {
	var out struct {
		Hypervisors []map[string]any `json:"hypervisors"`
	}
	if c.tryCall("GET", "/compute/v2.1/os-hypervisors", nil, &out) != 200 {
		return 0
	}
	n := 0
	for _, h := range out.Hypervisors {
		if h["state"] == "up" {
			n++
		}
	}
	return n
}

// countInLogs counts the lines containing text in the given processes'
// logs.
func countInLogs(text string, ps ...*proc) int {
	n := 0
	for _, p := range ps {
		data, _ := os.ReadFile(p.log)
		n += strings.Count(string(data), text)
	}
	return n
}

// waitSettled waits until server id has no task left. A migration's record
// reads "completed" a moment before the conductor moves the instance's
// host to the destination (the record is saved before its last action),
// so a test that reads the host right after the status can see the
// source.
func (c *cloud) waitSettled(id string) {
	c.t.Helper()
	c.waitFor("server "+id+" settled", 30*time.Second, func() bool {
		s := c.server_(id)
		return s["OS-EXT-STS:task_state"] == nil && s["status"] == "ACTIVE"
	})
}
