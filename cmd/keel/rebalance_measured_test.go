package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/rebalance"
	"keel/internal/records"
	"keel/internal/testenv"
)

// TestRebalanceByMeasured: three busy guests (two CPUs each) on h01, a
// guest on h02 that claims all of its RAM and uses no CPU, h03 empty.
// keel rebalance plan --by measured moves busy guests off h01, and only
// to h03: h02 measures as idle as h03 (and comes first), but a move
// there would break its claims, and the planner runs the scheduler's
// filters. The table shows both hosts' measured CPU before and after;
// applied, h01 measures less than before.
func TestRebalanceByMeasured(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t)
	busy := records.Flavor{ID: "10", Name: "busy", VCPUs: 2, RAMMB: 1024, DiskGB: 1, ExtraSpecs: map[string]string{"keel:workload": "constant cpu=2"}}
	hog := records.Flavor{ID: "11", Name: "hog", VCPUs: 1, RAMMB: 8192, DiskGB: 1, ExtraSpecs: map[string]string{"keel:workload": "constant cpu=0"}}
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 3, Flavors: []records.Flavor{busy, hog}, Config: func(c *config.Config) {
		c.Metrics.ReportInterval, c.Metrics.SampleInterval = time.Second, time.Second
		c.Keel.VCPUs, c.Keel.MemoryMB = 8, 8192+512 // 512 MiB reserved
	}})
	useCloud(t, cloud)
	st := cloud.Server.Store()
	enable := func(on ...string) {
		t.Helper()
		for _, h := range cloud.Hosts {
			disabled := !strings.Contains(strings.Join(on, ","), h)
			if _, err := st.UpdateService(context.Background(), h, func(s *records.Service) error {
				s.Disabled = disabled
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	enable("h01")
	for _, n := range []string{"busy1", "busy2", "busy3"} {
		mustRun(t, "server", "create", n, "--flavor", "busy", "--wait")
	}
	enable("h02")
	mustRun(t, "server", "create", "hog", "--flavor", "hog", "--wait")
	enable("h01", "h02", "h03")
	for _, n := range []string{"busy1", "busy2", "busy3", "hog"} {
		if want := map[bool]string{true: "h02", false: "h01"}[n == "hog"]; showServer(t, n).Host != want {
			t.Fatalf("%s is on %s, want %s", n, showServer(t, n).Host, want)
		}
	}

	measured := func() map[string]float64 {
		var hs []client.Host
		if err := json.Unmarshal([]byte(mustRun(t, "host", "list", "-f", "json")), &hs); err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, h := range hs {
			if h.Measured != nil && h.Measured.AgeSeconds < 30 {
				out[h.Name] = h.Measured.CPUPercent
			}
		}
		return out
	}
	waitMeasured := func(what string, ok func(map[string]float64) bool) map[string]float64 {
		t.Helper()
		for {
			m := measured()
			if ok(m) {
				return m
			}
			select {
			case <-ctx.Done():
				t.Fatalf("no %s: measured %v", what, m)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	before := waitMeasured("measurement of h01's three busy guests", func(m map[string]float64) bool {
		return len(m) == 3 && m["h01"] >= 0.74
	})

	var js struct {
		Rebalance rebalance.Plan `json:"rebalance"`
		Plan      client.Plan    `json:"plan"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "rebalance", "plan", "--by", "measured", "-f", "json")), &js); err != nil {
		t.Fatal(err)
	}
	rp := js.Rebalance
	if rp.Metric != rebalance.MetricMeasured || rp.Hosts != 3 || len(rp.Moves) == 0 || !(rp.After < rp.Before) {
		t.Fatalf("plan by measured: %+v, want moves over 3 measured hosts lowering the CV", rp)
	}
	for _, m := range rp.Moves {
		if m.Source != "h01" || m.Destination != "h03" || m.Load == nil {
			t.Errorf("move %+v: want h01 → h03 with its load (h02 measures idle but its RAM is claimed)", m)
		}
	}
	// The table: a second plan (superseding the first) shows the load.
	out := mustRun(t, "rebalance", "plan", "--by", "measured")
	t.Logf("keel rebalance plan --by measured:\n%s", out)
	wantContains(t, out, "measured CV over 3 enabled hosts", "FROM CPU", "TO CPU", "h01", "h03")
	if !regexp.MustCompile(`75% → 50%\s+0% → 25%`).MatchString(out) {
		t.Errorf("plan table lacks h01's 75%% → 50%% and h03's 0%% → 25%%:\n%s", out)
	}
	if strings.Contains(out, "h02") {
		t.Errorf("a move to h02, whose RAM is all claimed:\n%s", out)
	}
	id := regexp.MustCompile(`keel rebalance apply (\d+)`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no plan to apply:\n%s", out)
	}
	t.Logf("keel rebalance apply:\n%s", mustRun(t, "rebalance", "apply", id[1], "--wait"))
	waitMeasured("h01 measuring less once a busy guest left", func(m map[string]float64) bool {
		return m["h01"] < before["h01"]-0.2 && m["h03"] > 0.2
	})

	if _, err := run(t, "rebalance", "plan", "--by", "measured", "--metric", "vcpu"); err == nil || !strings.Contains(err.Error(), "--metric vcpu is a claims metric") {
		t.Errorf("--by measured --metric vcpu: %v, want refused", err)
	}
	if _, err := run(t, "rebalance", "plan", "--by", "usage"); err == nil || !strings.Contains(err.Error(), "--by must be claims or measured") {
		t.Errorf("--by usage: %v, want refused", err)
	}
}
