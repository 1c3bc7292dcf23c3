package e2e

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"keel/internal/testenv"
)

// planState is what the tests read of GET /keel/v1/plans/{id}.
type planState struct {
	ID        int64     `json:"id"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	Hosts     []string  `json:"hosts"`
	Moves     []struct {
		Instance  string `json:"instance"`
		Source    string `json:"source"`
		State     string `json:"state"`
		Result    string `json:"result"`
		Reason    string `json:"reason"`
		Migration int64  `json:"migration"`
		Attempts  int    `json:"attempts"`
		// BytesCopied is what the move's copy has copied so far.
		BytesCopied int64 `json:"bytes_copied"`
	} `json:"moves"`
	Reason   string `json:"reason"`
	Progress struct {
		Done, Running, Left, Failed int
	} `json:"progress"`
}

func (c *cloud) plan(id int64) planState {
	c.t.Helper()
	var out struct {
		Plan planState `json:"plan"`
	}
	if st := c.tryCall("GET", fmt.Sprintf("/keel/v1/plans/%d", id), nil, &out); st != 200 {
		return planState{}
	}
	return out.Plan
}

func (c *cloud) waitPlan(id int64, timeout time.Duration) planState {
	c.t.Helper()
	var p planState
	c.waitFor(fmt.Sprintf("plan %d to end", id), timeout, func() bool {
		p = c.plan(id)
		switch p.State {
		case "done", "failed", "cancelled":
			return true
		}
		return false
	})
	return p
}

// completedMoves counts each instance's completed live migrations.
func (c *cloud) completedMoves() (map[string]int, map[string]bool) {
	c.t.Helper()
	var out struct {
		Migrations []struct {
			InstanceUUID string `json:"instance_uuid"`
			Status       string `json:"status"`
			Dest         string `json:"dest_compute"`
		} `json:"migrations"`
	}
	if st := c.rawCall("GET", "/compute/v2.1/os-migrations", "compute 2.59", nil, &out); st != 200 {
		c.t.Fatalf("os-migrations: %d", st)
	}
	n, dests := map[string]int{}, map[string]bool{}
	for _, m := range out.Migrations {
		if m.Dest != "" {
			dests[m.Dest] = true
		}
		if m.Status == "completed" {
			n[m.InstanceUUID]++
		}
	}
	return n, dests
}

// TestDrainSpreadsEvenly is the drain end to end with real
// processes (keel dev, fake driver, copy time in proportion to RAM):
// every host runs 4 small, 4 medium and 4 large instances; `keel host
// drain` empties drainedHosts of them with --parallel 8 and --wait. After
// it the RAM of the enabled hosts is even (CV ≤ 0.04, max/mean ≤ 1.10),
// the audit finds nothing, and every drained instance moved exactly once.
func TestDrainSpreadsEvenly(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of boots; skipped in -short mode")
	}
	t.Parallel()
	n := drainCloudHosts
	c := &cloud{t: t, dataDir: t.TempDir(), agents: map[string]*proc{}}
	c.server = start(t, "dev", "dev", "--hosts", fmt.Sprint(n), "--data-dir", c.dataDir, "--listen", "127.0.0.1:0",
		"--set", "DEFAULT.max_concurrent_live_migrations=2",
		"--set", "libvirt.live_migration_bandwidth=4096")
	c.readEndpoints()
	c.waitFor("keel dev", 60*time.Second, func() bool {
		var out struct {
			Hypervisors []map[string]any `json:"hypervisors"`
		}
		return fileExists(filepath.Join(c.dataDir, "clouds.yaml")) &&
			c.tryCall("GET", "/compute/v2.1/os-hypervisors", nil, &out) == 200 && len(out.Hypervisors) == n
	})
	onHost := map[string]string{}
	for h := 1; h <= n; h++ {
		host := fmt.Sprintf("h%02d", h)
		for round := 0; round < 4; round++ {
			for _, flavor := range []string{"2", "3", "4"} { // m1.small, m1.medium, m1.large
				var out struct {
					Server struct{ ID string } `json:"server"`
				}
				if st := c.call("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{
					"name": fmt.Sprintf("%s-%d-%s", host, round, flavor), "flavorRef": flavor, "networks": "none",
					"availability_zone": "nova:" + host}}, &out); st != 202 {
					t.Fatalf("boot on %s: %d", host, st)
				}
				onHost[out.Server.ID] = host
			}
		}
	}
	c.waitFor("every instance ACTIVE", 120*time.Second, func() bool {
		var out struct {
			Servers []map[string]any `json:"servers"`
		}
		c.call("GET", "/compute/v2.1/servers/detail?all_tenants=1&status=ACTIVE", nil, &out)
		return len(out.Servers) == 12*n
	})
	var drained []string
	for h := 1; h <= drainedHosts; h++ {
		drained = append(drained, fmt.Sprintf("h%02d", h))
	}
	start := time.Now()
	out := c.keel(append([]string{"host", "drain", "--parallel", "8", "--wait"}, drained...)...)
	t.Logf("keel host drain %s --parallel 8 --wait (%s):\n%s", strings.Join(drained, " "), time.Since(start).Round(time.Millisecond), out)
	if !strings.Contains(out, "plan 1 (drain") || !strings.Contains(out, ": done — ") {
		t.Fatalf("drain output does not end with the plan done:\n%s", out)
	}
	moves, dests := c.completedMoves()
	for id, host := range onHost {
		isDrained := slicesContains(drained, host)
		now := c.hostOf(id)
		switch {
		case isDrained && moves[id] != 1:
			t.Errorf("instance %s of drained %s moved %d times, want once", id, host, moves[id])
		case !isDrained && moves[id] != 0:
			t.Errorf("instance %s of %s (not drained) moved %d times", id, host, moves[id])
		case isDrained && slicesContains(drained, now):
			t.Errorf("instance %s still on drained host %s", id, now)
		}
	}
	for _, h := range drained {
		if dests[h] {
			t.Errorf("a migration went to draining host %s", h)
		}
	}
	// The spread over the enabled hosts, of the RAM the instances use
	// (memory_mb_used less reserved_host_memory_mb).
	var used []float64
	for h, mb := range c.memUsed() {
		if !slicesContains(drained, h) {
			used = append(used, mb-512)
		}
	}
	mean, cv, maxOverMean := spread(used)
	t.Logf("RAM over the %d enabled hosts after the drain: mean %.0f MiB, CV %.3f, max/mean %.3f", len(used), mean, cv, maxOverMean)
	if cv > 0.04 || maxOverMean > 1.10 {
		t.Errorf("RAM CV %.3f (want ≤ 0.04), max/mean %.3f (want ≤ 1.10)", cv, maxOverMean)
	}
	if v := c.audit(); len(v) != 0 {
		t.Errorf("audit: %s", strings.Join(v, "\n"))
	}
	// The drained hosts stay disabled, their reason naming the plan.
	var svcs struct {
		Services []struct {
			Host, Status   string
			DisabledReason string `json:"disabled_reason"`
		} `json:"services"`
	}
	c.call("GET", "/compute/v2.1/os-services?binary=nova-compute", nil, &svcs)
	for _, s := range svcs.Services {
		if slicesContains(drained, s.Host) && (s.Status != "disabled" || s.DisabledReason != "keel drain plan 1") {
			t.Errorf("%s after the drain: %s (%q)", s.Host, s.Status, s.DisabledReason)
		}
	}
	list := c.keel("plan", "list")
	t.Logf("keel plan list:\n%s", list)
	if !strings.Contains(list, "drain") || !strings.Contains(list, "done") {
		t.Errorf("plan list:\n%s", list)
	}
}

// keel runs the keel CLI against the cloud (its clouds.yaml) and returns
// its output; a failure fails the test.
func (c *cloud) keel(args ...string) string {
	c.t.Helper()
	out, err := c.keelErr(args...)
	if err != nil {
		c.t.Fatalf("keel %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (c *cloud) keelErr(args ...string) (string, error) {
	testenv.External(c.t, keelProcesses)
	cmd := exec.Command(keelBin, args...)
	cmd.Env = append(os.Environ(), "OS_CLIENT_CONFIG_FILE="+filepath.Join(c.dataDir, "clouds.yaml"), "OS_CLOUD=keel")
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// spread returns the mean, the coefficient of variation and max/mean.
func spread(v []float64) (mean, cv, maxOverMean float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	var sum, mx float64
	for _, x := range v {
		sum += x
		mx = math.Max(mx, x)
	}
	mean = sum / float64(len(v))
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(v))) / mean, mx / mean
}

// TestDrainRefusalTwoDrainsAndServerKill, with a separate server and five
// agent processes: a drain the rest cannot hold is refused before
// anything moves; then two drains run at once and the server is killed
// with SIGKILL mid-plan and restarted: both plans resume and end done,
// every drained instance moved exactly once, none to a draining host, and
// the audit is clean.
func TestDrainRefusalTwoDrainsAndServerKill(t *testing.T) {
	t.Parallel()
	// service_down_time 20 s: a move whose task the kill left with no
	// migration is cleared by the sweep after it (lifecycle.MoveLost).
	c := faultCloud(t, 5, "keel.memory_mb=24576", "DEFAULT.max_concurrent_live_migrations=2", "DEFAULT.service_down_time=20")
	onHost := map[string]string{}
	var ids []string
	for h := 1; h <= 5; h++ {
		for i := 0; i < 6; i++ {
			id := c.startBoot(fmt.Sprintf("h%d-%d", h, i), "2", fmt.Sprintf("h%d", h))
			onHost[id] = fmt.Sprintf("h%d", h)
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		c.waitFor(id+" ACTIVE", 30*time.Second, func() bool { return c.server_(id)["status"] == "ACTIVE" })
	}

	// 18 small instances on h1–h3; h4 and h5 have room for 10.
	var refusal struct {
		Conflict struct{ Message string } `json:"conflictingRequest"`
	}
	if st := c.call("POST", "/keel/v1/plans", map[string]any{"drain": map[string]any{"hosts": []string{"h1", "h2", "h3"}}}, &refusal); st != 409 {
		t.Fatalf("a drain that cannot fit answered %d, want 409", st)
	}
	t.Logf("refused: %s", refusal.Conflict.Message)
	if !strings.Contains(refusal.Conflict.Message, "MEMORY_MB: need 36864") {
		t.Errorf("refusal does not name the memory shortfall: %s", refusal.Conflict.Message)
	}
	if moves, _ := c.completedMoves(); len(moves) != 0 {
		t.Fatalf("the refused drain moved %v", moves)
	}

	// Two drains at once.
	planIDs := make([]int64, 2)
	var wg sync.WaitGroup
	for i, h := range []string{"h1", "h2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct {
				Plan struct{ ID int64 } `json:"plan"`
			}
			if st := c.call("POST", "/keel/v1/plans", map[string]any{"drain": map[string]any{"hosts": []string{h}, "parallel": 2}}, &out); st != 202 {
				t.Errorf("drain %s: %d", h, st)
			}
			planIDs[i] = out.Plan.ID
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c.waitFor("a move done", 60*time.Second, func() bool {
		return c.plan(planIDs[0]).Progress.Done+c.plan(planIDs[1]).Progress.Done >= 2
	})
	c.server.kill()
	c.startServer()
	for _, id := range planIDs {
		if p := c.waitPlan(id, 120*time.Second); p.State != "done" {
			t.Errorf("plan %d ended %s (%s): %+v", id, p.State, p.Reason, p.Moves)
		}
	}
	// Each drain's first moves may start before the other drain exists:
	// such a move onto the other drain's host is aborted and tried
	// elsewhere when that drain is created, or, too far along to abort,
	// lands and is moved on. What never happens is a migration onto a
	// host after its drain was created; and every drained instance ends
	// off both hosts, moved once, or twice if its first hop predates the
	// second drain and completed.
	created := map[string]time.Time{}
	for _, id := range planIDs {
		p := c.plan(id)
		created[p.Hosts[0]] = p.CreatedAt
	}
	var ms struct {
		Migrations []struct {
			InstanceUUID string `json:"instance_uuid"`
			Status       string `json:"status"`
			Dest         string `json:"dest_compute"`
			CreatedAt    string `json:"created_at"`
		} `json:"migrations"`
	}
	c.rawCall("GET", "/compute/v2.1/os-migrations", "compute 2.59", nil, &ms)
	early := map[string]bool{}
	for _, m := range ms.Migrations {
		drainedAt, ok := created[m.Dest]
		if !ok {
			continue
		}
		at, err := time.Parse("2006-01-02T15:04:05.000000", m.CreatedAt)
		if err != nil {
			t.Fatalf("migration created_at %q: %v", m.CreatedAt, err)
		}
		if !at.Before(drainedAt) {
			t.Errorf("a migration of %s onto %s was created at %s, after its drain (%s)", m.InstanceUUID, m.Dest, at, drainedAt)
		}
		if m.Status == "completed" {
			early[m.InstanceUUID] = true
		}
	}
	moves, _ := c.completedMoves()
	for id, host := range onHost {
		drained := host == "h1" || host == "h2"
		want := map[bool]int{true: 1, false: 0}[drained]
		if early[id] {
			want = 2
		}
		if moves[id] != want {
			t.Errorf("instance %s of %s moved %d times, want %d", id, host, moves[id], want)
		}
		if now := c.hostOf(id); drained && (now == "h1" || now == "h2") {
			t.Errorf("instance %s is on draining host %s", id, now)
		}
	}
	t.Logf("%d instance(s) reached a host before its drain was created and were moved on", len(early))
	c.waitFor("a clean audit", 30*time.Second, func() bool { return len(c.audit()) == 0 })
}

// TestDrainSurvivesDestinationAgentKill: a drain whose move's destination
// agent is killed with SIGKILL mid-copy still ends done: that migration
// rolls back and the move is retried on another host (not the dead one,
// whose service still reads up), every drained instance completes exactly
// one migration, and once the dead agent is back the audit is clean.
func TestDrainSurvivesDestinationAgentKill(t *testing.T) {
	t.Parallel()
	c := faultCloud(t, 4, "keel.memory_mb=24576", "DEFAULT.max_concurrent_live_migrations=2")
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, c.startBoot(fmt.Sprintf("d%d", i), "2", "h1"))
	}
	for _, id := range ids {
		c.waitFor(id+" ACTIVE", 30*time.Second, func() bool { return c.server_(id)["status"] == "ACTIVE" })
	}
	var out struct {
		Plan struct{ ID int64 } `json:"plan"`
	}
	if st := c.call("POST", "/keel/v1/plans", map[string]any{"drain": map[string]any{"hosts": []string{"h1"}, "parallel": 2}}, &out); st != 202 {
		t.Fatalf("drain h1: %d", st)
	}
	id := out.Plan.ID
	// The first move's migration copying: kill its destination's agent.
	var mid int64
	c.waitFor("a drain move running", 30*time.Second, func() bool {
		for _, mv := range c.plan(id).Moves {
			if mv.State == "running" && mv.Migration != 0 && c.migrationStatus(mv.Migration) == "running" {
				mid = mv.Migration
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // inside the 5 s copy
	var dead string
	var ms struct {
		Migrations []struct {
			ID   int64  `json:"id"`
			Dest string `json:"dest_compute"`
		} `json:"migrations"`
	}
	c.call("GET", "/compute/v2.1/os-migrations", nil, &ms)
	for _, m := range ms.Migrations {
		if m.ID == mid {
			dead = m.Dest
		}
	}
	if dead == "" || dead == "h1" {
		t.Fatalf("migration %d's destination %q", mid, dead)
	}
	c.agents[dead].kill()
	t.Logf("killed %s's agent (SIGKILL) while migration %d copied onto it", dead, mid)
	p := c.waitPlan(id, 120*time.Second)
	if p.State != "done" {
		t.Fatalf("plan %d ended %s (%s): %+v", id, p.State, p.Reason, p.Moves)
	}
	if st := c.migrationStatus(mid); st != "failed" && st != "error" {
		t.Errorf("the migration onto the killed %s ended %s, want failed or error", dead, st)
	}
	retried := false
	for _, mv := range p.Moves {
		if mv.Migration != mid && mv.Attempts >= 2 && mv.Result != dead {
			retried = true
		}
		if mv.Result == dead && mv.Attempts >= 2 {
			t.Errorf("move of %s was retried onto the dead %s", mv.Instance, dead)
		}
	}
	if !retried {
		t.Errorf("no move was retried on another host after %s died: %+v", dead, p.Moves)
	}
	moves, _ := c.completedMoves()
	for _, in := range ids {
		if moves[in] != 1 {
			t.Errorf("instance %s moved %d times, want once", in, moves[in])
		}
		if h := c.hostOf(in); h == "h1" {
			t.Errorf("instance %s still on h1", in)
		}
	}
	c.startAgent(dead)
	c.waitFor("a clean audit after the killed agent's return", 30*time.Second, func() bool { return len(c.audit()) == 0 })
}
