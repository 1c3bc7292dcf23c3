package sqlstore

import (
	"fmt"
	"strings"
)

// queries holds the shared statements in one dialect. Those run in a write
// transaction or by DB.Exec are listed in write too.
type queries struct {
	write []string

	getHostRecord, listHostRecords, putHostRecord                         string
	getService, listServices, lockService, putService                     string
	getHostRecords, getServices                                           string
	getInstance, listInstances, listInstancesOn, instanceVersion          string
	listProjectInstances                                                  string
	insertInstance, updateInstance, deleteInstance                        string
	getMigration, migrationVersion, insertMigration, setMigrationData     string
	updateMigration                                                       string
	insertAction, listActions                                             string
	getFlavor, listFlavors, lockFlavor, insertFlavor, setFlavor           string
	deleteFlavor                                                          string
	getAggregate, listAggregates, lockAggregate, insertAggregate          string
	aggregateNameTaken, putAggregate, deleteAggregate                     string
	getGroup, listGroups, lockGroup, insertGroup, putGroup, deleteGroup   string
	getKeyPair, listKeyPairs, insertKeyPair, putKeyPair, deleteKeyPair    string
	getQuota, mergeQuota, deleteQuota                                     string
	getPlan, listPlans, listActivePlans, planVersion, insertPlan, setPlan string
	updatePlan                                                            string
	insertTrait, listTraits, insertClass, listClasses                     string
	identity                                                              identityQueries
	hostDelete                                                            hostDeleteQueries
}

func newQueries(d *Dialect) *queries {
	q := &queries{}
	r := d.Rebind
	w := func(query string) string {
		query = d.Rebind(query)
		q.write = append(q.write, query)
		return query
	}
	lock := func(query string) string { return w(query + d.forUpdate) }

	q.getHostRecord = r(`SELECT data FROM host_records WHERE host = $1`)
	q.listHostRecords = r(`SELECT data FROM host_records ORDER BY host`)
	q.putHostRecord = w(`INSERT INTO host_records (host, data) VALUES ($1, $2)
		ON CONFLICT (host) DO UPDATE SET data = excluded.data`)

	q.getHostRecords = r(`SELECT data FROM host_records WHERE host IN (` + numbered(byKeysBatch) + `) ORDER BY host`)
	q.getService = r(`SELECT data FROM services WHERE host = $1`)
	q.getServices = r(`SELECT data FROM services WHERE host IN (` + numbered(byKeysBatch) + `) ORDER BY host`)
	q.listServices = r(`SELECT data FROM services ORDER BY host`)
	q.lockService = lock(`SELECT data FROM services WHERE host = $1`)
	q.putService = w(`INSERT INTO services (host, data) VALUES ($1, $2)
		ON CONFLICT (host) DO UPDATE SET data = excluded.data`)

	q.getInstance = r(`SELECT data FROM instances WHERE uuid = $1`)
	q.listInstances = r(`SELECT data FROM instances ORDER BY uuid`)
	q.listInstancesOn = r(`SELECT data FROM instances WHERE host = $1 ORDER BY uuid`)
	// Served by the instances_by_project expression index (migration 13 in SQLite, 11 in PostgreSQL).
	q.listProjectInstances = r(`SELECT data FROM instances WHERE ` + d.jsonText("data", "project_id") + ` = $1 ORDER BY uuid`)
	// A write statement too: BeginMove reads it in its transaction.
	q.instanceVersion = w(`SELECT version FROM instances WHERE uuid = $1`)
	q.insertInstance = w(`INSERT INTO instances (uuid, host, version, data) VALUES ($1, $2, $3, $4)
		ON CONFLICT (uuid) DO NOTHING`)
	q.updateInstance = w(`UPDATE instances SET host = $1, version = $2, data = $3 WHERE uuid = $4 AND version = $5`)
	q.deleteInstance = w(`DELETE FROM instances WHERE uuid = $1`)

	q.getMigration = r(`SELECT data FROM migrations WHERE id = $1`)
	q.migrationVersion = r(`SELECT version FROM migrations WHERE id = $1`)
	q.insertMigration = w(`INSERT INTO migrations (uuid, instance_uuid, source_host, dest_host, status, active, version, data)
		VALUES ($1, $2, $3, $4, $5, $6, $7, '{}') RETURNING id`)
	q.setMigrationData = w(`UPDATE migrations SET data = $2 WHERE id = $1`)
	q.updateMigration = w(`UPDATE migrations SET uuid = $1, instance_uuid = $2, source_host = $3, dest_host = $4,
		status = $5, active = $6, version = $7, data = $8 WHERE id = $9 AND version = $10`)

	q.insertAction = w(`INSERT INTO instance_actions (instance_uuid, request_id, data) VALUES ($1, $2, $3)
		ON CONFLICT (instance_uuid, request_id) DO NOTHING`)
	q.listActions = r(`SELECT data FROM instance_actions WHERE instance_uuid = $1 ORDER BY id`)

	q.getFlavor = r(`SELECT data FROM flavors WHERE id = $1`)
	q.listFlavors = r(`SELECT data FROM flavors ORDER BY id`)
	q.lockFlavor = lock(`SELECT data FROM flavors WHERE id = $1`)
	// A taken ID or name: nothing inserted.
	q.insertFlavor = w(`INSERT INTO flavors (id, name, data) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`)
	q.setFlavor = w(`UPDATE flavors SET data = $2 WHERE id = $1`)
	q.deleteFlavor = w(`DELETE FROM flavors WHERE id = $1`)

	q.getAggregate = r(`SELECT data FROM aggregates WHERE id = $1`)
	q.listAggregates = r(`SELECT data FROM aggregates ORDER BY id`)
	q.lockAggregate = lock(`SELECT data FROM aggregates WHERE id = $1`)
	q.insertAggregate = w(`INSERT INTO aggregates (name, data) VALUES ($1, '{}') ON CONFLICT (name) DO NOTHING RETURNING id`)
	q.aggregateNameTaken = w(`SELECT COUNT(*) FROM aggregates WHERE name = $1 AND id <> $2`)
	q.putAggregate = w(`UPDATE aggregates SET name = $2, data = $3 WHERE id = $1`)
	q.deleteAggregate = w(`DELETE FROM aggregates WHERE id = $1`)

	q.getGroup = r(`SELECT data FROM server_groups WHERE uuid = $1`)
	q.listGroups = r(`SELECT data FROM server_groups ORDER BY uuid`)
	q.lockGroup = lock(`SELECT data FROM server_groups WHERE uuid = $1`)
	q.insertGroup = w(`INSERT INTO server_groups (uuid, data) VALUES ($1, $2) ON CONFLICT DO NOTHING`)
	q.putGroup = w(`UPDATE server_groups SET data = $2 WHERE uuid = $1`)
	q.deleteGroup = w(`DELETE FROM server_groups WHERE uuid = $1`)

	q.getKeyPair = r(`SELECT data FROM key_pairs WHERE user_id = $1 AND name = $2`)
	q.listKeyPairs = r(`SELECT data FROM key_pairs WHERE user_id = $1 ORDER BY name`)
	q.insertKeyPair = w(`INSERT INTO key_pairs (user_id, name, data) VALUES ($1, $2, '{}') ON CONFLICT DO NOTHING RETURNING id`)
	q.putKeyPair = w(`UPDATE key_pairs SET data = $2 WHERE id = $1`)
	q.deleteKeyPair = w(`DELETE FROM key_pairs WHERE user_id = $1 AND name = $2`)

	q.identity = newIdentityQueries(r, w)
	q.hostDelete = newHostDeleteQueries(d, w, lock)

	q.getQuota = r(`SELECT data FROM quota_limits WHERE project = $1`)
	// One statement merges the new limits into the row, so concurrent sets
	// of different names both stay.
	q.mergeQuota = w(`INSERT INTO quota_limits (project, data) VALUES ($1, $2)
		ON CONFLICT (project) DO UPDATE SET data = ` + d.mergeJSON("quota_limits.data", "excluded.data") + `
		RETURNING data`)
	q.deleteQuota = w(`DELETE FROM quota_limits WHERE project = $1`)

	q.getPlan = r(`SELECT data FROM plans WHERE id = $1`)
	q.listPlans = r(`SELECT data FROM plans ORDER BY id`)
	q.listActivePlans = r(`SELECT data FROM plans WHERE ` + d.active + ` ORDER BY id`)
	q.planVersion = r(`SELECT version FROM plans WHERE id = $1`)
	q.insertPlan = w(`INSERT INTO plans (state, active, version, data) VALUES ($1, $2, $3, '{}') RETURNING id`)
	q.setPlan = w(`UPDATE plans SET data = $2 WHERE id = $1`)
	q.updatePlan = w(`UPDATE plans SET state = $1, active = $2, version = $3, data = $4 WHERE id = $5 AND version = $6`)

	q.insertTrait = w(`INSERT INTO custom_traits (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`)
	q.listTraits = r(`SELECT name FROM custom_traits ORDER BY name`)
	q.insertClass = w(`INSERT INTO custom_resource_classes (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`)
	q.listClasses = r(`SELECT name FROM custom_resource_classes ORDER BY name`)
	return q
}

// byKeysBatch is how many keys one statement of the reads by many keys
// (getHostRecords, getServices) takes: a fixed count, so that each is one
// prepared statement; a shorter batch repeats its last key.
const byKeysBatch = 100

// numbered returns n numbered placeholders, "$1, $2, … $n".
func numbered(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "$%d", i)
	}
	return b.String()
}
