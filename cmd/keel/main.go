// Command keel is a compute control plane: it places virtual machines on
// hypervisor hosts, tracks every host's resources exactly, and
// live-migrates instances between hosts. This file only wires subcommands;
// each lives in its own file.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "keel:", err)
		os.Exit(1)
	}
}

// rootCommand assembles the command tree.
func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "keel",
		Short: "keel places VMs on hosts, tracks their resources exactly, and live-migrates them",
		Long: `keel is a compute control plane with OpenStack Nova's concepts and names:
hosts with placement inventories, a filter scheduler whose view of every host
is exact at claim time, resource trackers, and live migration.

Start with the simulator, which reproduces Nova's post-migration skew and
shows keel's fix side by side:

  keel sim scenarios/seed-hour.toml`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(withClientCommands(simCommand(), serverCommand(), agentCommand(), devCommand(), configCommand())...)
	root.AddCommand(novaExecutorCommand())
	return root
}
