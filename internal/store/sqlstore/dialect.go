package sqlstore

import (
	"database/sql"
	"regexp"
	"strings"
)

// Dialect is what differs in the SQL the shared layer writes for each
// database: placeholders, row locks, boolean literals, JSON merging and the
// schema_version table. The shared statements are written with numbered
// PostgreSQL placeholders ($1, $2 …); Rebind turns them into the dialect's.
type Dialect struct {
	// Name is the database's name, for errors.
	Name string
	// placeholder replaces the "$" of "$1" (SQLite's numbered form is ?1).
	placeholder string
	// forUpdate ends a SELECT that locks the rows it reads ("" where the
	// store's single writer already serialises every write).
	forUpdate string
	// active is the condition that keeps rows whose active column is
	// set (as the partial indexes on it are written).
	active string
	// mergeJSON merges the row's JSON object (old) with the new one (new)
	// in an upsert, the new one's keys winning.
	mergeJSON func(old, new string) string
	// jsonText is a text field of a row's JSON column, written as the
	// expression indexes on it are (so the index serves the query).
	jsonText func(column, key string) string

	// schemaTable creates schema_version if it does not exist.
	schemaTable string
	// recordVersion inserts a schema_version row ($1 version, $2 name),
	// stamped with the database's clock.
	recordVersion string
	// isolation is the migrating transaction's isolation level.
	isolation sql.IsolationLevel
	// lockSchema, if set, runs first in the migrating transaction so that
	// servers starting together against one database migrate it once.
	lockSchema string

	q *queries // the shared statements, rebound for this dialect
}

// schemaLockKey is the key of PostgreSQL's advisory lock around the schema
// migrations ("keel" in ASCII); advisory locks are per database.
const schemaLockKey = "1801807212"

// SQLite is the dialect of SQLite (3.35 or later: RETURNING, json_patch).
var SQLite = newDialect(Dialect{
	Name:        "sqlite",
	placeholder: "?",
	active:      "active = 1",
	mergeJSON:   func(old, new string) string { return "json_patch(" + old + ", " + new + ")" },
	jsonText:    func(column, key string) string { return "json_extract(" + column + ", '$." + key + "')" },
	schemaTable: `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL
	)`,
	recordVersion: `INSERT INTO schema_version (version, name, applied_at) VALUES ($1, $2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))`,
})

// Postgres is the dialect of PostgreSQL.
var Postgres = newDialect(Dialect{
	Name:        "postgres",
	placeholder: "$",
	forUpdate:   " FOR UPDATE",
	active:      "active",
	mergeJSON:   func(old, new string) string { return old + " || " + new },
	jsonText:    func(column, key string) string { return "(" + column + " ->> '" + key + "')" },
	schemaTable: `CREATE TABLE IF NOT EXISTS schema_version (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`,
	recordVersion: `INSERT INTO schema_version (version, name) VALUES ($1, $2)`,
	isolation:     sql.LevelReadCommitted,
	lockSchema:    `SELECT pg_advisory_xact_lock(` + schemaLockKey + `)`,
})

func newDialect(d Dialect) *Dialect {
	d.q = newQueries(&d)
	return &d
}

var placeholders = regexp.MustCompile(`\$([0-9]+)`)

// Rebind rewrites a statement's numbered placeholders ($1, $2 …) into the
// dialect's.
func (d *Dialect) Rebind(query string) string {
	if d.placeholder == "$" {
		return query
	}
	return placeholders.ReplaceAllString(query, strings.ReplaceAll(d.placeholder, "$", "$$")+"$1")
}

// WriteStatements lists every statement the shared layer runs inside a
// write transaction, in this dialect. The SQLite store prepares them on its
// single writer connection before any transaction runs.
func (d *Dialect) WriteStatements() []string {
	return append([]string(nil), d.q.write...)
}
