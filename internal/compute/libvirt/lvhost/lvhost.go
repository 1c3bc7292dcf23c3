// Package lvhost runs several libvirt daemons side by side on one
// machine, each a "host" of its own, for keel's libvirt tests: every
// daemon runs in its own mount, network and UTS namespace, with its own
// /etc/libvirt, /run/libvirt, /var/lib/libvirt, /var/cache/libvirt and
// /var/log/libvirt (directories under the cluster's directory, bind-mounted
// over those paths), its own hostname, host_uuid and address on a private
// network, so that libvirt migrates guests between them peer to peer as
// between two machines.
//
// The hosts share one network: a bridge in a namespace of the cluster's
// own, reached by one veth pair per host, with addresses from the subnet
// the caller chooses (10.77.N.0/24 by default, N random), which exist only
// in these namespaces. A hosts file bind-mounted over /etc/hosts in every
// daemon's namespace resolves the host names to those addresses, so a
// destination is named as Nova names it: qemu+tcp://HOST/system.
//
// The agents and tests reach each daemon from the root namespace through
// its unix socket, Host.Socket (a bind mount shares the inode); no
// system-wide libvirt socket or port is touched. Start writes the
// cluster's state (hosts, addresses, PIDs) to DIR/cluster.json so that
// another process (tests/libvirt.sh through the lvhosts command) can
// restart a daemon or tear everything down: Load, Restart, Stop.
//
// Everything needs root (namespaces, bind mounts, veth) and Debian's
// libvirt-daemon-system (libvirtd), qemu-system-x86, iproute2 (ip) and
// util-linux (unshare); Check names what is missing.
package lvhost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options configure a cluster.
type Options struct {
	// Dir holds the cluster: one directory per host, the hosts file and
	// cluster.json. It must be an absolute path outside the five libvirt
	// directories.
	Dir string
	// Hosts names the hosts (at least one), e.g. h01, h02: each name is a
	// daemon's hostname and resolves to its address.
	Hosts []string
	// Subnet is the /24 the hosts' addresses come from, e.g. "10.77.5":
	// host i gets .i+1. Empty picks 10.77.N with N random.
	Subnet string
}

// Host is one daemon.
type Host struct {
	Name string `json:"name"`
	// Addr is its address on the cluster's network; UUID its host_uuid.
	Addr string `json:"addr"`
	UUID string `json:"uuid"`
	// Dir is its directory (etc, run, lib, cache, log); Socket the unix
	// socket to reach it from the root namespace.
	Dir    string `json:"dir"`
	Socket string `json:"socket"`
	// NetNS is its network namespace; PID the libvirtd process.
	NetNS string `json:"netns"`
	PID   int    `json:"pid"`
}

// URI is the connection URI that reaches the daemon from the root
// namespace (keel's [libvirt] connection_uri for this host's agent).
func (h *Host) URI() string {
	return "qemu+unix:///system?socket=" + url.QueryEscape(h.Socket)
}

// Cluster is a set of running daemons.
type Cluster struct {
	Dir    string  `json:"dir"`
	Switch string  `json:"switch"` // the bridge's network namespace
	Hosts  []*Host `json:"hosts"`
}

// Host returns the host named name, or nil.
func (c *Cluster) Host(name string) *Host {
	for _, h := range c.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// stateFile is where Start writes the cluster for Load.
const stateFile = "cluster.json"

// ErrPrerequisite is wrapped by Check's errors.
var ErrPrerequisite = errors.New("a prerequisite of the libvirt test hosts is missing")

// Check reports the first missing prerequisite, naming the Debian package
// (or the privilege) that provides it.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: root (the daemons need mount, network and UTS namespaces, bind mounts and veth pairs): run as root", ErrPrerequisite)
	}
	for _, p := range []struct{ cmd, pkg string }{
		{"libvirtd", "libvirt-daemon-system"},
		{"qemu-system-x86_64", "qemu-system-x86"},
		{"ip", "iproute2"},
		{"unshare", "util-linux"},
	} {
		if _, err := exec.LookPath(p.cmd); err != nil {
			return fmt.Errorf("%w: %s not found: apt-get install -y --no-install-recommends %s", ErrPrerequisite, p.cmd, p.pkg)
		}
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so"); err != nil {
		if matches, _ := filepath.Glob("/usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so"); len(matches) == 0 {
			return fmt.Errorf("%w: libvirt's QEMU driver not found: apt-get install -y --no-install-recommends libvirt-daemon-driver-qemu", ErrPrerequisite)
		}
	}
	return nil
}

// Start creates the namespaces and the network, writes every host's
// configuration and starts the daemons, returning once each answers on
// its socket. On an error it stops what it started.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(opts.Dir) || len(opts.Hosts) == 0 {
		return nil, fmt.Errorf("lvhost: an absolute directory and at least one host are needed (got %q, %v)", opts.Dir, opts.Hosts)
	}
	subnet := opts.Subnet
	if subnet == "" {
		subnet = fmt.Sprintf("10.77.%d", 1+randInt(250))
	}
	id := randHex(3)
	c = &Cluster{Dir: opts.Dir, Switch: "kvsw-" + id}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	for i, name := range opts.Hosts {
		h := &Host{Name: name, Addr: fmt.Sprintf("%s.%d", subnet, i+1), UUID: newUUID(),
			Dir: filepath.Join(opts.Dir, name), NetNS: fmt.Sprintf("kv%s-%s", id, name)}
		h.Socket = filepath.Join(h.Dir, "run", "libvirt-sock")
		c.Hosts = append(c.Hosts, h)
		fmt.Fprintf(&hosts, "%s %s\n", h.Addr, name)
	}
	if err := os.WriteFile(filepath.Join(opts.Dir, "hosts"), []byte(hosts.String()), 0o644); err != nil {
		return nil, err
	}
	if err := c.network(ctx, subnet); err != nil {
		return nil, err
	}
	for _, h := range c.Hosts {
		if err := h.configure(); err != nil {
			return nil, err
		}
		if err := c.start(ctx, h); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// network makes the switch namespace with its bridge and one veth pair
// per host, the host's end (eth0) in the host's namespace with its
// address.
func (c *Cluster) network(ctx context.Context, subnet string) error {
	if err := run(ctx, "ip", "netns", "add", c.Switch); err != nil {
		return err
	}
	if err := run(ctx, "ip", "-n", c.Switch, "link", "add", "br0", "type", "bridge"); err != nil {
		return err
	}
	if err := run(ctx, "ip", "-n", c.Switch, "link", "set", "br0", "up"); err != nil {
		return err
	}
	for i, h := range c.Hosts {
		if err := run(ctx, "ip", "netns", "add", h.NetNS); err != nil {
			return err
		}
		port := fmt.Sprintf("p%d", i)
		steps := [][]string{
			{"ip", "link", "add", "eth0", "netns", h.NetNS, "type", "veth", "peer", "name", port, "netns", c.Switch},
			{"ip", "-n", c.Switch, "link", "set", port, "master", "br0"},
			{"ip", "-n", c.Switch, "link", "set", port, "up"},
			{"ip", "-n", h.NetNS, "addr", "add", h.Addr + "/24", "dev", "eth0"},
			{"ip", "-n", h.NetNS, "link", "set", "eth0", "up"},
			{"ip", "-n", h.NetNS, "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if err := run(ctx, s...); err != nil {
				return err
			}
		}
	}
	_ = subnet
	return nil
}

// configure writes a host's directories and its libvirtd.conf and
// qemu.conf.
func (h *Host) configure() error {
	for _, d := range []string{"etc", "run", "lib", "cache", "log"} {
		if err := os.MkdirAll(filepath.Join(h.Dir, d), 0o755); err != nil {
			return err
		}
	}
	libvirtd := fmt.Sprintf(`# written by keel's lvhost for host %[1]s
listen_tls = 0
listen_tcp = 1
listen_addr = %[2]q
auth_tcp = "none"
auth_unix_rw = "none"
auth_unix_ro = "none"
unix_sock_rw_perms = "0770"
host_uuid = %[3]q
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
`, h.Name, h.Addr, h.UUID)
	// Without systemd, cgroups shared by every daemon, or a security
	// driver: QEMU runs as root, logs to files, and the domain IDs the
	// daemons each count from 1 never meet in a cgroup.
	qemu := fmt.Sprintf(`# written by keel's lvhost for host %[1]s
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
stdio_handler = "file"
cgroup_controllers = [ ]
namespaces = [ ]
migration_address = %[2]q
migration_host = %[2]q
`, h.Name, h.Addr)
	if err := os.WriteFile(filepath.Join(h.Dir, "etc", "libvirtd.conf"), []byte(libvirtd), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, "etc", "qemu.conf"), []byte(qemu), 0o644)
}

// start runs h's libvirtd in its namespaces and waits until its socket
// answers. `ip netns exec`, unshare and sh each exec the next, so the
// process started is libvirtd itself.
func (c *Cluster) start(ctx context.Context, h *Host) error {
	_ = os.Remove(h.Socket)
	script := strings.Join([]string{
		"set -e",
		// /run gets a tmpfs of its own, so /run/libvirt exists without
		// touching the machine's /run.
		"mount -t tmpfs -o mode=0755 keel-lvhost /run",
		"mkdir -p /run/libvirt",
		"mount --bind " + shq(filepath.Join(h.Dir, "run")) + " /run/libvirt",
		"mount --bind " + shq(filepath.Join(h.Dir, "etc")) + " /etc/libvirt",
		"mount --bind " + shq(filepath.Join(h.Dir, "lib")) + " /var/lib/libvirt",
		"mount --bind " + shq(filepath.Join(h.Dir, "cache")) + " /var/cache/libvirt",
		"mount --bind " + shq(filepath.Join(h.Dir, "log")) + " /var/log/libvirt",
		"mount --bind " + shq(filepath.Join(c.Dir, "hosts")) + " /etc/hosts",
		"hostname " + shq(h.Name),
		"exec libvirtd --listen --config /etc/libvirt/libvirtd.conf --pid-file /run/libvirt/libvirtd.pid",
	}, "\n")
	out, err := os.OpenFile(filepath.Join(h.Dir, "daemon.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command("ip", "netns", "exec", h.NetNS, "unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting libvirtd of %s: %w", h.Name, err)
	}
	h.PID = cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := c.save(); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if conn, err := net.DialTimeout("unix", h.Socket, time.Second); err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("libvirtd of %s exited at start: %s", h.Name, tail(filepath.Join(h.Dir, "daemon.out"), filepath.Join(h.Dir, "log", "libvirtd.log")))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("libvirtd of %s did not open %s within 60 s: %s", h.Name, h.Socket, tail(filepath.Join(h.Dir, "daemon.out")))
		}
	}
}

// Restart stops host name's libvirtd (SIGTERM, by its PID) and starts it
// again in the same namespaces; the guests' QEMU processes run on and
// the new daemon reconnects to them.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	h := c.Host(name)
	if h == nil {
		return fmt.Errorf("no host %s in the cluster", name)
	}
	if err := stopPID(h.PID, syscall.SIGTERM, 20*time.Second); err != nil {
		return fmt.Errorf("stopping libvirtd of %s: %w", name, err)
	}
	if err := run(ctx, "ip", "netns", "exec", h.NetNS, "true"); err != nil {
		return err
	}
	return c.start(ctx, h)
}

// Stop tears the cluster down: each daemon's QEMU processes (by the PIDs
// libvirt keeps in its run directory) and the daemon itself (by its PID)
// are killed, then the namespaces go (and with them the veths and the
// mounts). It goes on past errors and returns the first.
func (c *Cluster) Stop() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, h := range c.Hosts {
		if h.PID > 0 {
			keep(stopPID(h.PID, syscall.SIGTERM, 10*time.Second))
		}
		pids, _ := filepath.Glob(filepath.Join(h.Dir, "run", "qemu", "*.pid"))
		for _, f := range pids {
			if b, err := os.ReadFile(f); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isQEMU(pid) {
					keep(stopPID(pid, syscall.SIGKILL, 10*time.Second))
				}
			}
		}
		if h.NetNS != "" {
			if err := exec.Command("ip", "netns", "del", h.NetNS).Run(); err != nil && netnsExists(h.NetNS) {
				keep(fmt.Errorf("deleting network namespace %s: %w", h.NetNS, err))
			}
		}
	}
	if c.Switch != "" {
		if err := exec.Command("ip", "netns", "del", c.Switch).Run(); err != nil && netnsExists(c.Switch) {
			keep(fmt.Errorf("deleting network namespace %s: %w", c.Switch, err))
		}
	}
	return first
}

// Load reads the cluster Start wrote to dir.
func Load(dir string) (*Cluster, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("reading the libvirt test cluster: %w", err)
	}
	var c Cluster
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &c, nil
}

func (c *Cluster) save() error {
	data, _ := json.MarshalIndent(c, "", "  ")
	tmp := filepath.Join(c.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.Dir, stateFile))
}

// stopPID signals pid and waits until it is gone, killing it if it
// outlives wait. A pid already gone (or a zombie) is done.
func stopPID(pid int, sig syscall.Signal, wait time.Duration) error {
	if !alive(pid) {
		return nil
	}
	_ = syscall.Kill(pid, sig)
	deadline := time.Now().Add(wait)
	for alive(pid) {
		if time.Now().After(deadline) {
			if sig == syscall.SIGKILL {
				return fmt.Errorf("process %d still runs %s after SIGKILL", pid, wait)
			}
			sig, deadline = syscall.SIGKILL, time.Now().Add(wait)
			_ = syscall.Kill(pid, sig)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

func isQEMU(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && strings.Contains(filepath.Base(exe), "qemu")
}

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

func run(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tail returns the last lines of the files, one line.
func tail(files ...string) string {
	var lines []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		ls := strings.Split(strings.TrimSpace(string(data)), "\n")
		lines = append(lines, ls[max(0, len(ls)-4):]...)
	}
	return strings.Join(lines, "; ")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randInt(n int) int {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return (int(b[0])<<8 | int(b[1])) % n
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
