package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"keel/internal/testenv"
)

// A network namespace of the test's own, for partitions: one host's agent
// runs in it (ip netns exec), joined to the test's namespace by a veth
// pair with addresses of its own (10.213.N.1 on the test's side, .2 in the
// namespace). The server's bus listens on the test side's address, which
// the other agents reach locally; cutting the namespace's traffic with
// iptables (DROP, both ways) is a partition: packets vanish, no connection
// is reset, as on a cut link. Root and iproute2/iptables are needed (the
// tests say so and fail otherwise, as the full-disk rows do).

type netns struct {
	name, hostIf, hostIP, nsIP string
}

var netnsCount atomic.Int32

// newNetns makes a namespace and its veth pair, removed when t ends.
func newNetns(t *testing.T) *netns {
	t.Helper()
	testenv.External(t, "root, ip netns and iptables (Debian's iproute2, iptables)")
	if os.Geteuid() != 0 {
		t.Fatal("the partition rows need root (a network namespace and iptables); run ./test.sh as root, as CI does")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the partition rows need %s (Debian's iproute2 and iptables, in tests/packages.txt): %v", tool, err)
		}
	}
	n := int(netnsCount.Add(1))
	id := fmt.Sprintf("%d%d", os.Getpid()%10000, n)
	octet := (os.Getpid()%200 + n) % 250
	ns := &netns{name: "keel" + id, hostIf: "kh" + id, hostIP: fmt.Sprintf("10.213.%d.1", octet), nsIP: fmt.Sprintf("10.213.%d.2", octet)}
	nsIf := "kn" + id
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", ns.hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns.name).Run()
	})
	for _, cmd := range [][]string{
		{"ip", "netns", "add", ns.name},
		{"ip", "link", "add", ns.hostIf, "type", "veth", "peer", "name", nsIf},
		{"ip", "link", "set", nsIf, "netns", ns.name},
		{"ip", "addr", "add", ns.hostIP + "/30", "dev", ns.hostIf},
		{"ip", "link", "set", ns.hostIf, "up"},
		{"ip", "netns", "exec", ns.name, "ip", "addr", "add", ns.nsIP + "/30", "dev", nsIf},
		{"ip", "netns", "exec", ns.name, "ip", "link", "set", nsIf, "up"},
		{"ip", "netns", "exec", ns.name, "ip", "link", "set", "lo", "up"},
	} {
		run(t, cmd...)
	}
	return ns
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}

// partition drops every packet into and out of the namespace (cut), or
// lets them through again (heal).
func (ns *netns) partition(t *testing.T, cut bool) {
	t.Helper()
	if !cut {
		run(t, "ip", "netns", "exec", ns.name, "iptables", "-F")
		return
	}
	run(t, "ip", "netns", "exec", ns.name, "iptables", "-A", "INPUT", "-j", "DROP")
	run(t, "ip", "netns", "exec", ns.name, "iptables", "-A", "OUTPUT", "-j", "DROP")
}

// partitionCloud is faultCloud with host inNS's agent in a network
// namespace of its own (the server's bus on the namespace's veth address).
func partitionCloud(t *testing.T, hosts int, inNS string, extra ...string) (*cloud, *netns) {
	t.Helper()
	ns := newNetns(t)
	c := newCloudOn(t, ns.hostIP, map[string]*netns{inNS: ns}, faultSets(extra)...)
	c.startFaultHosts(hosts)
	return c, ns
}
