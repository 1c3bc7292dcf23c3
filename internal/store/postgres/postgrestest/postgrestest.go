// Package postgrestest opens keel's PostgreSQL store for tests outside the
// store's own package (the API fuzz targets): each store on a fresh
// database of the test binary's throw-away cluster (pgtest), copied from a
// template migrated once. The test binary's TestMain must call
// pgtest.Main.
package postgrestest

import (
	"context"
	"testing"

	"keel/internal/store/postgres"
	"keel/internal/store/postgres/pgtest"
)

// template is the template database holding the migrated schema.
const template = "keel_store_schema"

// Open returns a store on a fresh, migrated database, closed (and the
// database dropped) when tb ends.
func Open(tb testing.TB) *postgres.Store {
	tb.Helper()
	c := pgtest.Shared(tb)
	err := c.Template(context.Background(), template, func(ctx context.Context, url string) error {
		s, err := postgres.Open(ctx, url)
		if err != nil {
			return err
		}
		return s.Close()
	})
	if err != nil {
		tb.Fatal(err)
	}
	url := pgtest.NewDatabase(tb, template)
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		tb.Fatalf("opening the PostgreSQL store: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("closing the PostgreSQL store: %v", err)
		}
	})
	return s
}
