package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"keel/internal/agent"
	"keel/internal/compute/qemu"
	"keel/internal/config"
	"keel/internal/records"
	"keel/internal/server"
)

// qemuEnds collects the source driver's "qemu migration completed" log
// records: QEMU's own figures for each copy.
type qemuEnds struct {
	slog.Handler
	ch chan map[string]int64
}

func (h *qemuEnds) Enabled(context.Context, slog.Level) bool { return true }
func (h *qemuEnds) Handle(_ context.Context, r slog.Record) error {
	if os.Getenv("KEEL_BENCH_TRACE") != "" {
		fmt.Fprintln(os.Stderr, r.Time.Format("15:04:05.000"), r.Message)
	}
	if r.Message != "qemu migration completed" && r.Message != "incoming qemu ready" {
		return nil
	}
	m := map[string]int64{}
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindInt64 {
			m[a.Key] = a.Value.Int64()
		}
		return true
	})
	h.ch <- m
	return nil
}
func (h *qemuEnds) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *qemuEnds) WithGroup(string) slog.Handler      { return h }

// BenchmarkQEMULiveMigration measures real live migrations of keel's
// guest between two agents with the qemu driver, in one process over the
// real HTTP API, NATS bus and SQLite store, with no bandwidth cap. Per
// guest (64 and 256 MiB; idle, and 16 MiB kept dirty) it reports, per
// migration: api_ms — from the os-migrateLive request to the status
// "completed" read back through the API (polled every 5 ms); qemu_ms —
// QEMU's own total-time; downtime_ms; MiB sent as QEMU counts it and as
// the migration record (what the API shows while in progress) holds it;
// dest_start_ms — starting the destination's QEMU (-incoming defer, until
// its monitor answers), which QEMU's total-time does not count; and
// overhead_ms = api_ms − qemu_ms − dest_start_ms, what the control plane
// adds (API, scheduling, claims, the pre-checks over the bus, the post
// steps, the 5 ms polling). Medians over the migrations; each one's
// figures are logged. KEEL_BENCH_TRACE=1 prints every log line's time.
//
//	go test -run XXX -bench QEMU -benchtime 5x ./bench/
func BenchmarkQEMULiveMigration(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	cfg := config.Default()
	cfg.Keel.DataDir = dir
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg.Keel.Listen = l.Addr().String()
	l.Close()
	cfg.Keel.NATSListen = "127.0.0.1:0"
	cfg.Default.UpdateResourcesInterval = 3600
	quiet := slog.New(slog.DiscardHandler)
	srvLog := quiet
	if os.Getenv("KEEL_BENCH_TRACE") != "" {
		srvLog = slog.New(&qemuEnds{ch: make(chan map[string]int64, 1000)})
	}
	s, err := server.Start(ctx, cfg, srvLog)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, f := range []records.Flavor{{ID: "q64", Name: "q64", VCPUs: 1, RAMMB: 64}, {ID: "q256", Name: "q256", VCPUs: 1, RAMMB: 256}} {
		if _, err := s.Store().CreateFlavor(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
	ends := &qemuEnds{ch: make(chan map[string]int64, 16)}
	for _, host := range []string{"h1", "h2"} {
		qdir := filepath.Join(dir, "agents", host, "qemu")
		defer qemu.KillAll(qdir)
		a, err := agent.Start(ctx, agent.Options{Host: host, DataDir: filepath.Join(dir, "agents", host), BusURL: s.BusURL(),
			Creds: s.Credentials(), Hardware: cfg.HostConfig(""), UpdateResourcesInterval: time.Hour, ReportInterval: 10 * time.Second,
			Driver: "qemu", QEMU: qemu.Config{Downtime: 500 * time.Millisecond}, Log: slog.New(ends)})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Stop()
	}
	pw, _ := os.ReadFile(filepath.Join(dir, "admin-password"))
	c := &apiClient{url: s.URL()}
	c.login(b, string(pw))

	for _, tc := range []struct{ flavor, program string }{
		{"q64", "idle"}, {"q64", "dirty-16"}, {"q256", "idle"}, {"q256", "dirty-16"},
	} {
		b.Run(tc.flavor+"/"+tc.program, func(b *testing.B) {
			var out struct {
				Server struct{ ID string } `json:"server"`
			}
			c.do("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{
				"name": "bench", "flavorRef": tc.flavor, "networks": "none", "metadata": map[string]string{"keel_guest": tc.program}}}, &out)
			id := out.Server.ID
			c.waitActive(b, 1)
			time.Sleep(time.Second) // the guest boots and touches its memory
			var rows []string
			var apiMS, qemuMS, startMS, downMS, sentMiB, recMiB []float64
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if st := c.do("POST", "/compute/v2.1/servers/"+id+"/action", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil); st != 202 {
					b.Fatalf("os-migrateLive: %d", st)
				}
				mig := waitMigrationEnd(b, c, id)
				took := time.Since(start)
				if mig.Status != records.MigrationCompleted {
					b.Fatalf("migration %d ended %s: %s", mig.ID, mig.Status, mig.Error)
				}
				q := map[string]int64{}
				for len(q) < 5 {
					select {
					case m := <-ends.ch:
						for k, v := range m {
							q[k] = v
						}
					case <-time.After(10 * time.Second):
						b.Fatalf("no QEMU figures logged (%v)", q)
					}
				}
				rec, err := s.Store().GetMigration(ctx, mig.ID)
				if err != nil {
					b.Fatal(err)
				}
				apiMS = append(apiMS, float64(took.Microseconds())/1000)
				qemuMS = append(qemuMS, float64(q["total_ms"]))
				startMS = append(startMS, float64(q["start_ms"]))
				downMS = append(downMS, float64(q["downtime_ms"]))
				sentMiB = append(sentMiB, float64(q["ram_transferred"])/(1<<20))
				recMiB = append(recMiB, float64(rec.MemoryProcessedBytes)/(1<<20))
				rows = append(rows, fmt.Sprintf("api %5.0f ms = qemu %4d ms + dest qemu start %4d ms + control plane %4.0f ms; downtime %3d ms; sent %5.1f MiB (record %5.1f)",
					apiMS[len(apiMS)-1], q["total_ms"], q["start_ms"], apiMS[len(apiMS)-1]-float64(q["total_ms"]+q["start_ms"]),
					q["downtime_ms"], sentMiB[len(sentMiB)-1], recMiB[len(recMiB)-1]))
			}
			b.StopTimer()
			b.Logf("%s %s:\n  %s", tc.flavor, tc.program, strings.Join(rows, "\n  "))
			b.ReportMetric(median(apiMS), "api_ms")
			b.ReportMetric(median(qemuMS), "qemu_ms")
			b.ReportMetric(median(downMS), "downtime_ms")
			b.ReportMetric(median(sentMiB), "sent_MiB")
			b.ReportMetric(median(recMiB), "record_MiB")
			b.ReportMetric(median(startMS), "dest_start_ms")
			over := make([]float64, len(apiMS))
			for i := range apiMS {
				over[i] = apiMS[i] - qemuMS[i] - startMS[i]
			}
			b.ReportMetric(median(over), "overhead_ms")
			c.do("DELETE", "/compute/v2.1/servers/"+id, nil, nil)
			for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if c.do("GET", "/compute/v2.1/servers/"+id, nil, nil) == 404 {
					break
				}
			}
		})
	}
}

// waitMigrationEnd polls the API every 5 ms until the instance's newest
// migration has ended, and returns it as the API lists it.
func waitMigrationEnd(b *testing.B, c *apiClient, id string) records.Migration {
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		var out struct {
			Migrations []struct {
				ID     int64                   `json:"id"`
				Status records.MigrationStatus `json:"status"`
			} `json:"migrations"`
		}
		c.do("GET", "/compute/v2.1/os-migrations?instance_uuid="+id, nil, &out)
		if len(out.Migrations) > 0 && records.MigrationTerminal(out.Migrations[0].Status) {
			return records.Migration{ID: out.Migrations[0].ID, Status: out.Migrations[0].Status}
		}
	}
	b.Fatal("no migration ended within 2 minutes")
	return records.Migration{}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
