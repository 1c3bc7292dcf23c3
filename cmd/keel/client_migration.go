package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"keel/internal/client"
	"keel/internal/records"
)

func migrationCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migration",
		Short: "Migration records (live migrations), as the compute API reports them",
	}
	cmd.AddCommand(migrationListCommand(), migrationResetCommand())
	return cmd
}

func migrationListCommand() *cobra.Command {
	var (
		cf                   *clientFlags
		host, status, server string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List migrations, newest first",
		Long: `list shows migration records (os-migrations, admin), newest first: id,
server, source and destination hosts, status, type and when the record last
changed (UTC). --host matches the source or the destination.

Statuses: accepted, queued, preparing, running, then completed, or failed,
error, cancelled (a cold migration's or resize's: pre-migrating, migrating,
post-migrating, finished, confirming, confirmed, reverting, reverted; an
evacuation's: done). Another --status is refused.` + clientLong,
		Example: `  keel migration list
  keel migration list --host h01 --status completed
  keel migration list --server web1 --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkMigrationStatus(status); err != nil {
				return err
			}
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			f := client.MigrationFilter{Host: host, Status: status}
			if server != "" {
				s, err := c.FindServer(ctx, server)
				if err != nil {
					return err
				}
				f.InstanceUUID = s.ID
			}
			ms, err := c.Migrations(ctx, f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				return writeJSON(out, ms)
			}
			if len(ms) == 0 {
				fmt.Fprintln(out, "no migrations")
				return nil
			}
			// Servers' names, best effort (a deleted server has none).
			names := map[string]string{}
			if ss, err := c.Servers(ctx, true); err == nil {
				for _, s := range ss {
					names[s.ID] = s.Name
				}
			}
			t := newTable(out, "ID", "SERVER", "INSTANCE", "SOURCE", "DEST", "STATUS", "TYPE", "UPDATED")
			for _, m := range ms {
				t.row(fmt.Sprint(m.ID), names[m.InstanceUUID], m.InstanceUUID, m.Source, m.Dest, m.Status, m.Type, stamp(m.Updated))
			}
			return t.flush()
		},
	}
	cf = addClientFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&host, "host", "", "only migrations from or to this host")
	f.StringVar(&status, "status", "", "only migrations in this status (e.g. running, completed, failed)")
	f.StringVar(&server, "server", "", "only migrations of this server (ID or NAME)")
	return cmd
}

func migrationResetCommand() *cobra.Command {
	var cf *clientFlags
	cmd := &cobra.Command{
		Use:   "reset ID",
		Short: "End a stuck migration, putting its allocations and destination right",
		Long: `reset ends a migration that is stuck in a non-final status (keel audit
reports it: no progress for [keel] migration_stall_timeout and a margin),
for instance one whose source agent never reports again. The conductor
ends it in error through its state machine, whatever its phase: before the
guest moved, the instance's allocation goes back to the source and the
destination's claim and prepared guest are dropped; after, the move is
finished on the destination. Its source slot is freed either way
(POST /keel/v1/migrations/ID/reset, admin), and the reset is recorded as a
reset-migration action of the instance (openstack server event list). It
prints the final record; a migration already final is refused (409).` + clientLong,
		Example: `  keel audit
  keel migration reset 12
  keel migration reset 12 --format json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("a migration ID is a positive integer (keel migration list shows them), not %q", args[0])
			}
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			m, err := c.ResetMigration(cmd.Context(), id)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				return writeJSON(out, m)
			}
			fmt.Fprintf(out, "migration %d of %s (%s → %s): %s\n", m.ID, m.InstanceUUID, m.Source, orDash(m.Dest), m.Status)
			return nil
		},
	}
	cf = addClientFlags(cmd)
	return cmd
}

// checkMigrationStatus refuses a --status no migration can have (the
// compute API, as Nova's, would answer an empty list).
func checkMigrationStatus(status string) error {
	if status == "" || slices.Contains(records.MigrationStatuses, records.MigrationStatus(status)) {
		return nil
	}
	names := make([]string, len(records.MigrationStatuses))
	for i, s := range records.MigrationStatuses {
		names[i] = string(s)
	}
	return fmt.Errorf("--status %q is no migration status; the statuses are %s", status, strings.Join(names, ", "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
