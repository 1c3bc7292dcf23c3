package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"keel/internal/agent"
	"keel/internal/config"
	"keel/internal/records"
	"keel/internal/server"
)

// BenchmarkServicesThroughTheAPI measures keel's services end to end, in
// one process but over the real HTTP API, the real NATS bus and SQLite:
// `keel dev --hosts 1000` with an instant fake spawn and (nearly) zero-time
// copies. It reports boots per second with 16 clients booting at once,
// live migrations per second with 16 at once, and how many completed
// migrations did not yet show both hosts' usage in os-hypervisors at the
// moment their status read "completed" (the goal is 0).
func BenchmarkServicesThroughTheAPI(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	cfg := config.Default()
	cfg.Keel.DataDir = dir
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg.Keel.Listen = l.Addr().String()
	l.Close()
	cfg.Keel.NATSListen = "127.0.0.1:0"
	cfg.Libvirt.LiveMigrationBandwidth = 1 << 30
	cfg.Default.UpdateResourcesInterval = 3600
	cfg.FilterScheduler.HostSubsetSize = 3
	quiet := slog.New(slog.DiscardHandler)
	s, err := server.Start(ctx, cfg, quiet)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, f := range []records.Flavor{{ID: "1", Name: "m1.tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1}} {
		if _, err := s.Store().CreateFlavor(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
	const hosts = 1000
	t0 := time.Now()
	var agents []*agent.Agent
	for i := 1; i <= hosts; i++ {
		host := fmt.Sprintf("h%04d", i)
		hw := cfg.HostConfig("")
		a, err := agent.Start(ctx, agent.Options{Host: host, DataDir: filepath.Join(dir, "agents", host), BusURL: s.BusURL(),
			Creds: s.Credentials(), Hardware: hw, UpdateResourcesInterval: time.Hour, ReportInterval: 10 * time.Second,
			BandwidthMiBps: float64(cfg.Libvirt.LiveMigrationBandwidth), Log: quiet})
		if err != nil {
			b.Fatal(err)
		}
		agents = append(agents, a)
	}
	defer func() {
		for _, a := range agents {
			a.Stop()
		}
	}()
	b.Logf("%d agents registered in %.1f s", hosts, time.Since(t0).Seconds())
	pw, _ := os.ReadFile(filepath.Join(dir, "admin-password"))
	c := &apiClient{url: s.URL()}
	c.login(b, string(pw))

	const n = 2000
	ids := make([]string, n)
	var next atomic.Int64
	run := func(workers int, f func(i int)) time.Duration {
		next.Store(0)
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					f(i)
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	bootTime := run(16, func(i int) {
		var out struct {
			Server struct{ ID string } `json:"server"`
		}
		if st := c.do("POST", "/compute/v2.1/servers", map[string]any{"server": map[string]any{"name": fmt.Sprint("vm", i), "flavorRef": "1", "networks": "none"}}, &out); st != 202 {
			b.Errorf("boot %d: %d", i, st)
		}
		ids[i] = out.Server.ID
	})
	// Every boot is ACTIVE once its build report arrives.
	c.waitActive(b, n)
	b.ReportMetric(float64(n)/bootTime.Seconds(), "boots/s")

	var notVisible atomic.Int64
	migTime := run(16, func(i int) {
		id := ids[i]
		if st := c.do("POST", "/compute/v2.1/servers/"+id+"/action", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil); st != 202 {
			b.Errorf("migrate %d: %d", i, st)
			return
		}
		for {
			var out struct {
				Migrations []struct {
					Status string `json:"status"`
					Source string `json:"source_compute"`
					Dest   string `json:"dest_compute"`
				} `json:"migrations"`
			}
			c.do("GET", "/compute/v2.1/os-migrations?instance_uuid="+id, nil, &out)
			if len(out.Migrations) > 0 && out.Migrations[0].Status == "completed" {
				return
			}
			if len(out.Migrations) > 0 && (out.Migrations[0].Status == "error" || out.Migrations[0].Status == "failed") {
				b.Errorf("migration of %s: %s", id, out.Migrations[0].Status)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(n)/migTime.Seconds(), "migrations/s")

	// One at a time, so the deltas are exact: the moment a migration reads
	// "completed", the source's record is 512 MiB lighter and the
	// destination's 512 MiB heavier.
	const sample = 50
	for i := 0; i < sample; i++ {
		id := ids[i]
		before := c.memUsed()
		if st := c.do("POST", "/compute/v2.1/servers/"+id+"/action", map[string]any{"os-migrateLive": map[string]any{"host": nil, "block_migration": "auto"}}, nil); st != 202 {
			b.Fatalf("migrate: %d", st)
		}
		var src, dst string
		for {
			var out struct {
				Migrations []struct {
					Status string `json:"status"`
					Source string `json:"source_compute"`
					Dest   string `json:"dest_compute"`
				} `json:"migrations"`
			}
			c.do("GET", "/compute/v2.1/os-migrations?instance_uuid="+id, nil, &out)
			if len(out.Migrations) > 0 && out.Migrations[0].Status == "completed" {
				src, dst = out.Migrations[0].Source, out.Migrations[0].Dest
				break
			}
			time.Sleep(time.Millisecond)
		}
		after := c.memUsed()
		if after[src] != before[src]-512 || after[dst] != before[dst]+512 {
			notVisible.Add(1)
		}
	}
	b.ReportMetric(float64(notVisible.Load()), "of-50-not-visible-at-completed")
}

type apiClient struct {
	url, token string
}

func (c *apiClient) login(b *testing.B, pw string) {
	body := fmt.Sprintf(`{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":"admin","domain":{"name":"Default"},"password":%q}}},"scope":{"project":{"name":"admin","domain":{"name":"Default"}}}}}`, pw)
	resp, err := http.Post(c.url+"/identity/v3/auth/tokens", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 201 {
		b.Fatalf("login: %v", err)
	}
	resp.Body.Close()
	c.token = resp.Header.Get("X-Subject-Token")
}

func (c *apiClient) do(method, path string, body, out any) int {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, c.url+path, rd)
	req.Header.Set("X-Auth-Token", c.token)
	req.Header.Set("OpenStack-API-Version", "compute 2.30")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		_ = json.Unmarshal(data, out)
	}
	return resp.StatusCode
}

func (c *apiClient) waitActive(b *testing.B, n int) {
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var out struct {
			Servers []map[string]any `json:"servers"`
		}
		c.do("GET", "/compute/v2.1/servers/detail?all_tenants=1&status=ACTIVE", nil, &out)
		if len(out.Servers) >= n {
			return
		}
	}
	b.Fatalf("fewer than %d instances ACTIVE after 2 minutes", n)
}

// memUsed returns memory_mb_used per host from os-hypervisors/detail.
func (c *apiClient) memUsed() map[string]float64 {
	var out struct {
		Hypervisors []map[string]any `json:"hypervisors"`
	}
	c.do("GET", "/compute/v2.1/os-hypervisors/detail", nil, &out)
	m := map[string]float64{}
	for _, h := range out.Hypervisors {
		name, _ := h["hypervisor_hostname"].(string)
		m[name], _ = h["memory_mb_used"].(float64)
	}
	return m
}
