package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSecondServerOnADataDirRefuses: with keel dev running on a data dir,
// a keel server and a keel dev started on it refuse at once, naming the
// first process's PID, and touch none of its work (the first one's log
// never shows them, and it still serves); with the first stopped, a server
// starts on that data dir.
func TestSecondServerOnADataDirRefuses(t *testing.T) {
	t.Parallel()
	c := &cloud{t: t, dataDir: t.TempDir(), agents: map[string]*proc{}}
	c.server = start(t, "dev", "dev", "--hosts", "1", "--data-dir", c.dataDir, "--listen", "127.0.0.1:0")
	c.readEndpoints()
	c.waitFor("keel dev's host", 30*time.Second, func() bool { return c.hypervisorState("h01") == "up" })
	for _, args := range [][]string{
		{"server", "--data-dir", c.dataDir, "--listen", "127.0.0.1:0", "--set", "keel.nats_listen=127.0.0.1:0"},
		{"dev", "--hosts", "1", "--data-dir", c.dataDir, "--listen", "127.0.0.1:0"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, keelBin, args...).CombinedOutput()
		late := ctx.Err()
		cancel()
		if err == nil || late != nil {
			t.Fatalf("keel %s on a data dir in use: err %v (context %v), want a refusal\n%s", args[0], err, late, out)
		}
		want := fmt.Sprintf("is in use by another keel process (pid %d,", c.server.cmd.Process.Pid)
		if !strings.Contains(string(out), want) {
			t.Errorf("keel %s on a data dir in use said:\n%s\nwant %q", args[0], out, want)
		}
		if strings.Contains(string(out), "resum") || strings.Contains(string(out), "address already in use") {
			t.Errorf("keel %s went on before refusing:\n%s", args[0], out)
		}
	}
	if s := c.hypervisorState("h01"); s != "up" {
		t.Errorf("h01 is %q after the refused starts, want up", s)
	}
	c.server.interrupt(t, 30*time.Second)
	second := start(t, "server", "server", "--data-dir", c.dataDir, "--listen", "127.0.0.1:0", "--set", "keel.nats_listen=127.0.0.1:0")
	c.waitFor("a server on the data dir once keel dev stopped", 30*time.Second, func() bool {
		second.mustRun(t)
		data, _ := os.ReadFile(second.log)
		return strings.Contains(string(data), "keel server ready")
	})
}
