package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"keel/internal/client"
)

func migrationCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migration",
		Short: "Migration records (live migrations), as the compute API reports them",
	}
	cmd.AddCommand(migrationListCommand())
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
error, cancelled.` + clientLong,
		Example: `  keel migration list
  keel migration list --host h01 --status completed
  keel migration list --server web1 --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
