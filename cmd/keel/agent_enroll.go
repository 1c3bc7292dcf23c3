package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"keel/internal/bus"
	"keel/internal/config"
	"keel/internal/records"
	"keel/internal/server"
	"keel/internal/store"
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
		Short: "Issue each host's own bus identity (run where the servers' bus credentials and store are)",
		Long: `enroll writes, for each HOST, the bus credentials file of that host's agent
alone (OUT_DIR/HOST-bus-credentials.json, mode 0600), derived from the
servers' credentials (--nats-credentials, default DATA_DIR/bus-credentials.json)
and the host's enrollment epoch, which it raises in the store ([keel] db):
enrolling a host again rotates its identity (the earlier file is refused)
and lifts a revocation; no other host's identity changes. Copy the file to
the host and start its agent with --nats-credentials FILE: the bus then
lets it subscribe to its own host's subjects only and publish its own
reports and the peer calls of a live migration, and the servers refuse
whatever it sends about another host. Without an identity for a host, no
agent can register it.

The embedded bus of keel server checks every identity against the store
by itself, and drops the connections of an identity rotated or revoked
(within a second). An external NATS needs them in its configuration:
--nats-conf FILE writes the authorization block (the servers' user and
every host enrolled or registered and not revoked, at its epoch) to
include in nats-server's configuration; reload nats-server after.`,
		Example: `  keel agent enroll h01 h02 --out-dir /tmp/enroll
  scp /tmp/enroll/h01-bus-credentials.json h01:/etc/keel/bus.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, hosts []string) error {
			return withAgentIdentities(cmd, cf, func(ctx context.Context, servers bus.Credentials, st store.Store) error {
				if err := os.MkdirAll(outDir, 0o700); err != nil {
					return fmt.Errorf("enroll: %w", err)
				}
				for _, h := range hosts {
					c, err := st.GetAgentCredential(ctx, h)
					if errors.Is(err, store.ErrNotFound) {
						c, err = store.AgentCredential{Host: h}, nil
					}
					if err != nil {
						return fmt.Errorf("enroll %s: %w", h, err)
					}
					c.Epoch++
					c.Revoked = false
					c.UpdatedAt = time.Now().UnixMicro()
					ac, err := bus.AgentCredentialsAt(servers, h, c.Epoch)
					if err != nil {
						return fmt.Errorf("enroll %s: %w", h, err)
					}
					path := filepath.Join(outDir, h+"-bus-credentials.json")
					if err := bus.WriteCredentials(path, ac); err != nil {
						return fmt.Errorf("enroll %s: %w", h, err)
					}
					// The record last: until it is written, the host's
					// earlier identity still holds.
					if err := st.PutAgentCredential(ctx, c); err != nil {
						return fmt.Errorf("enroll %s: %w", h, err)
					}
					fmt.Fprintln(cmd.OutOrStdout(), path)
				}
				return writeNATSConf(ctx, cmd.OutOrStdout(), natsConf, servers, st)
			})
		},
	}
	cf = addConfigFlags(cmd, "data-dir", "nats-credentials")
	f := cmd.Flags()
	f.StringVar(&outDir, "out-dir", ".", "directory to write HOST-bus-credentials.json into")
	f.StringVar(&natsConf, "nats-conf", "", "also write an external nats-server's authorization block to this file")
	return cmd
}

// agentRevokeCommand revokes hosts' bus identities.
func agentRevokeCommand() *cobra.Command {
	var (
		cf       *configFlags
		natsConf string
	)
	cmd := &cobra.Command{
		Use:   "revoke HOST...",
		Short: "Revoke each host's bus identity, that host's alone (run where the servers' store is)",
		Long: `revoke marks each HOST's bus identity revoked in the store ([keel] db). The
servers refuse every report and store call of a revoked host (within a
second), and the embedded bus of keel server drops its connections and
refuses it from then on. No other host is affected. keel agent enroll
HOST issues it a new identity (and lifts the revocation).

With an external NATS, the servers still refuse the host's reports, but
nats-server keeps taking its connection until its configuration drops the
user: write the authorization block again (--nats-conf FILE, now without
the revoked hosts) and reload nats-server (nats-server --signal reload, or
SIGHUP), which closes the connections of users no longer in it.`,
		Example: `  keel agent revoke h01
  keel agent revoke h01 --nats-conf /etc/nats/keel-auth.conf && nats-server --signal reload`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, hosts []string) error {
			return withAgentIdentities(cmd, cf, func(ctx context.Context, servers bus.Credentials, st store.Store) error {
				for _, h := range hosts {
					if err := bus.ValidHostName(h); err != nil {
						return fmt.Errorf("revoke %s: %w", h, err)
					}
					c, err := st.GetAgentCredential(ctx, h)
					if errors.Is(err, store.ErrNotFound) {
						c, err = store.AgentCredential{Host: h}, nil
					}
					if err != nil {
						return fmt.Errorf("revoke %s: %w", h, err)
					}
					c.Revoked = true
					c.UpdatedAt = time.Now().UnixMicro()
					if err := st.PutAgentCredential(ctx, c); err != nil {
						return fmt.Errorf("revoke %s: %w", h, err)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", h)
				}
				return writeNATSConf(ctx, cmd.OutOrStdout(), natsConf, servers, st)
			})
		},
	}
	cf = addConfigFlags(cmd, "data-dir", "nats-credentials")
	cmd.Flags().StringVar(&natsConf, "nats-conf", "", "also write an external nats-server's authorization block (without the revoked hosts) to this file")
	return cmd
}

// withAgentIdentities loads the configuration, the servers' bus
// credentials and the store, and runs fn.
func withAgentIdentities(cmd *cobra.Command, cf *configFlags, fn func(ctx context.Context, servers bus.Credentials, st store.Store) error) error {
	log := cf.logger()
	cfg, err := cf.load(cmd, log)
	if err != nil {
		return err
	}
	servers, err := serversCredentials(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
	defer cancel()
	st, err := server.OpenStore(ctx, cfg.Keel.DB, cfg.Keel.DataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(ctx, servers, st)
}

func serversCredentials(cfg config.Config) (bus.Credentials, error) {
	credsFile := cfg.Keel.NATSCredentials
	if credsFile == "" {
		credsFile = filepath.Join(cfg.Keel.DataDir, bus.CredentialsFile)
	}
	servers, err := bus.ReadCredentials(credsFile)
	if err != nil {
		return bus.Credentials{}, fmt.Errorf("reading the servers' bus credentials (--nats-credentials): %w", err)
	}
	return servers, nil
}

// writeNATSConf writes, if path is set, the authorization block of every
// host that is enrolled or registered and not revoked, at its epoch.
func writeNATSConf(ctx context.Context, out io.Writer, path string, servers bus.Credentials, st store.Store) error {
	if path == "" {
		return nil
	}
	hosts := map[string]int64{}
	svcs, err := st.ListServices(ctx)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	for _, s := range svcs {
		if s.Binary != records.ServerBinary {
			hosts[s.Host] = 0
		}
	}
	creds, err := st.ListAgentCredentials(ctx)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	for _, c := range creds {
		if c.Revoked {
			delete(hosts, c.Host)
		} else {
			hosts[c.Host] = c.Epoch
		}
	}
	block, err := bus.AuthorizationConfigAt(servers, hosts)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintln(out, path)
	return nil
}
