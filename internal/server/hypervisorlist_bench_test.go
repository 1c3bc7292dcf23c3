package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"keel/internal/api/computeapi"
	"keel/internal/clock"
	"keel/internal/records"
	"keel/internal/store"
)

// BenchmarkHypervisorListing is what GET /os-hypervisors/detail costs a
// caller at 10,000 hosts whose agents report: before each op the store
// takes what such a fleet writes in a second (1,000 heartbeats and 450
// host records), and "quiet" what it writes in 20 s nobody asked (the
// period's first call after the ramp); then one call is timed, paged
// (2.53, its first page of 1,000) or unpaged (2.1, every host; "cold"
// with nothing kept yet).
//
//	go test -run '^$' -bench HypervisorListing -benchtime 10x ./internal/server/
func BenchmarkHypervisorListing(b *testing.B) {
	const hosts = 10000
	st := bigCloud(b, hosts, 0)
	ctx := context.Background()
	for i := range hosts {
		if err := st.PutHostRecord(ctx, benchRecord(i, 0)); err != nil {
			b.Fatal(err)
		}
	}
	v := benchHostView(b, st)
	api := func() http.Handler {
		return computeapi.New(computeapi.Config{Store: st, Clock: clock.Real{}, ServiceDownTime: time.Minute,
			BaseURL: "http://keel/compute", Hosts: v, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Caller: func(*http.Request) (computeapi.Caller, bool) {
				return computeapi.Caller{UserID: "admin", ProjectID: "admin", Admin: true}, true
			}})
	}
	round := 0
	write := func(seconds int) {
		for range seconds {
			round++
			for j := range 1000 {
				h := fmt.Sprintf("h%04d", (round*1000+j)%hosts)
				if _, err := st.UpdateService(ctx, h, func(s *records.Service) error { s.LastSeenUp = time.Now(); return nil }); err != nil {
					b.Fatal(err)
				}
			}
			for j := range 450 {
				if err := st.PutHostRecord(ctx, benchRecord((round*450+j)%hosts, round)); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	get := func(b *testing.B, h http.Handler, version string) {
		r := httptest.NewRequest("GET", "/compute/v2.1/os-hypervisors/detail", nil)
		r.Header.Set("X-OpenStack-Nova-API-Version", version)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code, w.Body.String())
		}
	}
	for _, c := range []struct {
		name    string
		version string
		seconds int
		cold    bool
	}{
		{"paged", "2.53", 1, false},
		{"paged-quiet", "2.53", 20, false},
		{"unpaged", "2.1", 1, false},
		{"unpaged-cold-quiet", "2.1", 20, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := api()
			get(b, h, c.version)
			var took time.Duration
			for b.Loop() {
				b.StopTimer()
				write(c.seconds)
				if c.cold {
					h = api()
				}
				b.StartTimer()
				t0 := time.Now()
				get(b, h, c.version)
				took += time.Since(t0)
			}
			b.ReportMetric(float64(took.Microseconds())/float64(b.N)/1000, "ms/call")
		})
	}
}

func benchRecord(i, round int) records.HostRecord {
	return records.HostRecord{Host: fmt.Sprintf("h%04d", i), ProviderUUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i),
		VCPUs: 32, MemoryMB: 131072, LocalGB: 2000, CPUAllocationRatio: 4, RAMAllocationRatio: 1, DiskAllocationRatio: 1,
		Metrics: []records.Metric{{Name: "cpu.percent", Value: float64(round%100) / 100, Source: "keel", Timestamp: time.Now()},
			{Name: "cpu.frequency", Value: 2400, Source: "keel", Timestamp: time.Now()}},
		UpdatedAt: time.Now()}
}

// benchHostView is the view the server's API reads, followed as the
// server follows it.
func benchHostView(tb testing.TB, st store.Store) *hostView {
	v := newHostView(st)
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	go v.follow(ctx, viewFollowEvery, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return v
}
