package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"keel/internal/testdisk"
)

// The server's side of issue 10's fault matrix, with real processes:
// clients that hang up right after sending, `kill -9` of the server while
// boots are in flight, and the server's data dir filling up with work in
// flight. Each row is seeded (KEEL_FAULT_SEED, default 1; the seed is
// logged) and ends with settledAll: nothing in a non-final state, every
// ACTIVE instance's guest on its host exactly once and its allocation
// there only, no guest without its instance, no migration-consumer
// allocation left, and the server's audit finds nothing.
//
// The default run keeps each row short; the faults build tag runs more
// rounds (see faultRounds).

// faultSeed is the row's seed, from KEEL_FAULT_SEED (default 1).
func faultSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(1)
	if s := os.Getenv("KEEL_FAULT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KEEL_FAULT_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with KEEL_FAULT_SEED=%d)", seed, seed)
	return seed
}

// hangUp sends one authenticated request and closes the connection
// after wait, without reading the answer: an openstackclient that timed
// out, a load balancer that gave up.
func (c *cloud) hangUp(method, path string, body any, wait time.Duration) error {
	addr := c.url[len("http://"):]
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(body)
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nX-Auth-Token: %s\r\nOpenStack-API-Version: compute 2.30\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		method, path, addr, c.login(), len(data), data)
	if _, err := conn.Write([]byte(req)); err != nil {
		conn.Close()
		return err
	}
	time.Sleep(wait)
	return conn.Close()
}

// servers lists every server's id and status.
func (c *cloud) servers() map[string]string {
	c.t.Helper()
	var out struct {
		Servers []struct{ ID, Status string } `json:"servers"`
	}
	if st := c.call("GET", "/compute/v2.1/servers/detail", nil, &out); st != 200 {
		c.t.Fatalf("listing servers: %d", st)
	}
	m := map[string]string{}
	for _, s := range out.Servers {
		m[s.ID] = s.Status
	}
	return m
}

// waitMoves waits until no migration is in a non-final status.
func (c *cloud) waitMoves(timeout time.Duration) {
	c.t.Helper()
	c.waitFor("every migration to end", timeout, func() bool {
		var migs struct {
			Migrations []struct{ Status string } `json:"migrations"`
		}
		if c.tryCall("GET", "/compute/v2.1/os-migrations", nil, &migs) != 200 {
			return false
		}
		for _, m := range migs.Migrations {
			switch m.Status {
			case "completed", "error", "failed", "cancelled", "confirmed", "reverted":
			default:
				return false
			}
		}
		return true
	})
}

// waitBuilt waits until no server is BUILD.
func (c *cloud) waitBuilt(timeout time.Duration) map[string]string {
	c.t.Helper()
	var all map[string]string
	c.waitFor("every boot to end", timeout, func() bool {
		all = c.servers()
		for _, st := range all {
			if st == "BUILD" {
				return false
			}
		}
		return true
	})
	return all
}

// Row 1: clients hang up 0–40 ms after sending boots and live migrations.
// A hang-up changes nothing: every boot the server took ends ACTIVE with
// its "create" action recorded, every move ends, nothing is held twice.
func TestServerFaultClientHangUps(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(faultSeed(t), 1))
	c := faultCloud(t, 3)
	var base []string
	for i := 0; i < 6; i++ {
		base = append(base, c.bootAt(fmt.Sprintf("base%d", i), "1", ""))
	}
	hangUps := 0
	for i := 0; i < 60*faultRounds; i++ {
		wait := time.Duration(rnd.IntN(41)) * time.Millisecond
		var err error
		if i%2 == 0 {
			err = c.hangUp("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": fmt.Sprintf("hung%d", i), "flavorRef": "1", "networks": "none"}}, wait)
		} else {
			id := base[rnd.IntN(len(base))]
			err = c.hangUp("POST", "/compute/v2.1/servers/"+id+"/action", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, wait)
		}
		if err != nil {
			t.Fatalf("hang-up %d: %v", i, err)
		}
		hangUps++
	}
	t.Logf("%d hang-ups (half boots, half live migrations)", hangUps)
	c.waitMoves(90 * time.Second)
	all := c.waitBuilt(60 * time.Second)
	for id, st := range all {
		if st != "ACTIVE" {
			t.Errorf("server %s is %s after the hang-ups, want ACTIVE (the cloud has room); its fault: %v; the server's lines on it:\n%s",
				id, st, c.server_(id)["fault"], c.server.linesWith(id))
		}
		var acts struct {
			Actions []struct{ Action string } `json:"instanceActions"`
		}
		c.call("GET", "/compute/v2.1/servers/"+id+"/os-instance-actions", nil, &acts)
		created := false
		for _, a := range acts.Actions {
			created = created || a.Action == "create"
		}
		if !created {
			t.Errorf("server %s has no create action recorded: %+v", id, acts.Actions)
		}
	}
	if len(all) < len(base)+1 {
		t.Fatalf("only %d servers: no hung-up boot was taken", len(all))
	}
	c.settledAll("h1", "h2", "h3")
}

// Row 2: the server is killed (SIGKILL) at a seeded moment while boots
// are in flight — before, during and after their casts — and restarted.
// Recover resumes every boot from its record: each ends ACTIVE, holding
// exactly its flavor on its host, with its guest there once.
func TestServerFaultKilledDuringBoots(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(faultSeed(t), 2))
	c := faultCloud(t, 2, "keel.fake_spawn_seconds=1")
	resumed := 0
	for round := 0; round < 2*faultRounds; round++ {
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.tryCall("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": fmt.Sprintf("r%d-%d", round, i), "flavorRef": "1", "networks": "none"}}, nil)
			}()
		}
		after := time.Duration(5+rnd.IntN(150)) * time.Millisecond
		time.Sleep(after)
		c.server.kill()
		wg.Wait()
		t.Logf("round %d: server killed %s after the boots were sent", round, after)
		c.startServer()
		all := c.waitBuilt(60 * time.Second)
		for id, st := range all {
			if st != "ACTIVE" {
				t.Errorf("round %d: server %s is %s after the restart", round, id, st)
			}
		}
		c.settledAll("h1", "h2")
		if logHas(c.server, "msg=resuming flow=boot ", 200*time.Millisecond) {
			resumed++
		}
	}
	if resumed == 0 {
		t.Fatal("no round's restart resumed a boot: the kill never landed inside one (tune the delays)")
	}
}

// Row 5: the server's data dir is a small tmpfs that fills while boots
// and moves are in flight, then is freed. Writes fail cleanly meanwhile;
// nothing the agents reported is lost (their reports wait on their disks
// until a server commits them), and the sweep resumes what stalled: every
// boot and move ends, nothing is held twice. Needs root.
func TestServerFaultDataDirFills(t *testing.T) {
	t.Parallel()
	disk := testdisk.Mount(t, 64<<10)
	agentsDir := t.TempDir() // off the full disk
	c := &cloud{t: t, dataDir: disk.Dir, agents: map[string]*proc{}, sets: []string{"libvirt.live_migration_bandwidth=400", "keel.rpc_timeout=4",
		"DEFAULT.update_resources_interval=1", "DEFAULT.report_interval=1", "DEFAULT.service_down_time=6", "keel.fake_spawn_seconds=2"}}
	if err := os.Symlink(agentsDir, filepath.Join(disk.Dir, "agents")); err != nil {
		t.Fatal(err)
	}
	c.startServer()
	for _, h := range []string{"h1", "h2", "h3"} {
		c.startAgent(h)
	}
	c.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.tiny", "ram": 512, "vcpus": 1, "disk": 1, "id": "1"}}, nil)
	var moving []string
	for i := 0; i < 3; i++ {
		moving = append(moving, c.bootAt(fmt.Sprintf("m%d", i), "1", ""))
	}
	for i := 0; i < 3; i++ {
		c.startBoot(fmt.Sprintf("b%d", i), "1", "")
	}
	for _, id := range moving {
		c.tryCall("POST", "/compute/v2.1/servers/"+id+"/action", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil)
	}
	disk.Fill()
	for i := 0; i < 3; i++ { // asked while the disk is full: refused or taken, never half done
		c.tryCall("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": fmt.Sprintf("f%d", i), "flavorRef": "1", "networks": "none"}}, nil)
	}
	if !logHas(c.server, "disk is full", 4*time.Second) {
		t.Fatal("the server never hit the full disk: the row tests nothing")
	}
	time.Sleep(2 * time.Second)
	disk.Free()
	c.waitMoves(90 * time.Second)
	all := c.waitBuilt(90 * time.Second)
	t.Logf("after the disk filled and was freed: %v", all)
	c.settledAll("h1", "h2", "h3")
}
