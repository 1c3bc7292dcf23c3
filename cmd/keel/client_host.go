package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"keel/internal/client"
)

func hostCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Hypervisor hosts, as the compute API reports them",
	}
	cmd.AddCommand(hostListCommand(), hostEvacuateCommand(), hostDrainCommand(), hostUndrainCommand())
	return cmd
}

func hostEvacuateCommand() *cobra.Command {
	var (
		cf       *clientFlags
		wait     bool
		to       string
		asPlan   bool
		parallel int
	)
	cmd := &cobra.Command{
		Use:   "evacuate HOST",
		Short: "Rebuild every server of a host that is down on other hosts",
		Long: `evacuate asks the compute API (admin) to evacuate each server on HOST, one
evacuate action per server, and prints a line per server. HOST must be down:
forced down (` + "`openstack compute service set --down HOST nova-compute`" + `, the
fence) or silent for longer than service_down_time; otherwise each request
is refused with Nova's "Compute service of HOST is still in use".

The scheduler places each server from the claim-time view, so the servers
spread as fresh boots would. The dead host's share of their allocations
stays with each evacuation until the host comes back; its agent then
destroys the evacuated guests before it serves anything, and the
evacuations complete.

--wait waits until every server is ACTIVE on its new host (or ERROR),
printing a progress line as each one lands.

--plan makes it one evacuate-all plan instead (POST /keel/v1/plans, admin):
stored and resumed after a server restart, served before any drain or
rebalance, each evacuation re-checked as it starts (the server still on
HOST, HOST still down), a failed one retried once elsewhere, --parallel at
a time, never onto a draining host; keel plan show follows it, and --wait
prints a line per move.` + clientLong,
		Example: `  keel host evacuate h03 --wait
  keel host evacuate h03 --target h05
  keel host evacuate h03 --plan --parallel 4 --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			host := args[0]
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			if asPlan {
				return evacuatePlan(cmd, c, cf, client.EvacuateOptions{Host: host, Target: to, Parallel: parallel}, wait)
			}
			if cmd.Flags().Changed("parallel") {
				return fmt.Errorf("--parallel goes with --plan")
			}
			ss, err := c.Servers(cmd.Context(), true)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var moving []client.Server
			for _, s := range ss {
				if s.Host != host {
					continue
				}
				if err := c.Evacuate(cmd.Context(), s.ID, to); err != nil {
					fmt.Fprintf(out, "%s (%s): %v\n", s.Name, s.ID, err)
					continue
				}
				fmt.Fprintf(out, "%s (%s): evacuating from %s\n", s.Name, s.ID, host)
				moving = append(moving, s)
			}
			if len(moving) == 0 {
				return fmt.Errorf("no server of %s was evacuated (is the host down, and does it run servers? keel host list shows both)", host)
			}
			if !wait {
				return nil
			}
			for i, s := range moving {
				got, err := c.WaitServer(cmd.Context(), s.ID, 500*time.Millisecond, func(s client.Server) bool {
					return (s.Status == "ACTIVE" && s.TaskState == "" && s.Host != host) || s.Status == "ERROR"
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "[%d/%d] %s: %s on %s\n", i+1, len(moving), got.Name, got.Status, got.Host)
			}
			return nil
		},
	}
	cf = addClientFlags(cmd)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every server is rebuilt elsewhere")
	cmd.Flags().StringVar(&to, "target", "", "rebuild every server on this host instead of where the scheduler puts it")
	cmd.Flags().BoolVar(&asPlan, "plan", false, "evacuate as one stored evacuate-all plan (resumed, before drains, progress in keel plan show)")
	cmd.Flags().IntVar(&parallel, "parallel", 0, "with --plan: evacuations in flight at once (0: only the caps limit them)")
	return cmd
}

// hostUse is a host's VCPU, MEMORY_MB and DISK_GB used and capacity as
// Placement counts them; from the hypervisor record's raw figures when
// the server did not say (a class the host lacks is 0 of 0).
func hostUse(h client.Host) (cpu, ram, disk client.HostResource) {
	if h.Placement != nil {
		return h.Placement["VCPU"], h.Placement["MEMORY_MB"], h.Placement["DISK_GB"]
	}
	return client.HostResource{Used: int64(h.VCPUsUsed), Capacity: int64(h.VCPUs)},
		client.HostResource{Used: int64(h.MemoryMBUsed), Capacity: int64(h.MemoryMB)},
		client.HostResource{Used: int64(h.LocalGBUsed), Capacity: int64(h.LocalGB)}
}

// evacuatePlan is keel host evacuate --plan.
func evacuatePlan(cmd *cobra.Command, c *client.Client, cf *clientFlags, o client.EvacuateOptions, wait bool) error {
	p, err := c.EvacuateAll(cmd.Context(), o)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if cf.json() && !wait {
		return writeJSON(out, p)
	}
	fmt.Fprintf(out, "plan %d: evacuating %s: %s (%s)\n", p.ID, o.Host, count(len(p.Moves), "move", "moves"), paceText(p.Pace, p.Options.Parallel))
	if !wait {
		return nil
	}
	final, err := waitPlan(cmd.Context(), c, p.ID, out, serverNames(cmd.Context(), c))
	if err != nil {
		return err
	}
	if cf.json() {
		return writeJSON(out, final)
	}
	return planOutcome(final)
}

func hostListCommand() *cobra.Command {
	var cf *clientFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List hosts with their state and how full they are",
		Long: `list shows one row per hypervisor (os-hypervisors/detail, admin): its
service state (up/down) and status (enabled/disabled), and vCPUs, RAM (GiB)
and disk (GB) used of capacity with a bar each, and its running instances.

Capacity is Placement's: (total − reserved) × allocation_ratio over the
host's provider tree, so 32 cores with cpu_allocation_ratio 4 hold 128
vCPUs; used is what the instances' allocations hold. These are the numbers
the scheduler and the web view use (` + "`keel schedule explain`" + ` shows the
scheduler's per host); --format json gives them under "placement", beside
the resource tracker's raw figures Nova's hypervisor API reports
(vcpus, memory_mb_used, …).

CPU BUSY is what the guests really use beside what they claim: the
host's CPUs busy as its agent last measured them (Nova's cpu.percent,
reported every [metrics] report_interval; --format json gives it under
"measured" with its time), "unavailable" when the host reports none,
and its age when older than a minute.` + clientLong,
		Example: `  keel host list
  keel host list --format json
  OS_CLOUD=keel keel host list`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			hs, err := c.Hosts(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				return writeJSON(out, hs)
			}
			if len(hs) == 0 {
				fmt.Fprintln(out, "no hosts (start agents: keel dev, or keel agent)")
				return nil
			}
			t := newTable(out)
			t.rowRaw("HOST", "STATE", "STATUS", "VCPUS", "", "CPU BUSY", "RAM GiB", "", "DISK GB", "", "VMS")
			for _, h := range hs {
				cpu, ram, disk := hostUse(h)
				t.rowRaw(h.Name, h.State, h.Status,
					fmt.Sprintf("%d/%d", cpu.Used, cpu.Capacity), "VCPU "+bar(float64(cpu.Used), float64(cpu.Capacity)), busy(h.Measured),
					fmt.Sprintf("%.1f/%.1f", float64(ram.Used)/1024, float64(ram.Capacity)/1024), "RAM "+bar(float64(ram.Used), float64(ram.Capacity)),
					fmt.Sprintf("%d/%d", disk.Used, disk.Capacity), "DISK "+bar(float64(disk.Used), float64(disk.Capacity)),
					fmt.Sprint(h.RunningVMs))
			}
			return t.flush()
		},
	}
	cf = addClientFlags(cmd)
	return cmd
}

// busy renders a host's measured CPU for host list: a bar of the CPUs
// busy, its age when older than a minute, "unavailable" without one.
func busy(m *client.HostMeasured) string {
	if m == nil {
		return "unavailable"
	}
	out := "BUSY " + bar(m.CPUPercent, 1)
	if m.AgeSeconds > 60 {
		out += " (" + (time.Duration(m.AgeSeconds) * time.Second).Round(time.Second).String() + " old)"
	}
	return out
}
