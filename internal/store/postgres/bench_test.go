package postgres

import (
	"testing"

	"keel/internal/store/storetest"
)

// BenchmarkWriteAllocations10k is storetest.BenchWriteAllocations10k on a
// fresh database of the test cluster: on a unix socket, with fsync off.
func BenchmarkWriteAllocations10k(b *testing.B) {
	s, _ := openTemp(b, Options{})
	storetest.BenchWriteAllocations10k(b, s)
}
