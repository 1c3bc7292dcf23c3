package storetest

import (
	"database/sql"
	"testing"
)

// CheckUsageSums checks, on a SQL store's database opened behind its back,
// that each inventory's used column is the sum of the allocations of its
// provider and class (both SQL stores keep usage in that column rather
// than summing at read time).
func CheckUsageSums(t *testing.T, db *sql.DB) {
	t.Helper()
	rows, err := db.Query(`SELECT i.provider_uuid, i.resource_class, i.used, CAST(COALESCE(SUM(a.used), 0) AS BIGINT)
		FROM inventories i LEFT JOIN allocations a
			ON a.provider_uuid = i.provider_uuid AND a.resource_class = i.resource_class
		GROUP BY i.provider_uuid, i.resource_class, i.used`)
	if err != nil {
		t.Fatalf("checking usage: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			p, rc      string
			used, summ int64
		)
		if err := rows.Scan(&p, &rc, &used, &summ); err != nil {
			t.Fatalf("checking usage: %v", err)
		}
		if used != summ {
			t.Errorf("provider %s %s: used column %d, allocations sum to %d", p, rc, used, summ)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("checking usage: %v", err)
	}
}
