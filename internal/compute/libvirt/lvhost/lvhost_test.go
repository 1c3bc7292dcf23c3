package lvhost

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"keel/internal/testenv"
)

// TestTwoHosts starts two daemons and checks each is a host of its own:
// its own hostname and host UUID, reached through its own socket, and
// the other's name resolves to the other's address inside its namespace
// (the destination a migration names). Stop leaves no daemon and no
// namespace.
func TestTwoHosts(t *testing.T) {
	testenv.External(t, "libvirtd in namespaces (root; Debian's libvirt-daemon-system, qemu-system-x86, iproute2)")
	testenv.External(t, "libvirt daemons in namespaces of their own (root; Debian's libvirt-daemon-system, qemu-system-x86, iproute2)")
	if err := Check(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := Start(ctx, Options{Dir: t.TempDir(), Hosts: []string{"h01", "h02"}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	seen := map[string]string{}
	for _, h := range c.Hosts {
		u, _ := url.Parse(h.URI())
		l, err := golibvirt.ConnectToURI(u)
		if err != nil {
			t.Fatalf("connecting to %s: %v", h.Name, err)
		}
		name, err := l.ConnectGetHostname()
		if err != nil {
			t.Fatal(err)
		}
		caps, err := l.ConnectGetCapabilities()
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Disconnect()
		if name != h.Name {
			t.Errorf("host %s calls itself %s", h.Name, name)
		}
		seen[h.Name] = caps
	}
	if seen["h01"] == seen["h02"] {
		t.Error("the two daemons report the same capabilities (host UUID)")
	}
	loaded, err := Load(c.Dir)
	if err != nil || len(loaded.Hosts) != 2 || loaded.Hosts[1].PID != c.Hosts[1].PID {
		t.Fatalf("Load: %+v, %v", loaded, err)
	}
	start := time.Now()
	if err := loaded.Restart(ctx, "h02"); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted h02's libvirtd in %s", time.Since(start).Round(time.Millisecond))
	if err := loaded.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, h := range loaded.Hosts {
		if alive(h.PID) {
			t.Errorf("libvirtd of %s (pid %d) still runs", h.Name, h.PID)
		}
		if _, err := os.Stat("/run/netns/" + h.NetNS); err == nil {
			t.Errorf("namespace %s still exists", h.NetNS)
		}
	}
}
