package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"keel/internal/client"
	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/testenv"
)

// TestHostListShowsMeasuredCPU: host list shows each host's measured CPU
// beside its claims (CPU BUSY; "measured" in JSON, from keel's state
// endpoint): an idle host measures 0 % busy — measured, not unavailable —
// and the host a busy guest boots on measures it at its next report.
func TestHostListShowsMeasuredCPU(t *testing.T) {
	t.Parallel()
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2, Config: func(c *config.Config) {
		c.Metrics.ReportInterval, c.Metrics.SampleInterval = time.Second, time.Second
		c.Keel.FakeWorkload = "constant cpu=1" // a guest keeps one vCPU busy
	}})
	useCloud(t, cloud)
	hosts := func() []client.Host {
		var hs []client.Host
		if err := json.Unmarshal([]byte(mustRun(t, "host", "list", "-f", "json")), &hs); err != nil {
			t.Fatal(err)
		}
		return hs
	}
	waitFor := func(what string, ok func([]client.Host) bool) []client.Host {
		t.Helper()
		ctx := testenv.Context(t)
		for {
			hs := hosts()
			if ok(hs) {
				return hs
			}
			if ctx.Err() != nil {
				t.Fatalf("no %s: %+v", what, hs)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitFor("measurement of every host", func(hs []client.Host) bool {
		for _, h := range hs {
			if h.Measured == nil {
				return false
			}
		}
		return len(hs) == 2
	})
	out := mustRun(t, "host", "list")
	wantContains(t, out, "CPU BUSY", "BUSY ▕░░░░░░░░░░▏   0%")

	mustRun(t, "server", "create", "busy1", "--flavor", "m1.small", "--wait")
	host := showServer(t, "busy1").Host
	hs := waitFor("measured load on "+host, func(hs []client.Host) bool {
		for _, h := range hs {
			if h.Name == host && h.Measured != nil && h.Measured.CPUPercent > 0 {
				return true
			}
		}
		return false
	})
	for _, h := range hs {
		if h.Name == host {
			// One vCPU busy of the host's CPUs (the fake host's vCPUs).
			if want := 1 / float64(h.VCPUs); h.Measured.CPUPercent < want*0.99 || h.Measured.CPUPercent > want*1.01 || h.Measured.AgeSeconds > 30 {
				t.Errorf("%s measured %+v, want cpu_percent %.4f (one of %d CPUs busy), fresh", host, *h.Measured, want, h.VCPUs)
			}
		}
	}
	if out := mustRun(t, "host", "list"); !strings.Contains(out, host) || strings.Count(out, "BUSY ▕") != 2 {
		t.Errorf("host list:\n%s", out)
	}
}
