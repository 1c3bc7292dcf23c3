package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"keel/internal/store"
	"keel/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "keel.db"))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}
