package main

import (
	"context"
	"io"
	"strings"

	"fmt"
	"keel/internal/config"
	"keel/internal/placement"
	"os"

	"github.com/spf13/cobra"

	"keel/internal/client"
	"keel/internal/sim/scenario"
)

func simExportCommand() *cobra.Command {
	var (
		cloud    string
		duration float64
		novaConf string
		asNova   bool
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
are left out, with a line on stderr for each.

The cloud may also be an OpenStack Nova cloud (keel tells by whether it
serves keel's admin API). keel then reads, as an admin, Nova's compute API
(os-hypervisors, os-services, every project's servers with their flavors,
os-aggregates, os-server-groups) and Placement (each host's provider:
inventories with reserved amounts and allocation ratios, usages, traits and
allocations — Placement is the truth, the hypervisor rows are not). The
compute API does not expose the scheduler's options: --nova-conf reads them
from the cloud's nova.conf; what keel cannot apply is named on stderr.
A clouds.yaml cloud may give a token and endpoints instead of a Keystone
login (auth_type: admin_token, auth: {token}, compute_endpoint_override,
placement_endpoint_override).` + clientLong,
		Example: `  keel sim export > cloud.toml
  keel sim export --os-cloud nova --nova-conf /etc/nova/nova.conf > cloud.toml
  keel sim export --os-cloud keel --duration 7200 > cloud.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !(duration > 0) || duration > scenario.MaxDuration {
				return fmt.Errorf("--duration must be more than 0 and at most %v seconds, got %v", scenario.MaxDuration, duration)
			}
			env := environOf(cmd.Context())
			c, err := client.Connect(cmd.Context(), env.clientOptions(client.Options{Cloud: cloud}))
			if err != nil {
				return err
			}
			snap, err := exportSnapshot(cmd.Context(), c, env.path(novaConf), asNova, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			sc, notes, err := scenario.FromSnapshot(snap)
			for _, n := range notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "keel sim export:", n)
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
	cmd.Flags().BoolVar(&asNova, "as-nova", false, "read the cloud through Nova's compute API and Placement even when it is keel (to compare with keel's own reading)")
	cmd.Flags().StringVar(&novaConf, "nova-conf", "", "for a Nova cloud: its nova.conf, for the scheduler's options ([filter_scheduler], [scheduler], [DEFAULT]); without it Nova's defaults are assumed and said so")
	return cmd
}

// exportSnapshot reads the cloud: keel's own snapshot, or a Nova cloud's
// read through its compute API and Placement with the scheduler's options
// from novaConf. Notes go to notes.
func exportSnapshot(ctx context.Context, c *client.Client, novaConf string, asNova bool, notes io.Writer) (scenario.Snapshot, error) {
	isKeel, err := c.IsKeel(ctx)
	if err != nil {
		return scenario.Snapshot{}, err
	}
	isKeel = isKeel && !asNova
	if isKeel {
		if novaConf != "" {
			return scenario.Snapshot{}, fmt.Errorf("cloud %s is keel, which reports its own options: --nova-conf is for a Nova cloud", c.Cloud())
		}
		return c.CloudSnapshot(ctx)
	}
	nc, readNotes, err := c.ReadNova(ctx)
	for _, n := range readNotes {
		fmt.Fprintln(notes, "keel sim export:", n)
	}
	if err != nil {
		return scenario.Snapshot{}, err
	}
	cfg, err := novaOptions(novaConf, notes)
	if err != nil {
		return scenario.Snapshot{}, err
	}
	fmt.Fprintln(notes, "keel sim export: allocation ratios and reserved amounts are Placement's inventories (what Nova enforces), not nova.conf's")
	fmt.Fprintln(notes, "keel sim export: Nova's API does not say which zone a server asked for: servers are written without one")
	snap := nc.Snapshot(scenario.SchedulerSnapshot(cfg.SchedulerConfig()), cfg.SnapshotCompute())
	// The simulator counts a host's usage as its instances' flavors: say
	// where Placement holds more or less (a move in flight, a leak).
	sum := map[string]int64{}
	for _, in := range snap.Instances {
		sum[in.Host] += in.Flavor.RAMMB
	}
	for _, h := range snap.Hosts {
		if got := h.Used[placement.MemoryMB]; got != sum[h.Name] {
			fmt.Fprintf(notes, "keel sim export: host %s: Placement holds %d MB of memory, its servers' flavors %d MB (a move in flight?): the file has the servers\n", h.Name, got, sum[h.Name])
		}
	}
	return snap, nil
}

// novaOptions reads a Nova cloud's scheduler and compute options from its
// nova.conf (Nova's defaults without one, said on notes).
func novaOptions(path string, notes io.Writer) (config.Config, error) {
	if path == "" {
		cfg := config.NovaDefaults()
		sc := cfg.SchedulerConfig()
		fmt.Fprintf(notes, "keel sim export: no --nova-conf: assuming Nova's scheduler defaults (enabled_filters %s, every weigher, host_subset_size %d, shuffle_best_same_weighed_hosts %v); pass --nova-conf /etc/nova/nova.conf for the cloud's own\n",
			strings.Join(sc.EnabledFilters, ","), sc.HostSubsetSize, sc.ShuffleBestSameWeighedHosts)
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return config.Config{}, fmt.Errorf("reading --nova-conf: %w", err)
	}
	cfg, warns, err := config.ParseNova(path, data)
	ignored := 0
	for _, w := range warns {
		if strings.HasPrefix(w.Msg, "recognised Nova") {
			ignored++ // not about scheduling
			continue
		}
		fmt.Fprintln(notes, "keel sim export:", w)
	}
	if ignored > 0 {
		fmt.Fprintf(notes, "keel sim export: %s: %d options not about scheduling were ignored\n", path, ignored)
	}
	if err != nil {
		return config.Config{}, fmt.Errorf("reading --nova-conf: %w", err)
	}
	return cfg, nil
}
