// Package sqlstore is the part of keel's two SQL stores (sqlite, postgres)
// that is the same in both, written once over a small Dialect:
//
//   - Migrate, the schema-migration runner: numbered NNNN_name.sql files
//     applied in order in one transaction, recorded in schema_version, a
//     newer database refused, and (PostgreSQL) an advisory lock so that
//     servers starting together migrate once;
//   - Records, the tables that keep a compute record as JSON beside the
//     columns it is looked up by: host records, services, instances,
//     migrations, instance actions, flavors, aggregates, server groups,
//     key pairs, quota limits and move plans, with their rules (a record
//     version checked by one conditional UPDATE, a change-stream note on
//     every write the scheduler's view follows, IDs from the database
//     copied into the JSON);
//   - the identity directory (one versioned document, written only at
//     the version its writer read) and the agents' credential records;
//   - the provider rules (providers.go): EditProvider, the one composition
//     of every edit of a provider (read and lock it, check and decide the
//     new state — generation checked, names normalised, traits known,
//     parent checked, generation bumped — write it, note the change), and
//     CreateProvider's and DeleteProvider's; the backend supplies the
//     reads (ProviderTx) and the writes; and creating and listing
//     placement's custom traits and resource classes (names.go).
//
// A backend lends Records a DB: reads, a statement on its own, and write
// transactions whose Tx runs statements and notes changes. The backend
// keeps what is deliberately its own: how a transaction is run (SQLite's
// single writer with prepared statements; PostgreSQL's pipelines, row
// locks and retries), how the change stream is numbered and trimmed, and
// the placement write path (allocations: PostgreSQL's lock order and
// batching, SQLite's single writer), whose decisions placement.PlanWrites
// makes for both.
package sqlstore
