package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"keel/internal/agent"
	"keel/internal/client"
	"keel/internal/records"
	"keel/internal/server"
	"keel/internal/store"
)

// devFlavors are the flavors keel dev creates (Nova's classic m1 set).
var devFlavors = []records.Flavor{
	{ID: "1", Name: "m1.tiny", VCPUs: 1, RAMMB: 512, DiskGB: 1},
	{ID: "2", Name: "m1.small", VCPUs: 1, RAMMB: 2048, DiskGB: 20},
	{ID: "3", Name: "m1.medium", VCPUs: 2, RAMMB: 4096, DiskGB: 40},
	{ID: "4", Name: "m1.large", VCPUs: 4, RAMMB: 8192, DiskGB: 80},
	{ID: "5", Name: "m1.xlarge", VCPUs: 8, RAMMB: 16384, DiskGB: 160},
}

func devCommand() *cobra.Command {
	var (
		cf    *configFlags
		hosts int
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole cloud in one process: a server and N agents (fake, QEMU or libvirt driver)",
		Long: `dev runs a keel server and N compute agents (hosts h01, h02, …) in one
process, on the embedded store and bus, in --data-dir (default ./.keel; an
existing one is reused, with its instances). On first start it creates the
user admin (role admin on project admin) and the members demo and alt_demo
(role member on projects of their names), each with a generated password
of its own in DATA_DIR/<user>-password, the m1.tiny … m1.xlarge flavors,
and DATA_DIR/clouds.yaml (mode 0600) with one cloud per user: keel (admin),
keel-demo and keel-alt_demo. It then prints the two lines that point
openstackclient at it. (keel server creates only the admin.)

With --driver qemu every guest is a real qemu-system-x86_64 process (TCG,
Debian's qemu-system-x86) running keel's tiny guest, and live migrations
copy its memory for real. Boot with --property keel_guest=fill-N or
keel_guest=dirty-N (N MiB, under the flavor's RAM) for a guest that fills
or keeps dirtying its memory; without it the guest idles. The QEMU
processes outlive keel dev (it adopts them when started again on the same
--data-dir); delete the servers to stop them.

With --driver libvirt every guest is a domain of a libvirtd (the same
guest), one libvirtd per host: [libvirt] connection_uri with {host} for
the host's name, e.g. --set 'libvirt.connection_uri=qemu+unix:///system?socket=/srv/lv/{host}/run/libvirt-sock';
a host's libvirtd reaches another's as qemu+tcp://HOST/system.`,
		Example: `  keel dev
  keel dev --hosts 12 --data-dir /tmp/keel
  keel dev --set DEFAULT.update_resources_interval=3600 --set filter_scheduler.host_subset_size=3
  keel dev --driver qemu --hosts 3 --set libvirt.live_migration_bandwidth=64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hosts < 1 || hosts > 9999 {
				return fmt.Errorf("--hosts must be between 1 and 9999, got %d", hosts)
			}
			log := cf.logger()
			cfg, err := cf.load(cmd, log)
			if err != nil {
				return err
			}
			dataDir, err := filepath.Abs(cfg.Keel.DataDir)
			if err != nil {
				return err
			}
			cfg.Keel.DataDir = dataDir
			passwords, err := server.EnsureDevUsers(dataDir)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := server.Start(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer s.Close()
			if err := ensureFlavors(ctx, s.Store()); err != nil {
				return err
			}
			var agents []*agent.Agent
			defer func() {
				for _, a := range agents {
					a.Stop()
				}
			}()
			for i := 1; i <= hosts; i++ {
				host := fmt.Sprintf("h%02d", i)
				if hosts > 99 {
					host = fmt.Sprintf("h%04d", i)
				}
				opts := agentOptions(cfg, host, filepath.Join(dataDir, "agents", host), s.BusURL(), s.Credentials())
				opts.Log = log
				a, err := agent.Start(ctx, opts)
				if err != nil {
					return err
				}
				agents = append(agents, a)
			}
			clouds := filepath.Join(dataDir, "clouds.yaml")
			var members []client.Account
			for _, u := range server.DevUsers {
				members = append(members, client.Account{Cloud: "keel-" + u, User: u, Password: passwords[u]})
			}
			if err := client.WriteCloudsYAML(clouds, s.URL(), passwords["admin"], members...); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "keel dev: %s (%s driver), API at %s, data in %s\n", count(hosts, "host", "hosts"), cfg.Keel.Driver, s.URL(), dataDir)
			fmt.Fprintf(out, "web view: %s/keel/ui/ (log in as admin with the password in %s)\n", s.URL(), filepath.Join(dataDir, "admin-password"))
			fmt.Fprintf(out, "export OS_CLIENT_CONFIG_FILE=%s\n", clouds)
			fmt.Fprintf(out, "openstack --os-cloud keel server list\n")
			<-ctx.Done()
			fmt.Fprintln(out, devStopped(context.WithoutCancel(ctx), s.Store(), cfg.Keel.Driver, dataDir))
			return nil
		},
	}
	cf = addConfigFlags(cmd)
	cmd.Flags().IntVar(&hosts, "hosts", 3, "number of hosts (agents)")
	return cmd
}

// devStopped is keel dev's last word when it is stopped: what it leaves
// (the instances, and the migrations and plans in flight, which resume
// when it starts again on the same data dir) and that the state is kept.
func devStopped(ctx context.Context, st store.Store, driver, dataDir string) string {
	msg := "keel dev: stopped; state kept in " + dataDir
	ins, err := st.ListInstances(ctx, "")
	if err != nil {
		return msg + " (could not read it: " + err.Error() + ")"
	}
	var left []string
	if len(ins) > 0 {
		left = append(left, count(len(ins), "instance", "instances"))
	}
	inFlight := false
	ms, err := st.ListMigrations(ctx, store.MigrationFilter{ActiveOnly: true})
	if err == nil && len(ms) > 0 {
		left = append(left, count(len(ms), "migration", "migrations")+" in flight")
		inFlight = true
	}
	ps, err := st.ListPlans(ctx, true)
	if err == nil {
		for _, p := range ps {
			if p.State != records.PlanRecommended {
				left = append(left, fmt.Sprintf("plan %d (%s) %s", p.ID, p.Purpose, p.State))
				inFlight = true
			}
		}
	}
	if len(left) == 0 {
		return msg + ": no instances. keel dev --data-dir " + dataDir + " starts it again."
	}
	msg += ": " + strings.Join(left, ", ") + ". keel dev --data-dir " + dataDir + " starts it again"
	if inFlight {
		msg += "; what was in flight resumes"
	}
	msg += "."
	if driver == "qemu" && len(ins) > 0 {
		msg += " The QEMU guests keep running: delete the servers to stop them."
	}
	return msg
}

func ensureFlavors(ctx context.Context, st store.Flavors) error {
	for _, f := range devFlavors {
		if _, err := st.CreateFlavor(ctx, f); err != nil && !errors.Is(err, store.ErrExists) {
			return fmt.Errorf("creating flavor %s: %w", f.Name, err)
		}
	}
	return nil
}
