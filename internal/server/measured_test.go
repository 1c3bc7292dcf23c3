package server_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/client/clienttest"
	"keel/internal/config"
	"keel/internal/server"
	"keel/internal/testenv"
)

// TestMeasuredUsageMetrics: every agent reports its measured usage at
// start (then on its own cadence), and /metrics serves it per host under
// openstack-exporter-style names: an idle fake host measures cpu.percent
// 0 and cpu.idle.percent 1 — measured, not absent — and its memory (keel's
// gauges, bytes) all available: its total is the host's memory.
func TestMeasuredUsageMetrics(t *testing.T) {
	cloud := clienttest.Start(t, clienttest.Options{Hosts: 2})
	base := cloud.Server.URL()
	admin := login(t, base, "admin", cloud.Password)
	waitCtx := testenv.Context(t)
	for {
		text := scrape(t, base, admin.token)
		missing := ""
		for _, h := range []string{"h01", "h02"} {
			hv := fmt.Sprintf(`aggregates="",availability_zone="nova",hostname=%q`, h)
			if _, ok := gaugeValue(text, "openstack_nova_cpu_frequency", hv); !ok {
				missing = h
				break
			}
			mem := float64(cloud.Config.HostConfig("").MemoryMB) * (1 << 20)
			for name, want := range map[string]float64{"openstack_nova_cpu_percent": 0, "openstack_nova_cpu_idle_percent": 1, "openstack_nova_cpu_frequency": 2400,
				"keel_hypervisor_memory_total_bytes": mem, "keel_hypervisor_memory_available_bytes": mem} {
				if got, ok := gaugeValue(text, name, hv); !ok || got != want {
					t.Errorf("%s{%s} = %v (found %v), want %v", name, hv, got, ok, want)
				}
			}
			if age, ok := gaugeValue(text, "openstack_nova_metrics_age_seconds", hv); !ok || age < 0 || age > 60 {
				t.Errorf("metrics age of %s: %v %v", h, age, ok)
			}
		}
		if missing == "" {
			return
		}
		if waitCtx.Err() != nil {
			t.Fatalf("no measured usage of %s in /metrics before the test's time ran out:\n%s", missing, grep(text, "openstack_nova_cpu"))
		}
		// The agents' first report is asynchronous at their start: poll.
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStartRefusesUnreportableRequiredMetric: a server whose
// MetricsWeigher must weigh a metric no host will report (required =
// true) refuses to start, saying which metric and what to do, before it
// creates its data dir.
func TestStartRefusesUnreportableRequiredMetric(t *testing.T) {
	cfg, _, err := config.Parse("keel.conf", []byte("[metrics]\nweight_setting = cpu.user.time=1.0\nrequired = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	cfg.Keel.DataDir = dir
	s, err := server.Start(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		s.Close()
		t.Fatal("the server started")
	}
	for _, want := range []string{"keel.conf:2: [metrics] weight_setting: no host will report cpu.user.time", "set [metrics] required = false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("the refused server made its data dir: %v", serr)
	}
}
