package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// repeatedCallLine is what a bus connection logs when it answers a call it
// had already handled (same request id) without running it again.
const repeatedCallLine = "repeated call answered without running it again"

// TestExternalNATSRestart runs a keel server and three hosts (one agent
// process) on Debian's nats-server, restarts nats-server (SIGKILL, then
// start) while live migrations are in their one-second
// pre_live_migration step and boots are coming in, and checks that every
// boot ends ACTIVE, every migration completes, and nothing ran twice:
// every guest exists on exactly its instance's host, the store's invariants
// hold, and the calls whose answers the restart lost were answered again
// from the agents' memory of their first run.
func TestExternalNATSRestart(t *testing.T) {
	t.Parallel()
	nats := startNATS(t, 1)
	repeats := runRestartScenario(t, nats, func() {
		nats.nodes[0].kill()
		time.Sleep(300 * time.Millisecond)
		nats.nodes[0].start()
	})
	// Both sides lost the connection while pre_live_migration ran: its
	// answer was lost, and the conductor's repeat was answered from the
	// first run.
	if repeats < 1 {
		t.Errorf("no call was repeated across the restart; want the in-flight pre_live_migration repeated and answered from its first run")
	}
}

// TestNATSClusterFailover is the same on a three-node NATS cluster: every
// process is given all three URLs, and the node the server is connected to
// is killed for good mid-run; clients fail over to the others.
func TestNATSClusterFailover(t *testing.T) {
	t.Parallel()
	nats := startNATS(t, 3)
	runRestartScenario(t, nats, func() {
		// Kill the first node: the server and the agents, given the URLs
		// in the same order, are (most likely) connected to it. Whichever
		// they use, the cluster must carry on.
		nats.nodes[0].kill()
	})
}

// runRestartScenario runs the scenario, calling disrupt mid-run, and
// returns how many calls were answered from a first run's memory.
func runRestartScenario(t *testing.T, nats *natsCluster, disrupt func()) int {
	common := []string{"--nats-url", nats.URLs(), "--nats-credentials", nats.credsFile,
		"--set", "DEFAULT.update_resources_interval=3600", "--set", "keel.fake_step_seconds=1",
		"--set", "keel.fake_spawn_seconds=1"}
	r := startReplica(t, "server", "", common...)
	agents := start(t, "agents", append([]string{"agent", "--host", "h", "--hosts", "3",
		"--data-dir", filepath.Join(r.dataDir, "agents")}, common...)...)
	r.waitFor("3 hypervisors up", 30*time.Second, func() bool { return r.hypervisorsUp() == 3 })
	r.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "m1.small", "ram": 2048, "vcpus": 1, "disk": 20, "id": "2"}}, nil)
	var ids []string
	for i := range 6 {
		ids = append(ids, r.boot(fmt.Sprintf("vm%d", i), "2"))
	}

	// Mid-run: six migrations and six boots at once.
	var migs []int64
	for _, id := range ids {
		migs = append(migs, r.migrate(id, ""))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bootErrs []string
	late := make([]string, 6)
	for i := range late {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct {
				Server struct{ ID string } `json:"server"`
			}
			st := r.tryCall("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": fmt.Sprintf("late%d", i), "flavorRef": "2", "networks": "none"}}, &out)
			mu.Lock()
			defer mu.Unlock()
			if st != 202 {
				bootErrs = append(bootErrs, fmt.Sprintf("boot late%d: %d", i, st))
			}
			late[i] = out.Server.ID
		}()
	}
	// Disrupt the bus while a pre_live_migration (1 s on the agent) is in
	// flight.
	r.waitFor("a migration preparing", 30*time.Second, func() bool {
		for _, m := range migs {
			if r.migrationStatus(m) == "preparing" {
				return true
			}
		}
		return false
	})
	disrupt()
	wg.Wait()
	if len(bootErrs) > 0 {
		t.Fatalf("boots during the disruption: %s", strings.Join(bootErrs, "; "))
	}
	for _, m := range migs {
		if st := r.waitMigration(m, 90*time.Second); st != "completed" {
			t.Errorf("migration %d ended %s, want completed", m, st)
		}
	}
	for _, id := range ids {
		r.waitSettled(id)
	}
	for _, id := range late {
		r.waitFor("server "+id+" ACTIVE", 60*time.Second, func() bool { return r.server_(id)["status"] == "ACTIVE" })
	}
	if v := r.audit(); len(v) != 0 {
		t.Fatalf("audit: %s", strings.Join(v, "\n"))
	}

	// Every instance runs on exactly its host, once; no other guest exists.
	where := map[string][]string{}
	for i := 1; i <= 3; i++ {
		host := fmt.Sprintf("h-%d", i)
		data, err := os.ReadFile(filepath.Join(r.dataDir, "agents", host, "guests.json"))
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Guests []struct{ UUID, State string } `json:"guests"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatalf("%s guests.json: %v", host, err)
		}
		for _, g := range st.Guests {
			where[g.UUID] = append(where[g.UUID], host+":"+g.State)
		}
	}
	all := append(append([]string{}, ids...), late...)
	for _, id := range all {
		want := r.hostOf(id) + ":running"
		if got := where[id]; len(got) != 1 || got[0] != want {
			var ms struct {
				Migrations []map[string]any `json:"migrations"`
			}
			r.call("GET", "/compute/v2.1/os-migrations?instance_uuid="+id, nil, &ms)
			t.Errorf("instance %s: guests %v, want exactly [%s]; its migrations: %v", id, got, want, ms.Migrations)
		}
		delete(where, id)
	}
	if len(where) != 0 {
		t.Errorf("guests of no instance: %v", where)
	}
	repeats := countInLogs(repeatedCallLine, agents, r.proc)
	t.Logf("%d calls repeated after the bus lost their answers, each answered from the first run", repeats)
	return repeats
}
