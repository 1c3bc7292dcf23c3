package sqlstore

import (
	"strings"
	"testing"
	"testing/fstest"

	"keel/internal/placement"
	"keel/internal/store"
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
	// service, flavor, aggregate, server group; DeleteService's host root,
	// next child and next aggregate.
	if locks != 7 {
		t.Errorf("PostgreSQL has %d locking reads, want 7", locks)
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

func TestInOrder(t *testing.T) {
	read := []*store.ProviderSummary{
		{Provider: placement.Provider{UUID: "a"}},
		{Provider: placement.Provider{UUID: "b"}, Usage: placement.Resources{placement.VCPU: 2}},
		{Provider: placement.Provider{UUID: "c"}},
	}
	uuids := func(ps []store.ProviderSummary) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.UUID)
		}
		return strings.Join(out, ",")
	}
	if got := uuids(InOrder(read, nil)); got != "a,b,c" {
		t.Errorf("InOrder(nil) = %s, want a,b,c", got)
	}
	got := InOrder(read, []string{"c", "x", "b"})
	if uuids(got) != "c,b" || got[1].Usage[placement.VCPU] != 2 {
		t.Errorf("InOrder(c,x,b) = %+v, want c then b with its usage", got)
	}
	if got := InOrder(read, []string{}); got == nil || len(got) != 0 {
		t.Errorf("InOrder(empty) = %#v, want an empty slice", got)
	}
}
