//go:build faults

package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAgentFaultLoop is the longer agent-side fault matrix (build tag
// faults; not in the default ./test.sh): for each seed, rounds of boots
// and live migrations under one fault each, drawn from the seed — an
// agent killed (-9) and restarted at once or after a while, an agent
// stopped (SIGSTOP) past the RPC timeout then resumed, an abort whose
// source is stopped and then killed, the server killed during moves —
// each round followed by settledAll. It logs the figures (rounds × seeds,
// boots, moves, outcomes).
//
//	go test -tags faults -count=1 -v -run TestAgentFaultLoop ./internal/e2e/
//	KEEL_FAULT_SEEDS=7,8 KEEL_FAULT_ROUNDS=10 go test -tags faults …
//	KEEL_FAULT_SEED=7 go test -tags faults …   (one seed)
func TestAgentFaultLoop(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if s := os.Getenv("KEEL_FAULT_SEED"); s != "" {
		// One seed, as the server-side rows replay one.
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("KEEL_FAULT_SEED: %v", err)
		}
		seeds = []uint64{n}
	}
	if s := os.Getenv("KEEL_FAULT_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("KEEL_FAULT_SEEDS: %v", err)
			}
			seeds = append(seeds, n)
		}
	}
	rounds := 5
	if s := os.Getenv("KEEL_FAULT_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("KEEL_FAULT_ROUNDS: %q", s)
		}
		rounds = n
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			faultLoop(t, seed, rounds)
		})
	}
}

func faultLoop(t *testing.T, seed uint64, rounds int) {
	rng := rand.New(rand.NewPCG(seed, 0x6b65656c))
	hosts := []string{"h1", "h2", "h3"}
	c := faultCloud(t, len(hosts), "keel.fake_spawn_seconds=1", "keel.fake_step_seconds=1")
	var ids []string
	outcomes := map[string]int{}
	faults := map[string]int{}
	boots, nmoves := 0, 0
	for r := 0; r < rounds; r++ {
		for i := 0; i < 2; i++ {
			ids = append(ids, c.startBoot(fmt.Sprintf("vm%d-%d", r, i), []string{"1", "2"}[rng.IntN(2)], ""))
			boots++
		}
		var active []string
		for _, id := range ids {
			if s := c.server_(id); s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil {
				active = append(active, id)
			}
		}
		var moves []int64
		var moved []string
		for i := 0; i < 2 && len(active) > 0; i++ {
			k := rng.IntN(len(active))
			id := active[k]
			active = append(active[:k], active[k+1:]...)
			moves = append(moves, c.migrate(id, ""))
			moved = append(moved, id)
		}
		victim := hosts[rng.IntN(len(hosts))]
		kind := []string{"kill", "kill-later", "stop", "abort-stop-kill", "server"}[rng.IntN(5)]
		faults[kind]++
		time.Sleep(time.Duration(rng.IntN(2500)) * time.Millisecond)
		switch kind {
		case "kill":
			c.restart(victim)
		case "kill-later":
			c.killAndLater(victim, time.Duration(2+rng.IntN(5))*time.Second)
		case "stop":
			c.signal(victim, syscall.SIGSTOP)
			time.Sleep(time.Duration(5+rng.IntN(3)) * time.Second)
			c.signal(victim, syscall.SIGCONT)
		case "abort-stop-kill":
			if len(moves) == 0 {
				break
			}
			src := c.hostOf(moved[0])
			c.signal(src, syscall.SIGSTOP)
			c.tryCall("DELETE", fmt.Sprintf("/compute/v2.1/servers/%s/migrations/%d", moved[0], moves[0]), nil, nil)
			time.Sleep(5 * time.Second)
			c.restart(src)
		case "server":
			c.restart("server")
		}
		for _, mid := range moves {
			outcomes[c.waitMigration(mid, 60*time.Second)]++
			nmoves++
		}
		c.settledAll(hosts...)
		t.Logf("seed %d round %d: %s on %s; settled", seed, r, kind, victim)
	}
	var status = map[string]int{}
	for _, id := range ids {
		status[fmt.Sprint(c.server_(id)["status"])]++
	}
	t.Logf("seed %d: %d rounds, faults %v, %d boots (%v), %d moves (%v), 0 violations, 0 stuck records",
		seed, rounds, faults, boots, status, nmoves, outcomes)
}
