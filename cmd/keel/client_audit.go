package main

import (
	"fmt"

	"github.com/spf13/cobra"
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
		Long: `audit asks keel to check its store's invariants (GET /keel/v1/audit,
admin): every host's usage within its capacity, every instance's allocation
on its host (and a migrating instance's on both hosts), no allocation
without an instance or migration. It prints "0 violations", or each
violation and their count, and exits with status 1 when there are any, so
scripts and tests can rely on it.` + clientLong,
		Example: `  keel audit
  keel audit --format json
  keel audit && echo consistent`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			v, err := c.Audit(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				if v == nil {
					v = []string{}
				}
				if err := writeJSON(out, map[string]any{"violations": v}); err != nil {
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
