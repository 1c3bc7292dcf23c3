package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"keel/internal/client"
)

// serverClientCommands are keel server's subcommands: the compute API's
// servers, as openstackclient's "server" commands.
func serverClientCommands() []*cobra.Command {
	return []*cobra.Command{serverListCommand(), serverShowCommand(), serverCreateCommand(), serverDeleteCommand(), serverMigrateCommand()}
}

func serverListCommand() *cobra.Command {
	var (
		cf   *clientFlags
		host string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List servers: every project's for an admin",
		Long: `list shows every server (all projects, all_tenants=1, when the cloud's
user is an admin) with its status, task, host and flavor, sorted by name.` + clientLong,
		Example: `  keel server list
  keel server list --host h02
  keel server list --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			ss, err := c.Servers(cmd.Context(), true)
			if err != nil {
				return err
			}
			if host != "" {
				kept := ss[:0]
				for _, s := range ss {
					if s.Host == host {
						kept = append(kept, s)
					}
				}
				ss = kept
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				return writeJSON(out, ss)
			}
			t := newTable(out, "ID", "NAME", "STATUS", "TASK", "HOST", "FLAVOR")
			for _, s := range ss {
				t.row(s.ID, s.Name, s.Status, s.TaskState, s.Host, flavorLabel(s))
			}
			return t.flush()
		},
	}
	cf = addClientFlags(cmd)
	cmd.Flags().StringVar(&host, "host", "", "only the servers on this host")
	return cmd
}

func flavorLabel(s client.Server) string {
	if s.FlavorName != "" {
		return s.FlavorName
	}
	return s.FlavorID
}

func serverShowCommand() *cobra.Command {
	var cf *clientFlags
	cmd := &cobra.Command{
		Use:   "show ID|NAME",
		Short: "Show one server",
		Long: `show prints one server's fields: status, vm and task state, host, flavor,
project, timestamps and, for a server in ERROR, its fault. A name must
match exactly one server.` + clientLong,
		Example: `  keel server show web1
  keel server show 4f4c1791-4201-4544-9bff-a743776d4106 --format json`,
		Args: exactArg("show", "ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			s, err := c.FindServer(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printServer(cmd.OutOrStdout(), cf, s)
		},
	}
	cf = addClientFlags(cmd)
	return cmd
}

func printServer(w io.Writer, cf *clientFlags, s client.Server) error {
	if cf.json() {
		return writeJSON(w, s)
	}
	t := newTable(w, "FIELD", "VALUE")
	fields := [][2]string{
		{"id", s.ID}, {"name", s.Name}, {"status", s.Status}, {"vm_state", s.VMState}, {"task_state", s.TaskState},
		{"power_state", s.PowerState}, {"host", s.Host}, {"flavor", flavorLabel(s)}, {"availability_zone", s.Zone},
		{"project_id", s.ProjectID}, {"user_id", s.UserID}, {"created", stamp(s.Created)}, {"updated", stamp(s.Updated)},
	}
	if s.Fault != "" {
		fields = append(fields, [2]string{"fault", s.Fault})
	}
	for _, f := range fields {
		t.row(f[0], f[1])
	}
	return t.flush()
}

func serverCreateCommand() *cobra.Command {
	var (
		cf      *clientFlags
		flavor  string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create NAME --flavor FLAVOR",
		Short: "Boot a server of a flavor",
		Long: `create boots a server of a flavor (by id or name, e.g. m1.small) with no
networks ("networks": "none"); the scheduler picks its host. It prints the
server as first shown (BUILD). With --wait it polls until the server is
ACTIVE or in ERROR, and fails with the fault (e.g. "No valid host") on ERROR.` + clientLong,
		Example: `  keel server create web1 --flavor m1.small
  keel server create web1 --flavor 2 --wait
  keel server create big --flavor m1.xlarge --wait --timeout 30s`,
		Args: exactArg("create", "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if flavor == "" {
				return errors.New("create needs --flavor (an id or a name such as m1.small; keel dev creates m1.tiny … m1.xlarge)")
			}
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			s, err := c.CreateServer(cmd.Context(), args[0], flavor)
			if err != nil {
				return err
			}
			if !wait {
				return printServer(cmd.OutOrStdout(), cf, s)
			}
			flavorName := s.FlavorName
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			s, err = c.WaitServer(ctx, s.ID, pollInterval, func(s client.Server) bool { return s.Status != "BUILD" })
			if err != nil {
				return waitError(err, timeout, fmt.Sprintf("server %s (%s) is still %s", args[0], s.ID, s.Status))
			}
			if s.FlavorName == "" {
				s.FlavorName = flavorName
			}
			if err := printServer(cmd.OutOrStdout(), cf, s); err != nil {
				return err
			}
			if s.Status != "ACTIVE" {
				reason := s.Fault
				if reason == "" {
					reason = "no fault recorded"
				}
				return fmt.Errorf("server %s (%s) is %s: %s", s.Name, s.ID, s.Status, reason)
			}
			return nil
		},
	}
	cf = addClientFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&flavor, "flavor", "", "flavor id or name (required)")
	f.BoolVar(&wait, "wait", false, "wait until the server is ACTIVE or in ERROR")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait, give up after this long")
	return cmd
}

func serverDeleteCommand() *cobra.Command {
	var (
		cf      *clientFlags
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "delete ID|NAME...",
		Short: "Delete servers",
		Long: `delete deletes one or more servers (by id, or by a name that matches exactly
one server). With --wait it polls until each is gone.` + clientLong,
		Example: `  keel server delete web1
  keel server delete web1 web2 --wait`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("delete needs at least one server: keel server delete ID|NAME...")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var deleted []client.Server
			for _, ref := range args {
				s, err := c.FindServer(ctx, ref)
				if err != nil {
					return err
				}
				if err := c.DeleteServer(ctx, s.ID); err != nil {
					return err
				}
				deleted = append(deleted, s)
			}
			out := cmd.OutOrStdout()
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			for _, s := range deleted {
				verb := "deleting"
				if wait {
					last, err := c.WaitServer(wctx, s.ID, pollInterval, func(s client.Server) bool { return s.Status == "DELETED" })
					if err != nil {
						return waitError(err, timeout, fmt.Sprintf("server %s (%s) is still %s", s.Name, s.ID, last.Status))
					}
					verb = "deleted"
				}
				if !cf.json() {
					fmt.Fprintf(out, "%s server %s (%s)\n", verb, s.Name, s.ID)
				}
			}
			if cf.json() {
				return writeJSON(out, deleted)
			}
			return nil
		},
	}
	cf = addClientFlags(cmd)
	f := cmd.Flags()
	f.BoolVar(&wait, "wait", false, "wait until the servers are gone")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait, give up after this long")
	return cmd
}

func serverMigrateCommand() *cobra.Command {
	var (
		cf      *clientFlags
		live    bool
		host    string
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "migrate --live ID|NAME",
		Short: "Live-migrate a server to another host",
		Long: `migrate --live moves a running server to another host without stopping it
(os-migrateLive, block_migration "auto"): to --host, or to the host the
scheduler picks (the source excluded). keel implements live migration only.

A migration goes accepted → queued → preparing → running → completed, or
ends failed, error or cancelled. With --wait, migrate follows it (the
server's in-progress migration, then os-migrations once it ended) and prints
a line each time its status or the share of memory copied changes; it exits
non-zero unless the migration completed. Pre-check failures (no valid host,
a host that cannot take the server) are reported at once. With --format
json, each line is the migration record as it was seen (JSON lines).` + clientLong,
		Example: `  keel server migrate --live web1
  keel server migrate --live web1 --host h03 --wait
  keel server migrate --live 4f4c1791-4201-4544-9bff-a743776d4106 --wait --timeout 2m`,
		Args: exactArg("migrate --live", "ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !live {
				return errors.New("keel implements live migration only: pass --live (keel server migrate --live ID|NAME)")
			}
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := c.FindServer(ctx, args[0])
			if err != nil {
				return err
			}
			start := time.Now()
			w, err := c.LiveMigrate(ctx, s.ID, host)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			report := func(m client.Migration) {
				if cf.json() {
					_ = writeJSONLine(out, m)
					return
				}
				fmt.Fprintln(out, progressLine(s, m, time.Since(start)))
			}
			if !wait {
				m, found, err := w.Poll(ctx)
				if err != nil {
					return err
				}
				if !found {
					fmt.Fprintf(out, "live migration of server %s (%s) from %s requested\n", s.Name, s.ID, s.Host)
					return nil
				}
				report(m)
				if !cf.json() && !client.Terminal(m.Status) {
					fmt.Fprintf(out, "follow it with: keel migration list --server %s\n", s.ID)
				}
				return migrationOutcome(ctx, c, s, m)
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			m, err := w.Wait(wctx, pollInterval, report)
			if err != nil {
				what := fmt.Sprintf("no migration of server %s appeared", s.Name)
				if m.ID != 0 {
					what = fmt.Sprintf("migration %d of server %s is still %s (%s); it goes on — keel migration list --server %s follows it",
						m.ID, s.Name, m.Status, route(m), s.ID)
				}
				return waitError(err, timeout, what)
			}
			if err := migrationOutcome(ctx, c, s, m); err != nil {
				return err
			}
			if !cf.json() {
				fmt.Fprintf(out, "server %s now runs on %s\n", s.Name, m.Dest)
			}
			return nil
		},
	}
	cf = addClientFlags(cmd)
	f := cmd.Flags()
	f.BoolVar(&live, "live", false, "live-migrate (required: the only kind keel implements)")
	f.StringVar(&host, "host", "", "destination host (default: the scheduler picks)")
	f.BoolVar(&wait, "wait", false, "follow the migration until it ends, printing its progress")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait, give up waiting after this long (the migration goes on)")
	return cmd
}

// migrationOutcome is nil unless m ended without moving the server.
func migrationOutcome(ctx context.Context, c *client.Client, s client.Server, m client.Migration) error {
	if !client.Terminal(m.Status) || client.Succeeded(m.Status) {
		return nil
	}
	msg := fmt.Sprintf("migration %d of server %s %s (%s)", m.ID, s.Name, m.Status, route(m))
	if reason := c.FailureReason(ctx, s.ID); reason != "" {
		msg += ": " + reason
	} else {
		msg += " (the compute API reports no reason)"
	}
	if now, err := c.GetServer(ctx, s.ID); err == nil && now.Host != "" {
		msg += fmt.Sprintf("; the server is %s on %s", now.Status, now.Host)
	}
	return errors.New(msg)
}

func progressLine(s client.Server, m client.Migration, elapsed time.Duration) string {
	line := fmt.Sprintf("%6.1fs  migration %d of %s: %-10s %s", elapsed.Seconds(), m.ID, s.Name, m.Status, route(m))
	if m.Status == client.MigrationRunning && m.MemoryTotalBytes > 0 {
		line += fmt.Sprintf("  memory %d%% of %s", m.MemoryPercent(), mib(m.MemoryTotalBytes))
	}
	return line
}

func route(m client.Migration) string {
	dest := m.Dest
	if dest == "" {
		dest = "?"
	}
	return m.Source + " → " + dest
}

func mib(bytes int64) string {
	if bytes >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(bytes)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", bytes>>20)
}

// writeJSONLine prints v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// waitError explains a wait that ended early: the timeout, or an
// interrupt.
func waitError(err error, timeout time.Duration, what string) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("gave up waiting after %v (--timeout): %s", timeout, what)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("stopped waiting: %s", what)
	}
	return err
}

// exactArg accepts exactly one argument, and says which when it is missing.
func exactArg(verb, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return fmt.Errorf("%s needs exactly one %s, got %d arguments", verb, what, len(args))
		}
		return nil
	}
}
