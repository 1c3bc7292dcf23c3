package main

import (
	"github.com/spf13/cobra"

	"keel/internal/server"
)

func serverCommand() *cobra.Command {
	var cf *configFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane: API, scheduler, conductor, store and bus",
		Long: `server runs keel's control plane on one listener: the identity, compute and
metrics APIs (/identity, /compute, /metrics), the scheduler, the conductor,
the SQLite store under the data dir, and an embedded NATS server for the
agents (unless --nats-url names an external one). Agents connect with the
credentials in DATA_DIR/bus-credentials.json.

Users, projects and roles are kept in the store, shared by every replica
(an older DATA_DIR/identity.json is moved there at start).
Migrations a restart interrupted are resumed at start.`,
		Example: `  keel server --data-dir /var/lib/keel --listen 127.0.0.1:8080
  keel server --config /etc/keel/keel.conf`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := cf.logger()
			cfg, err := cf.load(cmd, log)
			if err != nil {
				return err
			}
			s, err := server.Start(cmd.Context(), cfg, log)
			if err != nil {
				return err
			}
			defer s.Close()
			<-cmd.Context().Done()
			log.Info("shutting down")
			return nil
		},
	}
	cf = addConfigFlags(cmd, "data-dir", "listen", "nats-url", "nats-credentials", "policy")
	return cmd
}
