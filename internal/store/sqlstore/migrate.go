package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered schema file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the schema files in the migrations directory of
// files (named NNNN_name.sql), checked to be numbered 1, 2, 3… without gaps or
// duplicates.
func Migrations(files fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(files, "migrations")
	if err != nil {
		return nil, fmt.Errorf("reading embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 || path.Ext(e.Name()) != ".sql" {
			return nil, fmt.Errorf("migration file %q is not named NNNN_name.sql", e.Name())
		}
		body, err := fs.ReadFile(files, "migrations/"+e.Name())
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d", m.Name, i+1)
		}
	}
	return out, nil
}

// Migrate applies the pending migrations of files (see Migrations) to db in one
// transaction, recording each in the schema_version table. A database whose
// schema is newer than files is refused. In a dialect with a schema lock
// (PostgreSQL's advisory lock) servers starting together queue on it, and
// each later one then finds the version the first one committed (a new
// snapshot per statement at READ COMMITTED).
//
// A file may hold several statements: each is run without arguments,
// which both drivers send as one script (PostgreSQL's simple protocol).
func Migrate(ctx context.Context, db *sql.DB, d *Dialect, files fs.FS) error {
	ms, err := Migrations(files)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: d.isolation})
	if err != nil {
		return fmt.Errorf("beginning migration: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if d.lockSchema != "" {
		if _, err := tx.ExecContext(ctx, d.lockSchema); err != nil {
			return fmt.Errorf("locking the schema: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, d.schemaTable); err != nil {
		return fmt.Errorf("creating schema_version: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, qSchemaVersion).Scan(&current); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	if current > len(ms) {
		return fmt.Errorf("database schema version %d is newer than this program's %d", current, len(ms))
	}
	if current == len(ms) {
		return nil // the deferred rollback releases the schema lock
	}
	record := d.Rebind(d.recordVersion)
	for _, m := range ms[current:] {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("applying migration %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, record, m.Version, m.Name); err != nil {
			return fmt.Errorf("recording migration %s: %w", m.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing migrations: %w", err)
	}
	return nil
}

const qSchemaVersion = `SELECT COALESCE(MAX(version), 0) FROM schema_version`

// SchemaVersion returns the newest schema migration applied to the
// database.
func (r *Records) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := r.db.QueryRow(ctx, qSchemaVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("%s: reading schema version: %w", r.d.Name, err)
	}
	return v, nil
}
