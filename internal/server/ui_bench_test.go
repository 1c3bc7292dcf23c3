package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
	"keel/internal/store/sqlite"
)

// bigCloud fills a SQLite store with hosts hosts of per m1.small
// instances each.
func bigCloud(tb testing.TB, hosts, per int) store.Store {
	tb.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "keel.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	fl := records.Flavor{ID: "2", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20}
	if _, err := st.CreateFlavor(ctx, fl); err != nil {
		tb.Fatal(err)
	}
	for i := range hosts {
		name := fmt.Sprintf("h%04d", i)
		p, err := st.CreateProvider(ctx, placement.Provider{UUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i), Name: name,
			Inventories: placement.Inventories{placement.VCPU: placement.NewInventory(32), placement.MemoryMB: placement.NewInventory(131072),
				placement.DiskGB: placement.NewInventory(2000)}})
		if err != nil {
			tb.Fatal(err)
		}
		if err := st.PutService(ctx, records.Service{Host: name, Binary: "nova-compute", Zone: "nova", LastSeenUp: time.Now()}); err != nil {
			tb.Fatal(err)
		}
		for j := range per {
			u := fmt.Sprintf("%08d-0000-0000-0000-%012d", j, i)
			if _, err := st.CreateInstance(ctx, records.Instance{UUID: u, Name: "vm-" + u[:8], ProjectID: "p", Host: name, Flavor: fl, VMState: records.VMActive}); err != nil {
				tb.Fatal(err)
			}
			if _, err := st.WriteAllocations(ctx, placement.AllocationWrite{ConsumerUUID: u, ProjectID: "p", UserID: "u",
				Allocations: map[string]placement.Resources{p.UUID: fl.Resources()}}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return st
}

// BenchmarkUIBuild is what an open page costs the server at 1,000 hosts
// with 10,000 instances and at 10,000 hosts with 10,000: "instances"
// re-reads every instance (at most once a second, after a boot or a
// move), "hosts" rebuilds the host part (after a claim or a service
// change, at most every tick):
//
//	go test -run '^$' -bench UIBuild -benchtime 20x ./internal/server/
func BenchmarkUIBuild(b *testing.B) {
	for _, size := range []struct{ hosts, per int }{{1000, 10}, {10000, 1}} {
		b.Run(fmt.Sprintf("hosts=%d", size.hosts), func(b *testing.B) {
			benchUIBuild(b, bigCloud(b, size.hosts, size.per))
		})
	}
}

func benchUIBuild(b *testing.B, st store.Store) {
	u := newUIHub(st, newHostView(st), time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	if err := u.build(ctx); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		stale func()
	}{
		{"instances", func() { u.lastInstances, u.pokedAll = time.Time{}, true }},
		{"hosts", func() { u.lastHosts = time.Time{} }},
		// After a claim the providers' forest (the largest free slot's
		// candidate search) is built again too.
		{"hosts-after-claim", func() {
			u.lastHosts = time.Time{}
			u.view.mu.Lock()
			u.view.forest = nil
			u.view.mu.Unlock()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				u.mu.Lock()
				bc.stale()
				u.mu.Unlock()
				if err := u.build(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	s, _ := u.current()
	gzipped := func(data []byte) int {
		var buf bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		gz.Write(data)
		gz.Close()
		return buf.Len()
	}
	b.Logf("encoded parts: hosts %d bytes (%d gzipped), instances %d bytes (%d gzipped)",
		len(s.hostsJSON), gzipped(s.hostsJSON), len(s.instancesJSON), gzipped(s.instancesJSON))
}

// BenchmarkMetricsScrape is one Prometheus scrape of /metrics's cloud
// gauges (per host, per resource class, the moves and plans) at 1,000 and
// 10,000 hosts, as the server registers them:
//
//	go test -run '^$' -bench MetricsScrape -benchtime 20x ./internal/server/
func BenchmarkMetricsScrape(b *testing.B) {
	for _, hosts := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			st := bigCloud(b, hosts, 1)
			u := newUIHub(st, newHostView(st), time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
			m := newMetrics()
			h := m.handler(st, time.Minute, newCloudCollector(u))
			var size int
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("/metrics: %d %s", rec.Code, rec.Body.String())
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}

// TestUIBuildLargeCloud checks the state at 1,000 hosts (3,000
// instances): every host, the instances on each, and a member's share.
func TestUIBuildLargeCloud(t *testing.T) {
	st := bigCloud(t, 1000, 3)
	u := newUIHub(st, newHostView(st), time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
	start := time.Now()
	if err := u.build(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("first build at 1,000 hosts, 3,000 instances: %s", time.Since(start).Round(time.Millisecond))
	s, _ := u.current()
	if len(s.Hosts) != 1000 || len(s.Instances) != 3000 {
		t.Fatalf("%d hosts, %d instances", len(s.Hosts), len(s.Instances))
	}
	for _, h := range s.Hosts {
		// 3 vCPUs of 32 (ratio 1) fill more than 3 × 2048 MiB of 131072.
		if h.Instances != 3 || h.FillClass != placement.VCPU || h.Fill != 3.0/32 {
			t.Fatalf("host %s: %d instances, fill %v of %s", h.Name, h.Instances, h.Fill, h.FillClass)
		}
	}
	if s.Imbalance.CV[placement.MemoryMB] != 0 || s.Imbalance.EnabledHosts != 1000 || s.Imbalance.LargestFlavor != "m1.small" {
		t.Errorf("imbalance %+v", s.Imbalance)
	}
	if n := len(memberInstances(s, "other")); n != 0 {
		t.Errorf("another project's member sees %d instances", n)
	}
	if n := len(memberInstances(s, "p")); n != 3000 {
		t.Errorf("the project's member sees %d instances, want 3000", n)
	}
}
