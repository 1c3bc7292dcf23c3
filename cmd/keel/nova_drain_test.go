package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/novaplan"
	"keel/internal/records"
	"keel/internal/testenv"
)

// TestMain lets a test start the test binary as keel itself: the drain's
// detached executor runs `keel nova-executor` (os.Executable) with
// KEEL_BE_MAIN=1.
func TestMain(m *testing.M) {
	if os.Getenv("KEEL_BE_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// novaDrainCloud starts keel with hosts agents and boots n servers on
// h01 (forced, as an admin does with availability_zone nova:h01), and
// points the commands at it as a Nova cloud (admin token, endpoints,
// KEEL_CLOUD_AS_NOVA). It returns the cloud and the servers' UUIDs.
func novaDrainCloud(t *testing.T, hosts, n int) (*clienttest.Cloud, []string) {
	t.Helper()
	return novaDrainCloudLog(t, hosts, n, nil)
}

// novaDrainCloudLog is novaDrainCloud with the cloud's log (its requests
// at debug level) also written to log.
func novaDrainCloudLog(t *testing.T, hosts, n int, log io.Writer) (*clienttest.Cloud, []string) {
	t.Helper()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: hosts, Log: log, Config: func(c *config.Config) {
		c.Libvirt.LiveMigrationBandwidth = 0 // copies at once: the test times keel, not the fake copy
	}})
	c := cloud.Connect(t)
	ctx := context.Background()
	var ids []string
	flavors := []string{"m1.tiny", "m1.small", "m1.tiny"} // small: the fake copies 1 GiB/s
	for i := range n {
		fl, err := c.FindFlavor(ctx, flavors[i%3])
		if err != nil {
			t.Fatal(err)
		}
		s, err := servers.Create(ctx, c.ComputeClient(), servers.CreateOpts{Name: "s" + strconv.Itoa(i), FlavorRef: fl.ID,
			AvailabilityZone: "nova:h01", Networks: "none"}, nil).Extract()
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
	return cloud, ids
}

// waitExecutorGone waits until no executor holds dir's lock (it exits
// once no plan is active).
func waitExecutorGone(t *testing.T, dir string) {
	t.Helper()
	ctx := testenv.Context(t)
	for {
		release, ok, err := novaplan.Lock(dir)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			release()
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the executor of %s did not exit", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func novaPlanJSON(t *testing.T, dir string, id int) NovaPlan {
	t.Helper()
	var v NovaPlan
	out := mustRun(t, "plan", "show", strconv.Itoa(id), "--os-cloud", "nova", "--data-dir", dir, "--format", "json")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return v
}

// TestNovaDrainSpreads: keel host drain on a cloud reached as Nova (keel
// itself, through Nova's compute API and Placement) records a plan in the
// local store, a detached executor runs it through os-migrateLive, and
// --wait prints a line per move. Every server leaves h01, the moves
// spread over the other hosts (keel's claims count each destination at
// once), and plan show --format json has the figures.
func TestNovaDrainSpreads(t *testing.T) {
	t.Parallel()
	cloud, ids := novaDrainCloud(t, 4, 6)
	dir := t.TempDir()
	out := mustRun(t, "host", "drain", "--os-cloud", "nova", "--data-dir", dir, "h01", "--wait")
	waitExecutorGone(t, dir)
	wantContains(t, out, "plan 1: draining h01", "[6/6]", "done — 6 done", "keel drain: moves=6 done=6 refused_capacity=0 refused_by_nova=0 failed=0")
	if b, err := os.ReadFile(filepath.Join(dir, "executor.log")); err == nil && os.Getenv("KEEL_SHOW_EXECUTOR") != "" {
		t.Logf("output:\n%s\nexecutor log:\n%s", out, b)
	}
	v := novaPlanJSON(t, dir, 1)
	if v.State != records.PlanDone || v.Figures.Done != 6 || v.Figures.Refused != 0 {
		t.Fatalf("plan %+v", v.Figures)
	}
	// 2 small and 4 tiny servers: balanced by RAM, every other host takes
	// some and none more than 3 (the small ones go to two hosts, the tiny
	// ones fill the third up to them).
	if len(v.Figures.DestCounts) != 3 || v.Figures.DestCounts["h01"] != 0 {
		t.Errorf("destinations %v: want h02..h04 all used", v.Figures.DestCounts)
	}
	for _, n := range v.Figures.DestCounts {
		if n > 3 {
			t.Errorf("destinations %v: a pile-up", v.Figures.DestCounts)
		}
	}
	if v.Figures.KeelMSMax <= 0 || v.Figures.NovaSecondsMedian <= 0 {
		t.Errorf("figures %+v", v.Figures)
	}
	c := cloud.Connect(t)
	for _, id := range ids {
		s, err := c.GetServer(context.Background(), id)
		if err != nil || s.Host == "h01" || s.Status != "ACTIVE" {
			t.Errorf("server %s: %+v %v", id, s, err)
		}
	}
	hs, err := c.Hosts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Name == "h01" && h.Status != "disabled" {
			t.Errorf("h01 is %s, want disabled by the drain", h.Status)
		}
	}
	wantContains(t, mustRun(t, "plan", "list", "--os-cloud", "nova", "--data-dir", dir), "plan 1 (drain h01): done")
}

// TestNovaDrainResumes: the executor killed mid-drain and started again
// (by plan show --wait) resumes the plan; every server moves exactly once.
func TestNovaDrainResumes(t *testing.T) {
	t.Parallel()
	cloud, ids := novaDrainCloud(t, 3, 4)
	dir := t.TempDir()
	mustRun(t, "host", "drain", "--os-cloud", "nova", "--data-dir", dir, "h01", "--parallel", "1")
	// Kill it once a move has ended and others are left.
	ctx := testenv.Context(t)
	for {
		v := novaPlanJSON(t, dir, 1)
		if v.Progress.Done >= 1 {
			if v.Progress.Left == 0 {
				t.Fatalf("the plan ran out before the kill: %+v", v.Progress)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no move ended: %+v", v.Progress)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(dir, "executor.lock"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("lock file %q", b)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExecutorGone(t, dir)
	out := mustRun(t, "plan", "show", "1", "--wait", "--os-cloud", "nova", "--data-dir", dir)
	waitExecutorGone(t, dir)
	wantContains(t, out, "done — 4 done")
	c := cloud.Connect(t)
	for _, id := range ids {
		ms, err := c.Migrations(context.Background(), client.MigrationFilter{InstanceUUID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || ms[0].Status != "completed" {
			t.Errorf("server %s has migrations %+v, want one completed", id, ms)
		}
	}
}

// TestNovaDrainBadInput: an unknown host is refused naming the cloud's
// hosts, and nothing is stored or disabled.
func TestNovaDrainBadInput(t *testing.T) {
	t.Parallel()
	novaDrainCloud(t, 2, 1)
	dir := t.TempDir()
	_, err := run(t, "host", "drain", "--os-cloud", "nova", "--data-dir", dir, "h09")
	if err == nil {
		t.Fatal("drained an unknown host")
	}
	wantContains(t, err.Error(), "host h09 is not a compute host", "h01, h02")
	wantContains(t, mustRun(t, "plan", "list", "--os-cloud", "nova", "--data-dir", dir), "no plans")
}

// lockedBuffer is a buffer the cloud's goroutines write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNovaDrainReadsOnce: the whole cloud (version checks, every
// provider's inventories) is read once, by the drain command, not once per
// move: the executor starts from the command's read, and each start
// re-reads only the server and the hosts' allocations and services, in
// parallel. Before fb9d5e5, each of the 6 starts re-read the cloud: 7
// reads of the compute API's version document and 7 of each provider's
// inventories with the drain command's own read; before the command kept
// its read, 2 of each. Every move's figures have its pre-request reads and
// its Nova time from its request.
func TestNovaDrainReadsOnce(t *testing.T) {
	t.Parallel()
	var log lockedBuffer
	const hosts, servers = 4, 6
	novaDrainCloudLog(t, hosts, servers, &log)
	dir := t.TempDir()
	mark := len(log.String())
	out := mustRun(t, "host", "drain", "--os-cloud", "nova", "--data-dir", dir, "h01", "--wait")
	waitExecutorGone(t, dir)
	wantContains(t, out, "done — 6 done")
	var versions, inventories, allocations int
	for _, line := range strings.Split(log.String()[mark:], "\n") {
		if !strings.Contains(line, "msg=request ") || !strings.Contains(line, "method=GET") {
			continue
		}
		switch {
		case strings.Contains(line, "path=/compute/v2.1 ") || strings.Contains(line, "path=/compute/v2.1/ "):
			versions++
		case strings.Contains(line, "/inventories "):
			inventories++
		case strings.Contains(line, "/allocations ") && strings.Contains(line, "path=/placement/resource_providers/"):
			allocations++
		}
	}
	// The drain command reads the cloud once; every start reads every
	// provider's allocations.
	if versions > 1 || inventories > hosts {
		t.Errorf("compute version document read %d times, inventories %d times: want at most 1 and %d (one full read, by the command)", versions, inventories, hosts)
	}
	if allocations < (servers+1)*hosts {
		t.Errorf("providers' allocations read %d times: want at least %d (the command's, then every host's at each start)", allocations, (servers+1)*hosts)
	}
	// Under -race the detached executor (this binary) reports races in
	// its log.
	if b, err := os.ReadFile(filepath.Join(dir, "executor.log")); err != nil || strings.Contains(string(b), "DATA RACE") {
		t.Errorf("executor log (%v):\n%s", err, b)
	}
	v := novaPlanJSON(t, dir, 1)
	for i, f := range v.MoveFigs {
		if f.ReadsMS <= 0 || f.NovaSeconds <= 0 {
			t.Errorf("move %d figures %+v: want its reads and its Nova time", i, f)
		}
	}
	if len(v.MoveFigs) != servers {
		t.Errorf("%d move figures, want %d", len(v.MoveFigs), servers)
	}
}

// TestNovaRebalance: keel rebalance plan on a cloud reached as Nova reads
// it through Nova's API and Placement and stores a recommended plan in the
// local store (nothing moves, no executor runs); keel rebalance apply
// approves it and the executor moves each server to its planned
// destination through os-migrateLive, lowering the RAM imbalance.
func TestNovaRebalance(t *testing.T) {
	t.Parallel()
	cloud, ids := novaDrainCloud(t, 3, 6)
	dir := t.TempDir()
	out := mustRun(t, "rebalance", "plan", "--os-cloud", "nova", "--data-dir", dir)
	wantContains(t, out, "ram CV over 3 enabled hosts", "plan 1 recommended: keel rebalance apply 1 --os-cloud nova")
	if release, ok, err := novaplan.Lock(dir); err != nil || !ok {
		t.Fatalf("an executor runs for a recommended plan (lock free %v, %v)", ok, err)
	} else {
		release()
	}
	planned := novaPlanJSON(t, dir, 1)
	if planned.Purpose != records.PlanRebalance || planned.State != records.PlanRecommended || len(planned.Moves) == 0 {
		t.Fatalf("plan %+v", planned.Plan)
	}
	c := cloud.Connect(t)
	ctx := context.Background()
	for _, id := range ids {
		if s, err := c.GetServer(ctx, id); err != nil || s.Host != "h01" {
			t.Fatalf("server %s moved before apply: %+v %v", id, s, err)
		}
	}
	out = mustRun(t, "rebalance", "apply", "1", "--os-cloud", "nova", "--data-dir", dir, "--wait")
	waitExecutorGone(t, dir)
	wantContains(t, out, "plan 1 (rebalance): approved", fmt.Sprintf("done — %d done", len(planned.Moves)))
	v := novaPlanJSON(t, dir, 1)
	if v.State != records.PlanDone {
		t.Fatalf("plan %s: %+v", v.State, v.Progress)
	}
	perHost := map[string]int{}
	for _, id := range ids {
		s, err := c.GetServer(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		perHost[s.Host]++
	}
	for _, mv := range v.Moves {
		s, err := c.GetServer(ctx, mv.Instance)
		if err != nil || mv.Result != mv.Dest || s.Host != mv.Dest {
			t.Errorf("move %s: planned to %s, ended on %s (server on %s, %v)", mv.Instance, mv.Dest, mv.Result, s.Host, err)
		}
	}
	if perHost["h01"] == len(ids) || perHost["h02"] == 0 || perHost["h03"] == 0 {
		t.Errorf("servers per host after the rebalance %v: want some on every host", perHost)
	}
	// A second plan finds the cloud balanced (or nearly): nothing to
	// apply twice.
	out = mustRun(t, "rebalance", "plan", "--os-cloud", "nova", "--data-dir", dir)
	if strings.Contains(out, "plan 1 recommended") {
		t.Errorf("second plan reuses plan 1:\n%s", out)
	}
}
