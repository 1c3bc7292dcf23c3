package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"keel/internal/client"
	"keel/internal/sim/scenario"
)

func simExportCommand() *cobra.Command {
	var (
		cloud    string
		duration float64
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the live cloud as a scenario file, for keel sim to replay",
		Long: `export reads the running cloud through keel's admin API (GET /keel/v1/cloud)
and writes it to stdout as an ordinary scenario file: one [[hosts]] section per
compute host (its inventories, reserved amounts, zone, traits, disabled or not),
the flavors in use, one [[instance]] per instance with its host, flavor, server
group and requested zone, the server groups and aggregates, and the scheduler's
and compute options in force. Edit it, then preview a change on the copy:

  keel sim cloud.toml --drain h01,h02 --rebalance

Hosts without VCPU, MEMORY_MB and DISK_GB inventories (and their instances)
are left out, with a line on stderr for each.` + clientLong,
		Example: `  keel sim export > cloud.toml
  keel sim export --os-cloud keel --duration 7200 > cloud.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !(duration > 0) || duration > scenario.MaxDuration {
				return fmt.Errorf("--duration must be more than 0 and at most %v seconds, got %v", scenario.MaxDuration, duration)
			}
			c, err := client.Connect(cmd.Context(), client.Options{Cloud: cloud})
			if err != nil {
				return err
			}
			snap, err := c.CloudSnapshot(cmd.Context())
			if err != nil {
				return err
			}
			sc, notes, err := scenario.FromSnapshot(snap)
			for _, n := range notes {
				fmt.Fprintln(os.Stderr, "keel sim export:", n)
			}
			if err != nil {
				return fmt.Errorf("exporting cloud %s: %w", c.Cloud(), err)
			}
			sc.Name = c.Cloud()
			sc.Duration = duration
			return sc.WriteTOML(cmd.OutOrStdout(),
				fmt.Sprintf("cloud %q exported by keel sim export at %s", c.Cloud(), snap.TakenAt.Format("2006-01-02T15:04:05Z")),
				fmt.Sprintf("%d hosts, %d instances, %d server groups, %d aggregates. Format: scenarios/README.md.", len(sc.HostGroups), len(sc.Instances), len(sc.ServerGroups), len(sc.Aggregates)),
				"Add [[drain]], [[event]] or [[workload]] sections, or use keel sim's --drain, --rebalance and --set.")
		},
	}
	cmd.Flags().StringVar(&cloud, "os-cloud", "", `cloud in clouds.yaml (default: $OS_CLOUD, else "keel")`)
	cmd.Flags().Float64Var(&duration, "duration", scenario.ExportDuration, "the scenario's duration in seconds")
	return cmd
}
