//go:build scale

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/testenv"
)

// The race test's size; KEEL_RACE_REQUESTS overrides the number of boot
// requests (for a quicker local run).
const (
	raceReplicas     = 3
	raceAgentProcs   = 4  // processes …
	raceHostsPerProc = 50 // … of 50 fake hosts each: 200 hosts
	raceVCPUs        = 40 // per host, allocation ratio 1.0: 8,000 one-vCPU instances fit
	raceRequests     = 10_000
	raceConnsPerRepl = 100 // HTTP connections per replica (requests beyond wait in the client)
)

// TestRaceManyBoots is the scale-out race test (build tag scale; test.sh
// runs it): three replicas on one PostgreSQL and one nats-server, 200 fake
// hosts that hold 8,000 one-vCPU instances, and 10,000 boot requests sent
// at once, spread over the replicas. No host may ever be over capacity
// (the audit and a direct query of the database, whose capacity trigger
// refuses any overcommitting write); every request ends ACTIVE or in ERROR
// with a No valid host fault; the cloud ends full. It prints the conflict
// rate: claims the store refused (a stale generation or a full host, then
// retried on the next host) per placement.
func TestRaceManyBoots(t *testing.T) {
	requests := raceRequests
	if v := os.Getenv("KEEL_RACE_REQUESTS"); v != "" {
		requests, _ = strconv.Atoi(v)
	}
	capacity := raceAgentProcs * raceHostsPerProc * raceVCPUs
	profileDir := os.Getenv("KEEL_RACE_PROFILE")
	t0 := time.Now()
	sc := startScaleCloud(t, raceReplicas, raceAgentProcs, raceHostsPerProc,
		fmt.Sprintf("keel.enable_pprof=%t", profileDir != ""),
		"DEFAULT.update_resources_interval=3600", "DEFAULT.cpu_allocation_ratio=1.0",
		fmt.Sprintf("keel.vcpus=%d", raceVCPUs), "keel.memory_mb=131072",
		// Several schedulers deciding at once: pick among the best few
		// hosts, as Nova advises for several schedulers, so that they
		// rarely pick the same one.
		"filter_scheduler.host_subset_size=25",
		"keel.rpc_timeout=120")
	setup := time.Since(t0)
	sc.replicas[0].call("POST", "/compute/v2.1/flavors", map[string]any{"flavor": map[string]any{"name": "one", "ram": 256, "vcpus": 1, "disk": 1, "id": "1"}}, nil)
	token := sc.replicas[0].login()

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: raceConnsPerRepl, MaxIdleConnsPerHost: raceConnsPerRepl}}
	// About 40 s for 10,000 answers on a quiet machine, 125 s at a load
	// of 20; bounded by go test's -timeout. (A create that read every instance record for its
	// quota fit made it 300 s; KEEL_RACE_PROFILE=dir profiles the
	// replicas.)
	ctx := testenv.Context(t)
	post := func(r *replica, name string) (string, error) {
		body, _ := json.Marshal(map[string]any{"server": map[string]any{"name": name, "flavorRef": "1", "networks": "none"}})
		req, _ := http.NewRequestWithContext(ctx, "POST", r.url+"/compute/v2.1/servers", bytes.NewReader(body))
		req.Header.Set("X-Auth-Token", token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 202 {
			return "", fmt.Errorf("%d %s", resp.StatusCode, data)
		}
		var out struct {
			Server struct{ ID string } `json:"server"`
		}
		if err := json.Unmarshal(data, &out); err != nil || out.Server.ID == "" {
			return "", fmt.Errorf("answer %s: %v", data, err)
		}
		return out.Server.ID, nil
	}

	if profileDir != "" {
		profileReplicas(t, sc, token, profileDir)
	}

	// Every request at once: one goroutine each, round robin over the
	// replicas.
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr sync.Once
	ids := make([]string, requests)
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := post(sc.replicas[i%len(sc.replicas)], fmt.Sprintf("vm%05d", i))
			if err != nil {
				failed.Add(1)
				firstErr.Do(func() { t.Errorf("boot request %d: %v", i, err) })
				return
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	answered := time.Since(start)
	if failed.Load() > 0 {
		t.Fatalf("%d of %d boot requests were not accepted", failed.Load(), requests)
	}

	// Every request ends ACTIVE or ERROR with No valid host.
	c := sc.replicas[len(sc.replicas)-1].cloud
	var active, noValidHost int
	perHost := map[string]int{}
	c.waitFor("every boot to end", 3*time.Minute, func() bool {
		var list struct {
			Servers []map[string]any `json:"servers"`
		}
		if c.tryCall("GET", "/compute/v2.1/servers/detail", nil, &list) != 200 {
			return false
		}
		active, noValidHost = 0, 0
		clear(perHost)
		for _, s := range list.Servers {
			switch s["status"] {
			case "ACTIVE":
				active++
				perHost[fmt.Sprint(s["OS-EXT-SRV-ATTR:host"])]++
			case "ERROR":
				fault, _ := s["fault"].(map[string]any)
				if msg := fmt.Sprint(fault["message"]); !strings.Contains(msg, "No valid host") {
					t.Fatalf("server %v in ERROR without No valid host: %s", s["id"], msg)
				}
				noValidHost++
			}
		}
		return active+noValidHost == requests
	})
	wall := time.Since(start)

	var claimed, conflicts float64
	for _, r := range sc.replicas {
		claimed += r.metric(`keel_scheduler_claims_total{kind="boot",outcome="claimed"}`)
		conflicts += r.metric("keel_scheduler_claim_conflicts_total")
	}
	rate := conflicts / max(claimed, 1)
	fmt.Printf("race test: %d replicas, %d hosts (%d agent processes), capacity %d; %d boot requests at once: %d ACTIVE, %d No valid host; "+
		"%.0f claims committed, %.0f refused by the store and retried on the next host: %.4f conflicts per placement; "+
		"requests answered in %.1f s, all ended in %.1f s (setup %.1f s)\n",
		raceReplicas, raceAgentProcs*raceHostsPerProc, raceAgentProcs, capacity, requests, active, noValidHost,
		claimed, conflicts, rate, answered.Seconds(), wall.Seconds(), setup.Seconds())

	if active > capacity {
		t.Errorf("%d instances ACTIVE in a cloud that holds %d", active, capacity)
	}
	for host, n := range perHost {
		if n > raceVCPUs {
			t.Errorf("host %s runs %d one-vCPU instances, capacity %d", host, n, raceVCPUs)
		}
	}
	if requests >= capacity && active != capacity {
		t.Errorf("%d ACTIVE after %d requests; want the cloud full (%d)", active, requests, capacity)
	}
	if int(claimed) != active {
		t.Errorf("the schedulers committed %.0f claims for %d ACTIVE instances", claimed, active)
	}
	for _, r := range sc.replicas {
		if v := r.audit(); len(v) != 0 {
			t.Fatalf("audit on %s: %s", r.proc.name, strings.Join(v[:min(len(v), 10)], "\n"))
		}
	}
	if over := sc.overCapacityRows(); over != 0 {
		t.Fatalf("%d inventories over capacity in the database", over)
	}
	if rate > 0.1 {
		t.Errorf("%.4f conflicts per placement; the goal is at most 0.1", rate)
	}
}

// profileReplicas fetches a 20-second CPU profile of every replica, from
// now, into dir/replicaN.pprof, and their goroutines 10 s from now into
// dir/replicaN.goroutines (KEEL_RACE_PROFILE=dir; read the profiles with
// go tool pprof).
func profileReplicas(t *testing.T, sc *scaleCloud, token, dir string) {
	fetch := func(i int, r *replica, path, file string) {
		req, _ := http.NewRequest("GET", r.url+path, nil)
		req.Header.Set("X-Auth-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Logf("profile of replica %d: %v", i+1, err)
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Logf("profile of replica %d: %d %s", i+1, resp.StatusCode, data)
			return
		}
		if err := os.WriteFile(fmt.Sprintf("%s/replica%d.%s", dir, i+1, file), data, 0o644); err != nil {
			t.Logf("profile of replica %d: %v", i+1, err)
		}
	}
	for i, r := range sc.replicas {
		go fetch(i, r, "/debug/pprof/profile?seconds=20", "pprof")
		time.AfterFunc(10*time.Second, func() { fetch(i, r, "/debug/pprof/goroutine?debug=1", "goroutines") })
	}
}
