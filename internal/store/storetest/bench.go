package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// benchHost is the benchmark's host: 32 VCPU at ratio 4, 128 GiB of RAM with
// 512 MB reserved, 2 TB of disk.
func benchHost() placement.Inventories {
	vcpu := placement.NewInventory(32)
	vcpu.AllocationRatio = 4
	mem := placement.NewInventory(131072)
	mem.Reserved = 512
	return placement.Inventories{
		placement.VCPU:     vcpu,
		placement.MemoryMB: mem,
		placement.DiskGB:   placement.NewInventory(2000),
	}
}

// BenchWriteAllocations10k measures one scheduler claim (decide and write)
// against a store of 10,000 providers, s fresh and empty: each iteration
// claims VCPU:1, MEMORY_MB:512, DISK_GB:1 for a new consumer on the next
// provider in turn, naming the provider generation it knows. Each store's
// BenchmarkWriteAllocations10k runs it.
func BenchWriteAllocations10k(b *testing.B, s store.Store) {
	const providers = 10_000
	ctx := context.Background()
	uuids := make([]string, providers)
	gens := make([]int64, providers)
	for i := range uuids {
		uuids[i] = fmt.Sprintf("%08x-0000-4000-8000-%012x", 0xbe, i)
		p, err := s.CreateProvider(ctx, placement.Provider{UUID: uuids[i], Name: fmt.Sprintf("cmp-%05d", i), Inventories: benchHost()})
		if err != nil {
			b.Fatalf("CreateProvider: %v", err)
		}
		gens[i] = p.Generation
	}
	claim := placement.Resources{placement.VCPU: 1, placement.MemoryMB: 512, placement.DiskGB: 1}

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		p := i % providers
		plan, err := s.WriteAllocations(ctx, placement.AllocationWrite{
			ConsumerUUID:        fmt.Sprintf("%08x-0000-4000-8000-%012x", 0xc0, i),
			ProjectID:           "bench",
			UserID:              "bench",
			Allocations:         map[string]placement.Resources{uuids[p]: claim},
			ProviderGenerations: map[string]int64{uuids[p]: gens[p]},
		})
		if err != nil {
			b.Fatalf("claim %d on provider %d: %v", i, p, err)
		}
		gens[p] = plan.Providers[uuids[p]]
	}
}

// BenchHostRecords writes 2,000 hosts' records over and over, each with
// a metrics report's six CPU metrics: "one" is a transaction per record
// (PutHostRecord), "batch100" a transaction per 100 records
// (store.HostRecordBatch, as the server groups the agents' reports).
// ns/op is per record either way.
func BenchHostRecords(b *testing.B, s store.Store) {
	const hosts = 2000
	ctx := context.Background()
	rec := func(i int) records.HostRecord {
		h := hostRecord(fmt.Sprintf("cmp-%05d", i%hosts), int64(i%7))
		at := t0.Add(time.Duration(i) * time.Second)
		for _, name := range records.MetricNames {
			h.Metrics = append(h.Metrics, records.Metric{Name: name, Value: 0.25, Timestamp: at, Source: "bench"})
		}
		return h
	}
	b.Run("one", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := s.PutHostRecord(ctx, rec(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("batch100", func(b *testing.B) {
		hb, ok := s.(store.HostRecordBatch)
		if !ok {
			b.Fatalf("%T does not batch host records", s)
		}
		batch := make([]records.HostRecord, 0, 100)
		for i := 0; b.Loop(); i++ {
			batch = append(batch, rec(i))
			if len(batch) == cap(batch) {
				if err := hb.PutHostRecords(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	})
}
