package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"keel/internal/bus"
)

// agentEnrollCommand issues hosts' own bus identities.
func agentEnrollCommand() *cobra.Command {
	var (
		cf       *configFlags
		outDir   string
		natsConf string
	)
	cmd := &cobra.Command{
		Use:   "enroll HOST...",
		Short: "Issue each host's own bus identity (run where the servers' bus credentials are)",
		Long: `enroll writes, for each HOST, the bus credentials file of that host's agent
alone (OUT_DIR/HOST-bus-credentials.json, mode 0600), derived from the
servers' credentials (--nats-credentials, default DATA_DIR/bus-credentials.json).
Copy it to the host and start its agent with --nats-credentials FILE: the
bus then lets it subscribe to its own host's subjects only and publish its
own reports and the peer calls of a live migration, and the servers refuse
whatever it sends about another host. Without an enrollment file for a
host, no agent can register it.

The embedded bus of keel server knows every enrolled identity by itself.
An external NATS needs them in its configuration: --nats-conf FILE writes
the authorization block (the servers' user and each HOST's) to include in
nats-server's configuration.`,
		Example: `  keel agent enroll h01 h02 --out-dir /tmp/enroll
  scp /tmp/enroll/h01-bus-credentials.json h01:/etc/keel/bus.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, hosts []string) error {
			log := cf.logger()
			cfg, err := cf.load(cmd, log)
			if err != nil {
				return err
			}
			credsFile := cfg.Keel.NATSCredentials
			if credsFile == "" {
				credsFile = filepath.Join(cfg.Keel.DataDir, bus.CredentialsFile)
			}
			servers, err := bus.ReadCredentials(credsFile)
			if err != nil {
				return fmt.Errorf("reading the servers' bus credentials (--nats-credentials): %w", err)
			}
			if err := os.MkdirAll(outDir, 0o700); err != nil {
				return fmt.Errorf("enroll: %w", err)
			}
			for _, h := range hosts {
				ac, err := bus.AgentCredentials(servers, h)
				if err != nil {
					return fmt.Errorf("enroll %s: %w", h, err)
				}
				path := filepath.Join(outDir, h+"-bus-credentials.json")
				if err := bus.WriteCredentials(path, ac); err != nil {
					return fmt.Errorf("enroll %s: %w", h, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), path)
			}
			if natsConf != "" {
				block, err := bus.AuthorizationConfig(servers, hosts)
				if err != nil {
					return fmt.Errorf("enroll: %w", err)
				}
				if err := os.WriteFile(natsConf, []byte(block), 0o600); err != nil {
					return fmt.Errorf("enroll: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), natsConf)
			}
			return nil
		},
	}
	cf = addConfigFlags(cmd, "data-dir", "nats-credentials")
	f := cmd.Flags()
	f.StringVar(&outDir, "out-dir", ".", "directory to write HOST-bus-credentials.json into")
	f.StringVar(&natsConf, "nats-conf", "", "also write an external nats-server's authorization block for these hosts to this file")
	return cmd
}
