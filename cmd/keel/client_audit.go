package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"keel/internal/client"
)

// violationsError is audit's failure: the count, after the lines were
// printed.
type violationsError int

func (n violationsError) Error() string {
	if n == 1 {
		return "the audit found 1 violation"
	}
	return fmt.Sprintf("the audit found %d violations", int(n))
}

func auditCommand() *cobra.Command {
	var cf *clientFlags
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Check the cloud's invariants; exit 1 when one is violated",
		Long: `audit asks keel to check the cloud's invariants (GET /keel/v1/audit,
admin): every host's usage within its capacity; every instance's allocation
on its host only (a migrating instance's on its destination, its
migration's on the source) — no capacity held twice, no allocation without
an instance or a migration in progress; nothing stuck (building or
deleting past [DEFAULT] instance_build_timeout, a migration without
progress for [keel] migration_stall_timeout, each plus service_down_time
and rpc_timeout: the conductor ends those itself first); every ACTIVE instance's guest
on its host and no guest without its instance (the server asks each up
agent for its guests); no live-migration slot held by an ended migration.

It prints "0 violations", or each violation and their count, then what it
could not check (a host that is down, say), and exits with status 1 when
there are violations, so scripts and tests can rely on it. os-resetState
(openstack server set --state) and keel migration reset put most findings
right.` + clientLong,
		Example: `  keel audit
  keel audit --format json
  keel audit && echo consistent`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			rep, err := c.AuditReport(cmd.Context())
			if err != nil {
				return err
			}
			v := make([]string, 0, len(rep.Findings))
			for _, f := range rep.Findings {
				v = append(v, f.Text)
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				if rep.Findings == nil {
					rep.Findings = []client.AuditFinding{}
				}
				if rep.Unchecked == nil {
					rep.Unchecked = []string{}
				}
				if err := writeJSON(out, map[string]any{"violations": v, "findings": rep.Findings, "unchecked": rep.Unchecked}); err != nil {
					return err
				}
			} else {
				for _, line := range v {
					fmt.Fprintln(out, line)
				}
				if len(v) == 1 {
					fmt.Fprintln(out, "1 violation")
				} else {
					fmt.Fprintf(out, "%d violations\n", len(v))
				}
				for _, u := range rep.Unchecked {
					fmt.Fprintln(out, "not checked: "+u)
				}
			}
			if len(v) > 0 {
				return violationsError(len(v))
			}
			return nil
		},
	}
	cf = addClientFlags(cmd)
	return cmd
}
