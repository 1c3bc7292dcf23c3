package client_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/scheduler"
)

// syncBuffer is a log sink the server and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReplayAPastPick replays host_subset_size picks from outside: each
// boot's pick seed, read from the server's "scheduled" log line, given to
// the explain endpoint names the host that boot got. Every weigher
// multiplier is 0, so the candidates tie, rank in host-name order whatever
// the boots consumed, and the pick alone (random among all four) decides.
func TestReplayAPastPick(t *testing.T) {
	var log syncBuffer
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 4, Log: &log, Config: func(cfg *config.Config) {
		cfg.FilterScheduler.HostSubsetSize = 4
		for _, o := range scheduler.WeigherOptions() {
			cfg.FilterScheduler.Options[o.Name] = 0
		}
	}})
	ctx := context.Background()
	c := cloud.Connect(t)
	line := regexp.MustCompile(`msg=scheduled .*?kind=boot instance=(\S+) host=(\S+) pick_seed=(\d+)`)
	seeds := map[uint64]bool{}
	for i := range 6 {
		s, err := c.CreateServer(ctx, fmt.Sprintf("pick%d", i), "m1.tiny")
		if err != nil {
			t.Fatal(err)
		}
		if s, err = c.WaitServer(ctx, s.ID, 20*time.Millisecond, func(s client.Server) bool { return s.Status != "BUILD" }); err != nil || s.Status != "ACTIVE" {
			t.Fatalf("boot %d: %+v %v", i, s, err)
		}
		var seed uint64
		for _, m := range line.FindAllStringSubmatch(log.String(), -1) {
			if m[1] == s.ID {
				if m[2] != s.Host {
					t.Fatalf("the log says %s went to %s, the API says %s", s.ID, m[2], s.Host)
				}
				seed, _ = strconv.ParseUint(m[3], 10, 64)
			}
		}
		if seed == 0 {
			t.Fatalf("no scheduled line with a pick seed for %s in the log:\n%s", s.ID, log.String())
		}
		e, err := c.Explain(ctx, client.ExplainRequest{Flavor: "m1.tiny", PickSeed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if e.HostSubsetSize != 4 || e.Candidates != 4 || e.Picked != s.Host {
			t.Fatalf("boot %d went to %s with seed %d; explain with that seed picks %q (%d candidates, subset %d)",
				i, s.Host, seed, e.Picked, e.Candidates, e.HostSubsetSize)
		}
		if seeds[seed] {
			t.Fatalf("boot %d: seed %d again (each decision draws its own)", i, seed)
		}
		seeds[seed] = true
	}
	// Without a seed the explanation names no pick (host_subset_size > 1).
	if e, err := c.Explain(ctx, client.ExplainRequest{Flavor: "m1.tiny"}); err != nil || e.Picked != "" {
		t.Errorf("explain without a seed: picked %q, %v", e.Picked, err)
	}
}
