package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"keel/internal/store/storetest"
)

// BenchmarkWriteAllocations10k is storetest.BenchWriteAllocations10k on a
// database file of its own.
func BenchmarkWriteAllocations10k(b *testing.B) {
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	defer s.Close()
	storetest.BenchWriteAllocations10k(b, s)
}

// BenchmarkHostRecords compares a metrics report's host record written
// in a transaction of its own with the same records written 100 to a
// transaction (store.HostRecordBatch, as the server groups them); ns/op
// is per record.
func BenchmarkHostRecords(b *testing.B) {
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	defer s.Close()
	storetest.BenchHostRecords(b, s)
}
