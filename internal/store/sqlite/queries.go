package sqlite

import (
	"fmt"
	"strings"
)

// The write transactions' statements. Each is registered with wq so Open
// can prepare it on the writer connection before any transaction runs:
// preparing on the pool while a transaction holds its only connection
// would deadlock.
var (
	qLoadProvider      = wq(providerSelect + ` WHERE p.uuid = ?`)
	qLoadProviderState = wq(`SELECT p.generation,
		i.resource_class, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size, i.allocation_ratio, i.used
		FROM providers p LEFT JOIN inventories i ON i.provider_uuid = p.uuid WHERE p.uuid = ?`)
	qPutInventory = wq(`INSERT INTO inventories
		(provider_uuid, resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (provider_uuid, resource_class) DO UPDATE SET
			total = excluded.total, reserved = excluded.reserved, min_unit = excluded.min_unit,
			max_unit = excluded.max_unit, step_size = excluded.step_size, allocation_ratio = excluded.allocation_ratio`)
	qProviderExists            = wq(`SELECT COUNT(*) FROM providers WHERE uuid = ?`)
	qProviderNameTaken         = wq(`SELECT COUNT(*) FROM providers WHERE name = ?`)
	qInsertProvider            = wq(`INSERT INTO providers (uuid, name, generation, parent_uuid, traits, aggregates) VALUES (?, ?, ?, ?, ?, ?)`)
	qProviderChild             = wq(`SELECT uuid FROM providers WHERE parent_uuid = ? ORDER BY uuid LIMIT 1`)
	qProviderParent            = wq(`SELECT COALESCE(parent_uuid, '') FROM providers WHERE uuid = ?`)
	qCustomTraitExists         = wq(`SELECT COUNT(*) FROM custom_traits WHERE name = ?`)
	qUpdateProvider            = wq(`UPDATE providers SET name = ?, parent_uuid = ? WHERE uuid = ?`)
	qProviderNameOwner         = wq(`SELECT uuid FROM providers WHERE name = ?`)
	qSetProviderTraits         = wq(`UPDATE providers SET traits = ?, generation = ? WHERE uuid = ?`)
	qSetProviderAggregates     = wq(`UPDATE providers SET aggregates = ?, generation = ? WHERE uuid = ?`)
	qTraitUser                 = wq(`SELECT p.uuid FROM providers p, json_each(p.traits) t WHERE t.value = ? ORDER BY p.uuid LIMIT 1`)
	qDeleteTrait               = wq(`DELETE FROM custom_traits WHERE name = ?`)
	qClassUser                 = wq(`SELECT provider_uuid FROM inventories WHERE resource_class = ? ORDER BY provider_uuid LIMIT 1`)
	qDeleteClass               = wq(`DELETE FROM custom_resource_classes WHERE name = ?`)
	qDeleteInventory           = wq(`DELETE FROM inventories WHERE provider_uuid = ? AND resource_class = ?`)
	qSetProviderGeneration     = wq(`UPDATE providers SET generation = ? WHERE uuid = ?`)
	qProviderUsedClass         = wq(`SELECT resource_class, used FROM inventories WHERE provider_uuid = ? AND used > 0 ORDER BY resource_class LIMIT 1`)
	qProviderHasAllocations    = wq(`SELECT COUNT(*) FROM (SELECT 1 FROM allocations WHERE provider_uuid = ? LIMIT 1)`)
	qDeleteProvider            = wq(`DELETE FROM providers WHERE uuid = ?`)
	qLoadConsumer              = wq(consumerSelect + ` WHERE c.uuid = ?`)
	qAddUsage                  = wq(`UPDATE inventories SET used = used + ? WHERE provider_uuid = ? AND resource_class = ?`)
	qDeleteConsumerAllocations = wq(`DELETE FROM allocations WHERE consumer_uuid = ?`)
	qDeleteConsumer            = wq(`DELETE FROM consumers WHERE uuid = ?`)
	qUpdateConsumer            = wq(`UPDATE consumers SET project_id = ?, user_id = ?, type = ?, generation = ? WHERE uuid = ?`)
	qInsertConsumer            = wq(`INSERT INTO consumers (uuid, project_id, user_id, type, generation) VALUES (?, ?, ?, ?, ?)`)
	qInsertChange              = wq(`INSERT INTO changes (kind, key) VALUES (?, ?)`)
	qTrimChanges               = wq(`DELETE FROM changes WHERE seq <= ?`)
)

// Statements for 1…multiRows rows at once: the allocation rows of one
// consumer on one provider. A claim (VCPU, MEMORY_MB, DISK_GB on one host)
// is then one INSERT, not three.
const multiRows = 8

var (
	// qInsertAllocations[n-1] inserts n allocation rows; arguments:
	// consumer, provider, then class and amount for each row.
	qInsertAllocations = multiRowQueries(func(n int) string {
		var b strings.Builder
		b.WriteString(`INSERT INTO allocations (consumer_uuid, provider_uuid, resource_class, used) VALUES `)
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "(?1, ?2, ?%d, ?%d)", 3+2*i, 4+2*i)
		}
		return b.String()
	})
)

// multiRowQueries registers query(1)…query(multiRows) with wq.
func multiRowQueries(query func(n int) string) []string {
	out := make([]string, multiRows)
	for n := 1; n <= multiRows; n++ {
		out[n-1] = wq(query(n))
	}
	return out
}
