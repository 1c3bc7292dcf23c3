package sqlstore

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestRebind(t *testing.T) {
	q := `UPDATE plans SET data = $2 WHERE id = $1 AND version = $12`
	if got, want := SQLite.Rebind(q), `UPDATE plans SET data = ?2 WHERE id = ?1 AND version = ?12`; got != want {
		t.Errorf("SQLite.Rebind = %q, want %q", got, want)
	}
	if got := Postgres.Rebind(q); got != q {
		t.Errorf("Postgres.Rebind = %q, want it unchanged", got)
	}
}

func TestWriteStatementsAreRebound(t *testing.T) {
	for _, q := range SQLite.WriteStatements() {
		if strings.Contains(q, "$") {
			t.Errorf("SQLite write statement keeps a $ placeholder: %q", q)
		}
		if strings.Contains(q, "FOR UPDATE") {
			t.Errorf("SQLite write statement locks rows: %q", q)
		}
	}
	locks := 0
	for _, q := range Postgres.WriteStatements() {
		if strings.HasSuffix(q, " FOR UPDATE") {
			locks++
		}
	}
	if locks != 4 { // service, flavor, aggregate, server group
		t.Errorf("PostgreSQL has %d locking reads, want 4", locks)
	}
}

func TestMigrations(t *testing.T) {
	ok := fstest.MapFS{
		"migrations/0002_b.sql": {Data: []byte("B")},
		"migrations/0001_a.sql": {Data: []byte("A")},
	}
	ms, err := Migrations(ok)
	if err != nil || len(ms) != 2 || ms[0].Name != "0001_a.sql" || ms[1].SQL != "B" || ms[1].Version != 2 {
		t.Fatalf("Migrations = %+v, %v; want 0001_a.sql then 0002_b.sql", ms, err)
	}
	for name, files := range map[string]fstest.MapFS{
		"gap":       {"migrations/0001_a.sql": {}, "migrations/0003_c.sql": {}},
		"duplicate": {"migrations/0001_a.sql": {}, "migrations/0001_b.sql": {}},
		"unnamed":   {"migrations/init.sql": {}},
		"not sql":   {"migrations/0001_a.txt": {}},
	} {
		if ms, err := Migrations(files); err == nil {
			t.Errorf("%s: Migrations = %+v, want an error", name, ms)
		}
	}
}
