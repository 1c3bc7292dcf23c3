package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/testenv"
)

// keel runs a keel command to its end and returns its output; it must
// succeed.
func keel(t *testing.T, args ...string) string {
	t.Helper()
	testenv.External(t, keelProcesses)
	out, err := exec.Command(keelBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("keel %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// hypervisorState is host's state in os-hypervisors ("" if not listed).
func (c *cloud) hypervisorState(host string) string {
	var out struct {
		Hypervisors []map[string]any `json:"hypervisors"`
	}
	if c.tryCall("GET", "/compute/v2.1/os-hypervisors", nil, &out) != 200 {
		return ""
	}
	for _, h := range out.Hypervisors {
		if h["hypervisor_hostname"] == host {
			s, _ := h["state"].(string)
			return s
		}
	}
	return ""
}

// TestAgentRevokeOneHost: keel server with its embedded bus, agent h1 on
// an identity of its own (keel agent enroll), agent h2 on the one derived
// from the servers' file. keel agent revoke h1 drops h1's connection
// (the server logs it), h1 goes down while h2 stays up; h1's old file is
// refused after it is enrolled again, and the new one brings it back.
func TestAgentRevokeOneHost(t *testing.T) {
	t.Parallel()
	c := newCloud(t, "DEFAULT.report_interval=1", "DEFAULT.service_down_time=5")
	first, second := t.TempDir(), t.TempDir()
	keel(t, "agent", "enroll", "h1", "--data-dir", c.dataDir, "--out-dir", first)
	oldFile := filepath.Join(first, "h1-bus-credentials.json")
	c.startAgent("h1", "--nats-credentials", oldFile)
	c.startAgent("h2")

	out := keel(t, "agent", "revoke", "h1", "--data-dir", c.dataDir)
	if !strings.Contains(out, "revoked h1") {
		t.Fatalf("keel agent revoke h1 said %q", out)
	}
	c.waitFor("the server to drop h1's connection", 15*time.Second, func() bool {
		data, _ := os.ReadFile(c.server.log)
		return strings.Contains(string(data), "dropped the bus connections of an agent whose identity changed") &&
			strings.Contains(string(data), "host=h1")
	})
	c.waitFor("h1 down", 30*time.Second, func() bool { return c.hypervisorState("h1") == "down" })
	if s := c.hypervisorState("h2"); s != "up" {
		t.Fatalf("h2 is %q after h1 was revoked, want up", s)
	}

	keel(t, "agent", "enroll", "h1", "--data-dir", c.dataDir, "--out-dir", second)
	newFile := filepath.Join(second, "h1-bus-credentials.json")
	oldData, _ := os.ReadFile(oldFile)
	newData, _ := os.ReadFile(newFile)
	if string(oldData) == string(newData) {
		t.Fatal("enrolling h1 again wrote the same credentials")
	}
	c.agents["h1"].kill()
	stale := start(t, "agent-h1-stale", "agent", "--host", "h1", "--data-dir", filepath.Join(c.dataDir, "agents", "h1"),
		"--nats-url", fmt.Sprintf("nats://%s:%d", c.busHost, c.natsPort), "--nats-credentials", oldFile)
	c.waitFor("the bus to refuse h1's first file", 20*time.Second, func() bool {
		data, _ := os.ReadFile(stale.log)
		return strings.Contains(strings.ToLower(string(data)), "authorization violation")
	})
	if s := c.hypervisorState("h1"); s != "down" {
		t.Fatalf("h1 is %q with its first file, want down", s)
	}
	stale.kill()
	c.startAgent("h1", "--nats-credentials", newFile)
	if s := c.hypervisorState("h2"); s != "up" {
		t.Fatalf("h2 is %q, want up", s)
	}
}
