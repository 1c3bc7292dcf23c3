package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/testenv"
)

// TestNovaExecutorExitsWithItsDataDir: a detached `keel nova-executor`
// whose data dir is removed (as go test removes a test's temporary dir),
// or whose lock file is, exits with a log line instead of running its
// plans' cloud calls for ever (one ran 2h20m after its test was killed).
// Each drain's move copies for minutes, so only the removal can end its
// executor while the test waits.
func TestNovaExecutorExitsWithItsDataDir(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3, Config: func(c *config.Config) {
		c.Libvirt.LiveMigrationBandwidth = 1 // MiB/s: m1.tiny's 512 MiB copy for minutes
	}})
	c := cloud.Connect(t)
	ctx := context.Background()
	fl, err := c.FindFlavor(ctx, "m1.tiny")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range []string{"h01", "h02"} {
		s, err := servers.Create(ctx, c.ComputeClient(), servers.CreateOpts{Name: "on-" + h, FlavorRef: fl.ID,
			AvailabilityZone: "nova:" + h, Networks: "none"}, nil).Extract()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	for _, id := range ids {
		if _, err := c.WaitServer(ctx, id, 50*time.Millisecond, func(s client.Server) bool { return s.Status == "ACTIVE" }); err != nil {
			t.Fatal(err)
		}
	}
	novaCloudsYAML(t, cloud)
	setenv(t, "KEEL_CLOUD_AS_NOVA", "1")

	// h01's executor loses its lock file, h02's its whole data dir.
	lockOnly, whole := t.TempDir(), t.TempDir()
	pids := map[string]int{}
	for host, dir := range map[string]string{"h01": lockOnly, "h02": whole} {
		mustRun(t, "host", "drain", "--os-cloud", "nova", "--data-dir", dir, host)
		pids[dir] = runningExecutor(t, dir)
	}
	if err := os.Remove(filepath.Join(lockOnly, "executor.lock")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(whole); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{lockOnly, whole} {
		if st := waitExit(t, pids[dir]); !st.Exited() || st.ExitStatus() == 0 {
			t.Errorf("the executor of %s ended with %v, want an exit status saying it failed", dir, st)
		}
	}
	b, err := os.ReadFile(filepath.Join(lockOnly, "executor.log"))
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, string(b), "stopping the executor: its data dir is gone", "data_dir="+lockOnly)
}

// runningExecutor waits until dir's plan 1 has a move running, and
// returns the pid of the executor running it (from its lock file). The
// executor is killed when the test ends, if it still runs.
func runningExecutor(t *testing.T, dir string) int {
	t.Helper()
	ctx := testenv.Context(t)
	for novaPlanJSON(t, dir, 1).Progress.Running == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no move of %s runs", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(dir, "executor.lock"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid == os.Getpid() {
		t.Fatalf("lock file of %s: %q", dir, b)
	}
	t.Cleanup(func() {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	})
	return pid
}

// waitExit waits for the exit of pid, a child of the test process (the
// drain command it ran in process started it), and reaps it.
func waitExit(t *testing.T, pid int) syscall.WaitStatus {
	t.Helper()
	ctx := testenv.Context(t)
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			t.Fatalf("waiting for executor %d: %v", pid, err)
		}
		if got == pid {
			return ws
		}
		if ctx.Err() != nil {
			t.Fatalf("executor %d still runs after its data dir went", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
