package memory_test

import (
	"testing"

	"keel/internal/store"
	"keel/internal/store/memory"
	"keel/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
}
