package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"keel/internal/records"
)

// BenchmarkComputeHosts is what the hypervisor listings cost the server
// at 5,000 hosts whose agents report: each op is 500 host records
// written (2 s of a 5,000-host fleet's reports), then the view read.
//
//	go test -run '^$' -bench ComputeHosts -benchtime 20x ./internal/server/
func BenchmarkComputeHosts(b *testing.B) {
	const hosts = 5000
	st := bigCloud(b, hosts, 0)
	ctx := context.Background()
	rec := func(i, round int) records.HostRecord {
		return records.HostRecord{Host: fmt.Sprintf("h%04d", i), ProviderUUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i),
			VCPUs: 32, MemoryMB: 131072, LocalGB: 2000, CPUAllocationRatio: 4, RAMAllocationRatio: 1, DiskAllocationRatio: 1,
			Metrics: []records.Metric{{Name: "cpu.percent", Value: float64(round%100) / 100, Source: "keel", Timestamp: time.Now()},
				{Name: "cpu.frequency", Value: 2400, Source: "keel", Timestamp: time.Now()}},
			UpdatedAt: time.Now()}
	}
	for i := range hosts {
		if err := st.PutHostRecord(ctx, rec(i, 0)); err != nil {
			b.Fatal(err)
		}
	}
	v := newHostView(st)
	if _, _, err := v.ComputeHosts(ctx); err != nil {
		b.Fatal(err)
	}
	round := 0
	var read time.Duration
	for b.Loop() {
		b.StopTimer()
		round++
		for j := range 500 {
			if err := st.PutHostRecord(ctx, rec((round*500+j)%hosts, round)); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t0 := time.Now()
		recs, _, err := v.ComputeHosts(ctx)
		read += time.Since(t0)
		if err != nil || len(recs) != hosts {
			b.Fatal(len(recs), err)
		}
	}
	b.ReportMetric(float64(read.Microseconds())/float64(b.N)/1000, "ms/read")
}
