package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/sim/scenario"
)

// seedWith is the seed scenario with extra lines appended (top-level
// keys must go in front: use seedPrefixed).
func seedWith(t *testing.T, top, extra string) *scenario.Scenario {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "scenarios", "seed-hour.toml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if top != "" {
		text = strings.Replace(text, "[scheduler]\n", "[scheduler]\n"+top+"\n", 1)
	}
	sc, err := scenario.Parse("seed-hour.toml", []byte(text+"\n"+extra+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func reportJSON(t *testing.T, rep *Report) []byte {
	t.Helper()
	for i := range rep.Policies {
		rep.Policies[i].WallSeconds = 0
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// With service_down_time at its documented default the simulated hosts
// heartbeat and stay up: the run is the one without the liveness check.
func TestHeartbeatsKeepLiveHostsUp(t *testing.T) {
	var outs [][]byte
	for _, top := range []string{"service_down_time = 60", "service_down_time = 0", "service_down_time = 5"} {
		rep, err := Run(context.Background(), seedWith(t, top, ""), Options{Parallel: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rep.Policies {
			if top != "service_down_time = 5" && (p.Migrations != 24 || p.FailedMigrations != 0) {
				t.Errorf("%s, %s: %d migrations, %d failed; want 24 and 0", top, p.Policy, p.Migrations, p.FailedMigrations)
			}
		}
		outs = append(outs, reportJSON(t, rep))
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Errorf("service_down_time 60 gives another result than 0:\n%s\n%s", outs[0], outs[1])
	}
	// 5 s is below report_interval (10 s): hosts are down between
	// reports, as in the services. The drain's migrations start at
	// t=30+60k, when every host's last report (t=30+60k-10: the report at
	// the same instant comes after the drain, which was scheduled first)
	// is 10 s old, so each finds no host.
	if !bytes.Contains(outs[2], []byte(`"failed_migrations": 24`)) {
		t.Errorf("service_down_time 5 (below report_interval 10): want all 24 migrations failed, got\n%s", outs[2])
	}
}

// A host whose heartbeats stop is down service_down_time after its last
// report: under legacy every migration would go to h03–h05 (the hosts
// that look best); with their reports stopped at t=0 only the one at
// t=30 (their last report, t=0, is 30 s old) may, and when they report
// again at t=900 they take migrations again.
func TestStoppedHeartbeatsTakeHostsDown(t *testing.T) {
	best := []string{"h03", "h04", "h05"}
	toBest := func(p PolicyReport) int {
		n := 0
		for _, h := range best {
			n += p.Destinations[h]
		}
		return n
	}
	stop := `[[event]]
at = 0
stop_heartbeats = ["h03", "h04", "h05"]`
	rep, err := Run(context.Background(), seedWith(t, "", stop), Options{Policies: []string{"legacy"}})
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Policies[0]
	if p.Migrations != 24 || p.FailedMigrations != 0 {
		t.Fatalf("%d migrations, %d failed; want 24, 0", p.Migrations, p.FailedMigrations)
	}
	if n := toBest(p); n > 1 {
		t.Errorf("%d migrations went to hosts whose heartbeats stopped at t=0 (destinations %v); want at most the one at t=30", n, p.Destinations)
	}

	restart := stop + `
[[event]]
at = 900
start_heartbeats = ["h03", "h04", "h05"]`
	rep, err = Run(context.Background(), seedWith(t, "", restart), Options{Policies: []string{"legacy"}})
	if err != nil {
		t.Fatal(err)
	}
	// From t=900 on, 9 of the 24 migrations start (t=930 … 1410) and
	// the legacy view sends them to the hosts it thinks best again.
	if n := toBest(rep.Policies[0]); n < 9 {
		t.Errorf("%d migrations to h03–h05 after their heartbeats resumed (destinations %v); want at least 9", n, rep.Policies[0].Destinations)
	}
}

// "Initially best" is measured before anything runs: a drain starting at
// t=0 does not give one policy another host set than the others.
func TestInitiallyBestBeforeAnyEvent(t *testing.T) {
	sc := seedWith(t, "", "")
	sc.Drains[0].Start = 0
	sc.Drains[0].Interval = 0
	sc.Drains[0].InFlight = 4
	rep, err := Run(context.Background(), sc, Options{Parallel: true})
	if err != nil {
		t.Fatal(err)
	}
	first := strings.Join(rep.Policies[0].InitiallyBest, ",")
	for _, p := range rep.Policies {
		if got := strings.Join(p.InitiallyBest, ","); got != first || got != "h03,h04,h05" {
			t.Errorf("%s: initially best %s, want h03,h04,h05 for every policy", p.Policy, got)
		}
	}
}

// A very low rate or a huge Poisson draw ends the stream; it does not
// wrap to a negative delay and boot forever at t=0.
func TestLowRateEndsTheStream(t *testing.T) {
	for _, poisson := range []string{"false", "true"} {
		sc := seedWith(t, "", "[[workload]]\nkind = \"boot\"\nrate = 1e-12\npoisson = "+poisson)
		done := make(chan struct{})
		var rep *Report
		var err error
		go func() {
			defer close(done)
			rep, err = Run(context.Background(), sc, Options{Policies: []string{"claim"}})
		}()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("poisson=%s: a workload of rate 1e-12 did not end", poisson)
		}
		if err != nil {
			t.Fatal(err)
		}
		if b := rep.Policies[0].Boots; b != 1 {
			t.Errorf("poisson=%s: %d boots, want 1 (at t=0; the next is 1e12 s away)", poisson, b)
		}
	}
}
