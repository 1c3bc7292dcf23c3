package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"keel/internal/store/postgres/pgtest"
	"keel/internal/testenv"
)

// scaleCloud is several keel server replicas on one PostgreSQL database and
// one NATS, with agent processes each running several fake hosts.
type scaleCloud struct {
	t        *testing.T
	replicas []*replica
	agents   []*proc
	dbURL    string
	nats     *natsCluster
}

// startScaleCloud starts a throw-away PostgreSQL cluster and database, a
// nats-server, n replicas (the first creates users and the token key, the
// others get copies), and agentProcs agent processes of hostsPerProc hosts
// each (named a<i>-<j>), and waits until every host is up. sets are --set
// options given to every process.
func startScaleCloud(t *testing.T, n, agentProcs, hostsPerProc int, sets ...string) *scaleCloud {
	t.Helper()
	testenv.External(t, "PostgreSQL and nats-server (Debian's postgresql, nats-server)")
	ctx := testenv.Context(t)
	pg, err := pgtest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	db, err := pg.CreateDatabase(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	sc := &scaleCloud{t: t, dbURL: pg.URL(db) + "&pool_max_conns=8", nats: startNATS(t, 1)}
	common := []string{"--nats-url", sc.nats.URLs(), "--nats-credentials", sc.nats.credsFile, "--set", "keel.db=" + sc.dbURL}
	for _, s := range sets {
		common = append(common, "--set", s)
	}
	first := ""
	for i := range n {
		r := startReplica(t, fmt.Sprintf("replica%d", i+1), first, common...)
		if first == "" {
			first = r.dataDir
		}
		sc.replicas = append(sc.replicas, r)
	}
	for i := range agentProcs {
		name := fmt.Sprintf("a%d", i+1)
		sc.agents = append(sc.agents, start(t, "agents-"+name, append([]string{"agent", "--host", name,
			"--hosts", fmt.Sprint(hostsPerProc), "--data-dir", filepath.Join(first, "agents", name)}, common...)...))
	}
	want := agentProcs * hostsPerProc
	sc.replicas[0].waitFor(fmt.Sprintf("%d hypervisors up", want), 2*time.Minute, func() bool {
		return sc.replicas[0].hypervisorsUp() == want
	})
	return sc
}

// overCapacityRows counts, straight from the database, the inventories
// whose usage exceeds their capacity, and checks that the store's capacity
// trigger is installed.
func (sc *scaleCloud) overCapacityRows() int {
	sc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, strings.Replace(sc.dbURL, "&pool_max_conns=8", "", 1))
	if err != nil {
		sc.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var triggers int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'inventories_within_capacity'`).Scan(&triggers); err != nil || triggers != 1 {
		sc.t.Fatalf("capacity trigger: %d installed (%v), want 1", triggers, err)
	}
	var over int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM inventories
		WHERE used > floor((total - reserved)::double precision * allocation_ratio)`).Scan(&over); err != nil {
		sc.t.Fatal(err)
	}
	return over
}

// TestReplicasOnPostgres runs three keel server replicas on one PostgreSQL
// database and one nats-server, with four hosts that take two instances
// each, and sends each request to a different replica: boots spread over
// all three fill the cloud exactly (each replica's scheduler sees the
// others' claims through the store's change stream) and the next is
// refused with No valid host; a live migration asked of one replica is
// seen completed by another; a list on the third shows everything; a
// token from one is accepted by the others; a user made through one logs
// in through another, and a token revoked through one is refused by all.
func TestReplicasOnPostgres(t *testing.T) {
	t.Parallel()
	sc := startScaleCloud(t, 3, 1, 4, "DEFAULT.update_resources_interval=3600", "DEFAULT.cpu_allocation_ratio=1.0",
		"keel.vcpus=2", "keel.fake_step_seconds=0")
	a, b, c := sc.replicas[0], sc.replicas[1], sc.replicas[2]
	a.call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "one", "ram": 512, "vcpus": 1, "disk": 1, "id": "1"}}, nil)
	var ids []string
	for i := range 8 {
		r := sc.replicas[i%3]
		ids = append(ids, r.boot(fmt.Sprintf("vm%d", i), "1"))
	}
	// One boot at a time, each on another replica: had a replica decided on
	// a view that missed the others' claims, the store would have refused
	// its claim (a stale generation), counted as a conflict.
	for _, r := range sc.replicas {
		if n := r.metric("keel_scheduler_claim_conflicts_total"); n != 0 {
			t.Errorf("%s: %v claims refused; want 0 (its view follows the others' claims)", r.proc.name, n)
		}
	}
	perHost := map[string]int{}
	for _, id := range ids {
		perHost[c.hostOf(id)]++
	}
	for host, n := range perHost {
		if n != 2 {
			t.Errorf("host %s holds %d instances, want 2 (per-host spread %v)", host, n, perHost)
		}
	}
	// The cloud is full: the ninth boot, on any replica, is refused.
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	if st := b.call("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": "vm8", "flavorRef": "1", "networks": "none"}}, &out); st != 202 {
		t.Fatalf("ninth boot: %d", st)
	}
	s := c.server_(out.Server.ID)
	if fault, _ := s["fault"].(map[string]any); s["status"] != "ERROR" || !strings.Contains(fmt.Sprint(fault["message"]), "No valid host") {
		t.Fatalf("ninth boot on a full cloud: status %v fault %v; want ERROR with No valid host", s["status"], s["fault"])
	}
	a.call("DELETE", "/compute/v2.1/servers/"+out.Server.ID, nil, nil)
	// Free one slot (through C), migrate into it (through B), watch it on A.
	c.call("DELETE", "/compute/v2.1/servers/"+ids[7], nil, nil)
	c.waitFor("the deleted server gone", 20*time.Second, func() bool {
		return c.tryCall("GET", "/compute/v2.1/servers/"+ids[7], nil, nil) == 404
	})
	src := c.hostOf(ids[0])
	mid := b.migrate(ids[0], "")
	if st := a.waitMigration(mid, 60*time.Second); st != "completed" {
		t.Fatalf("migration %d asked of replica B ended %s (seen on A)", mid, st)
	}
	a.waitSettled(ids[0])
	if dst := a.hostOf(ids[0]); dst == src {
		t.Fatalf("instance still on %s after its migration", src)
	}
	var list struct {
		Servers []map[string]any `json:"servers"`
	}
	c.call("GET", "/compute/v2.1/servers/detail", nil, &list)
	active := 0
	for _, s := range list.Servers {
		if s["status"] == "ACTIVE" {
			active++
		}
	}
	if active != 7 {
		t.Errorf("replica C lists %d ACTIVE servers, want 7", active)
	}
	for _, r := range sc.replicas {
		if v := r.audit(); len(v) != 0 {
			t.Fatalf("audit on %s: %s", r.proc.name, strings.Join(v, "\n"))
		}
	}
	if over := sc.overCapacityRows(); over != 0 {
		t.Fatalf("%d inventories over capacity in the database", over)
	}
	checkQuotaRace(t, sc)
	checkSharedIdentity(t, sc)
}
