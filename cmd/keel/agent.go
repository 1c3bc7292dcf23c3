package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"keel/internal/agent"
	"keel/internal/bus"
	"keel/internal/compute/libvirt"
	"keel/internal/compute/qemu"
	"keel/internal/config"
)

// agentOptions builds an agent's options from the configuration.
func agentOptions(cfg config.Config, host, dataDir, busURL string, creds bus.Credentials) agent.Options {
	hw := cfg.HostConfig("")
	hw.Host = host
	bw := float64(cfg.Libvirt.LiveMigrationBandwidth)
	return agent.Options{
		Host: host, DataDir: dataDir, BusURL: busURL, Creds: creds, Hardware: hw,
		// Nova's meaning, which the agent applies: 0 is 60 s, negative off.
		UpdateResourcesInterval: time.Duration(cfg.Default.UpdateResourcesInterval) * time.Second,
		ReportInterval:          cfg.Default.ReportInterval,
		SpawnTime:               cfg.Keel.FakeSpawnTime, StepTime: cfg.Keel.FakeStepTime, BandwidthMiBps: bw,
		Workload: cfg.Keel.FakeWorkload, Metrics: cfg.Metrics.MetricsConfig(),
		Driver: cfg.Keel.Driver,
		QEMU: qemu.Config{
			Binary: cfg.Keel.QEMUBinary, ExtraArgs: strings.Fields(cfg.Keel.QEMUArgs),
			BandwidthMiBps: int64(cfg.Libvirt.LiveMigrationBandwidth), Downtime: cfg.Libvirt.LiveMigrationDowntime,
			CompletionTimeout: cfg.Libvirt.LiveMigrationCompletionTimeout, PermitPostCopy: cfg.Libvirt.LiveMigrationPermitPostCopy,
			TimeoutAction: cfg.Libvirt.LiveMigrationTimeoutAction,
		},
		Libvirt: libvirt.Config{
			URI: cfg.Libvirt.ConnectionURI, VirtType: cfg.Libvirt.VirtType,
			Scheme: cfg.Libvirt.LiveMigrationScheme, InboundAddr: cfg.Libvirt.LiveMigrationInboundAddr,
			BandwidthMiBps: int64(cfg.Libvirt.LiveMigrationBandwidth), Downtime: cfg.Libvirt.LiveMigrationDowntime,
			CompletionTimeout: cfg.Libvirt.LiveMigrationCompletionTimeout, PermitPostCopy: cfg.Libvirt.LiveMigrationPermitPostCopy,
			PermitAutoConverge: cfg.Libvirt.LiveMigrationPermitAutoConverge, TimeoutAction: cfg.Libvirt.LiveMigrationTimeoutAction,
		},
	}
}

func agentCommand() *cobra.Command {
	var (
		cf        *configFlags
		host      string
		busURL    string
		credsFile string
		count     int
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run one hypervisor host's compute agent (fake, QEMU or libvirt driver)",
		Long: `agent runs the compute service of one host: it registers the host's
resource provider and inventory with the servers, heartbeats, runs the
periodic audit every [DEFAULT] update_resources_interval, and performs every
agent-side step of boots and live migrations with its virt driver
(--driver, [keel] driver). The fake driver keeps its guests in
DATA_DIR/guests.json, so an agent killed with kill -9 finds them again;
operations the kill cut short are reported so the conductor finishes or
rolls them back. The qemu driver runs each guest as a qemu-system-x86_64
process (TCG) with keel's own tiny guest, in DATA_DIR/qemu/UUID; its
processes outlive the agent, which adopts them (and any migration still
copying) when it starts again. The libvirt driver runs each guest as a
domain of the libvirtd at [libvirt] connection_uri ({host} in it is the
host's name), in DATA_DIR/libvirt/UUID, and migrates it with libvirt's
peer to peer migration to qemu+tcp://DEST/system (live_migration_scheme,
live_migration_inbound_addr); a copy outlives the agent in libvirtd. Their
migrations follow [libvirt] live_migration_bandwidth, _downtime,
_completion_timeout, _permit_post_copy, _permit_auto_converge (libvirt)
and _timeout_action.

Every build and copy report waits in DATA_DIR/reports until a server has
committed it, and is sent again after a restart; a restarted agent also
reports what the store still shows in flight on its host (builds, copies it
no longer runs), and its periodic audit puts an instance whose guest is gone
in ERROR.

The host's size comes from [keel] vcpus, memory_mb and disk_gb, its
overcommit from [DEFAULT] cpu/ram/disk_allocation_ratio and
reserved_host_memory_mb.`,
		Example: `  keel agent --host h01 --nats-url nats://127.0.0.1:4222 \
      --nats-credentials /var/lib/keel/bus-credentials.json --data-dir /var/lib/keel-agent/h01
  keel agent --driver qemu --host h02 --nats-url nats://n1:4222,nats://n2:4222 \
      --nats-credentials /etc/keel/bus.json --data-dir /var/lib/keel-agent/h02
  keel agent --driver libvirt --host h03 --set libvirt.connection_uri=qemu:///system \
      --nats-url nats://n1:4222 --nats-credentials /etc/keel/bus.json --data-dir /var/lib/keel-agent/h03`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := cf.logger()
			cfg, err := cf.load(cmd, log)
			if err != nil {
				return err
			}
			if host == "" {
				host = cfg.Default.Host
			}
			if busURL == "" {
				busURL = cfg.Keel.NATSURL
			}
			if busURL == "" {
				return fmt.Errorf("agent needs the bus URL: --nats-url (the keel server logs it at start) or [keel] nats_url")
			}
			if credsFile == "" {
				credsFile = cfg.Keel.NATSCredentials
			}
			if credsFile == "" {
				credsFile = filepath.Join(cfg.Keel.DataDir, bus.CredentialsFile)
			}
			creds, err := bus.ReadCredentials(credsFile)
			if err != nil {
				return fmt.Errorf("reading bus credentials (--nats-credentials): %w", err)
			}
			if count < 1 {
				return fmt.Errorf("--hosts must be at least 1, got %d", count)
			}
			agents, err := startAgents(cmd.Context(), cfg, host, count, busURL, creds, log)
			defer func() {
				for _, a := range agents {
					a.Stop()
				}
			}()
			if err != nil {
				return err
			}
			<-cmd.Context().Done()
			return nil
		},
	}
	cf = addConfigFlags(cmd, "data-dir", "driver", "nats-url", "nats-credentials")
	f := cmd.Flags()
	f.Lookup("data-dir").Usage = "directory for this agent's state: its guests, QEMU processes and sockets ([keel] data_dir)"
	f.Lookup("nats-url").Usage = "NATS URL of the keel servers' bus, several comma-separated for a cluster (the keel server logs it at start; [keel] nats_url)"
	f.Lookup("nats-credentials").Usage = "bus credentials file: the host's own (keel agent enroll), or the servers', from which the agent derives its host's identity ([keel] nats_credentials; default DATA_DIR/bus-credentials.json)"
	f.StringVar(&host, "host", "", "this host's name ([DEFAULT] host; default: the machine's hostname)")
	// The first names of --nats-url and --nats-credentials, still taken.
	f.StringVar(&busURL, "bus-url", "", "NATS URL of the keel server's bus")
	f.StringVar(&credsFile, "bus-credentials", "", "bus credentials file")
	_ = f.MarkDeprecated("bus-url", "use --nats-url")
	_ = f.MarkDeprecated("bus-credentials", "use --nats-credentials")
	f.IntVar(&count, "hosts", 1, "run this many fake hosts in this process, named HOST-1 … HOST-N, each with its data dir DATA_DIR/HOST-i (for scale tests)")
	cmd.AddCommand(agentEnrollCommand(), agentRevokeCommand())
	return cmd
}

// startAgents starts one agent named host, or count agents named host-1 …
// host-count (eight at a time), each with a data dir of its own. On an
// error it returns the agents already started, for the caller to stop.
func startAgents(ctx context.Context, cfg config.Config, host string, count int, busURL string, creds bus.Credentials, log *slog.Logger) ([]*agent.Agent, error) {
	if count == 1 {
		opts := agentOptions(cfg, host, cfg.Keel.DataDir, busURL, creds)
		opts.Log = log
		a, err := agent.Start(ctx, opts)
		if err != nil {
			return nil, err
		}
		return []*agent.Agent{a}, nil
	}
	agents := make([]*agent.Agent, count)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range count {
		name := fmt.Sprintf("%s-%d", host, i+1)
		g.Go(func() error {
			opts := agentOptions(cfg, name, filepath.Join(cfg.Keel.DataDir, name), busURL, creds)
			opts.Log = log
			a, err := agent.Start(gctx, opts)
			agents[i] = a
			return err
		})
	}
	err := g.Wait()
	started := agents[:0]
	for _, a := range agents {
		if a != nil {
			started = append(started, a)
		}
	}
	if err == nil {
		log.Info("agents started", "hosts", len(started))
	}
	return started, err
}
